"""options: the run options `run` and `submit` share, how they become a Task and RunSettings, and
the checks both make before any run exists (a missing key, a bad script, policy or servers file).

Every problem is a `ConfigError` naming the flag, the value and the fix; the command's guard
prints it in one line and exits 2. Never starts or queues a run: `app.py` and `workers.py` do.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from pydantic import ValidationError

from boundloop.graph.core.errors import ConfigError
from boundloop.graph.decisions import budget_overrides
from boundloop.graph.models import roles
from boundloop.graph.task import RunSettings, Task
from boundloop.tools import hosted
from boundloop.tools.config import load_servers
from boundloop.tools.policy import load_policy

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one machine-readable JSON document.")]
DbFlag = Annotated[Optional[str], typer.Option("--database-url", help="PostgreSQL URL (default: BOUNDLOOP_DATABASE_URL, DATABASE_URL, or the local cluster).")]

CriteriaOpt = Annotated[list[str], typer.Option("--criteria", "-c", help="An acceptance criterion (repeatable).")]
TargetOpt = Annotated[list[str], typer.Option("--target", help="What the run may change (repeatable): a path or glob, an address, or KIND:VALUE (path, collection, command, recipient).")]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", help="research_assistant | coding_assistant | support_agent | procurement_agent | sre_agent")]
BudgetOpt = Annotated[list[str], typer.Option("--budget", "-b", help="Override a budget dimension, e.g. tool_calls=10 (repeatable).")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", help="OpenAI-compatible model name, or `scripted`.")]
BaseUrlOpt = Annotated[Optional[str], typer.Option("--base-url", help="OpenAI-compatible endpoint.")]
ScriptOpt = Annotated[Optional[Path], typer.Option("--script", help="Script for the scripted model.")]
ConfigOpt = Annotated[Optional[Path], typer.Option("--config", help="JSON config file: model, base_url, api_key, servers, prices, model_apis, hosted_tools, tool_prices.")]
WorkspaceOpt = Annotated[Optional[Path], typer.Option("--workspace", help="Root of the shipped workspace server (default: current directory).")]
ServersOpt = Annotated[Optional[Path], typer.Option("--servers", help="MCP servers file in the mcpServers JSON shape.")]
PolicyOpt = Annotated[Optional[Path], typer.Option("--policy", help="Permission rules file (JSON): {\"rules\": [{\"action\", \"server\", \"tool\", \"arguments\", \"id\"}]}.")]
UnattendedOpt = Annotated[bool, typer.Option("--unattended", help="No human: every ask becomes deny; never waits.")]
UserOpt = Annotated[Optional[str], typer.Option("--user", help="Tenant/user scope the run acts for (recorded in its trace; the default approver).")]
RoleModelOpt = Annotated[list[str], typer.Option("--role-model", help="A role's own model, ROLE=MODEL (planner, actor, judge, critic; repeatable), e.g. critic=gpt-4o.")]
FallbackModelOpt = Annotated[list[str], typer.Option("--fallback-model", help="The model a role falls back to when its own is unavailable, ROLE=MODEL or *=MODEL (repeatable).")]
PlanningOpt = Annotated[Optional[str], typer.Option("--planning", help="auto (plan complex tasks only; the default) | always | never (no planner call, re-plans included).")]
JudgeOpt = Annotated[Optional[str], typer.Option("--judge", help="auto (judge only the criteria no check covers; the default) | always.")]
CritiqueOpt = Annotated[Optional[str], typer.Option("--critique", help="auto (the critic runs on a trigger only; the default) | always.")]
ApprovalTimeoutOpt = Annotated[Optional[float], typer.Option("--approval-timeout", help="Seconds an approval may wait; later decisions count as rejections.")]


def settings_from(options: dict[str, Any]) -> RunSettings:
    """The run's settings from the shared options (a `--config` file first, flags over it)."""
    values: dict[str, Any] = read_json(options["config"], "config") if options["config"] else {}
    if api_key := values.pop("api_key", None):
        if not os.environ.get("OPENAI_API_KEY"):
            values["api_key_file"] = str(options["config"].resolve())  # the key stays in its file; the run keeps the path
        os.environ.setdefault("OPENAI_API_KEY", api_key)  # also masks it wherever this process's output could quote it
    chosen_model = options["model"] or values.get("model") or ("scripted" if options["script"] else os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    values.update(model=chosen_model, unattended=options["unattended"] or values.get("unattended", False))
    if (timeout := options["approval_timeout"]) is not None:
        if not math.isfinite(timeout) or timeout < 0:
            raise ConfigError(f"--approval-timeout {timeout:g} is not a number of seconds, 0 or more; e.g. --approval-timeout 3600")
        values["approval_timeout_s"] = timeout
    for key in ("base_url", "script", "user", "planning", "judge", "critique"):
        if options.get(key):
            values[key] = str(options[key])
    for flag, key in (("role_model", "role_models"), ("fallback_model", "fallback_models")):
        values[key] = {**values.get(key, {}), **_role_pairs(flag, options.get(flag) or [])}
    if options["servers"]:
        values["servers"] = str(options["servers"].resolve())  # read when a server starts: its secrets never enter the run's state
    elif isinstance(values.get("servers"), str):
        values["servers"] = str((options["config"].parent / values["servers"]).resolve())
    if isinstance(values.get("hosted_tools"), str):
        values["hosted_tools"] = str((options["config"].parent / values["hosted_tools"]).resolve())
    if options["policy"]:
        values["policy"] = read_json(options["policy"], "policy")
    values["workspace_root"] = str((options["workspace"] or Path(values.get("workspace_root") or ".")).resolve())
    try:
        return RunSettings.model_validate(values)
    except ValidationError as error:
        raise ConfigError(f"config: {first_error(error)}") from None


def _role_pairs(flag: str, pairs: list[str]) -> dict[str, str]:
    chosen = {}
    for pair in pairs:
        role, sep, model = pair.partition("=")
        if not sep or not role.strip() or not model.strip():
            raise ConfigError(f"--{flag.replace('_', '-')} {pair!r} is not ROLE=MODEL; e.g. --{flag.replace('_', '-')} critic=gpt-4o")
        chosen[role.strip()] = model.strip()
    return chosen


def task_from(options: dict[str, Any]) -> Task:
    """The task from the shared options: a `--task` file, the goal and the flags over it."""
    values: dict[str, Any] = read_json(options["task_file"], "task") if options["task_file"] else {}
    if options["goal"]:
        values["goal"] = options["goal"]
    if "goal" not in values:
        raise ConfigError("no goal: pass the goal as an argument (boundloop run \"...\") or --task FILE")
    if options["criteria"]:
        values["acceptance_criteria"] = list(options["criteria"])
    if options.get("target"):
        values["targets"] = [*values.get("targets", []), *options["target"]]
    if options["output_schema"]:
        values["output_schema"] = read_json(options["output_schema"], "output schema")
    if options["profile"]:
        values["profile"] = options["profile"]
    values["budget"] = {**values.get("budget", {}), **budget_overrides(options["budget"])}
    try:
        return Task.model_validate(values)
    except ValidationError as error:
        raise ConfigError(f"task: {first_error(error)}") from None


def check_usable(settings: RunSettings) -> None:
    """Fail now, before any run exists, on a missing key, a bad script, policy, servers or hosted
    tools file (a literal secret in the last included: what it declares is checkpointed)."""
    from boundloop.graph.models.catalog import model_for  # the model stack loads only for a command that builds one

    for each in roles.every_model(settings.model_dump(mode="json")):
        model_for(each)
    if settings.policy:
        load_policy(settings.policy)
    if settings.servers:
        load_servers(settings.servers)
    if settings.hosted_tools:
        hosted.load(settings.hosted_tools)


def read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{what} file {str(path)!r} not found") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"{what} file {str(path)!r} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None


def first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    return f"{'.'.join(str(part) for part in first['loc']) or '(root)'}: {first['msg']}"
