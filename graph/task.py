"""task: what a run is asked to do, and the settings it runs with (the graph's input and context).

`Task` is the input schema the LangGraph server and Studio render as the task form; `RunSettings`
is the context schema (model, profile, servers, approvals). Both are JSON-schema friendly and
documented field by field, because those docstrings become the form's descriptions.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from boundloop.graph.forms import budget_overrides_schema, policy_schema, servers_schema

from boundloop.graph.core.profiles import PROFILES, ProfileName
from boundloop.tools import secrets


class Check(BaseModel):
    """A test or artifact check that verify runs through a tool, before asking the judge."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    name: str
    """What the check proves, e.g. "the tests pass" or "summary.md names Chloe"."""
    tool: str
    """Qualified tool name, e.g. `sandbox__run_command` or `workspace__read_file`."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Arguments for the tool; they pass the same gate as any call."""
    kind: Literal["test", "artifact"] = "artifact"
    """Tests run first, then artifact checks: the cheapest decisive evidence first."""
    expect_contains: str | None = None
    """Text the tool's output must contain."""
    expect_exit_code: int | None = None
    """For commands: the `exit_code` the tool's JSON output must report."""


class Task(BaseModel):
    """One unit of work for the loop."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    goal: str = Field(min_length=1)
    """What the agent should achieve, in plain words."""
    acceptance_criteria: list[str] = Field(default_factory=list)
    """Checks the result must pass; the judge and the critic read them."""
    constraints: list[str] = Field(default_factory=list)
    """Things the agent must not do or must respect while working."""
    output_schema: dict[str, Any] | None = None
    """JSON schema the final answer must satisfy (a hard gate in verify)."""
    checks: list[Check] = Field(default_factory=list)
    """Tests and artifact checks verify runs through tools before the judge."""
    targets: list[str] = Field(default_factory=list)
    """What the run may change, beyond the paths, addresses and commands the goal, criteria and checks
    name: a path or glob (`out/`, `docs/*.md`), an address, or `KIND:VALUE` with KIND one of path,
    collection, command, recipient. Once the run has read untrusted tool output, a side effect outside
    these is denied (unattended) or asked (attended)."""
    profile: ProfileName = "coding_assistant"
    """Risk profile: sets budget defaults and permission rules."""
    budget: Annotated[dict[str, float | int | None], WithJsonSchema(budget_overrides_schema())] = Field(default_factory=dict)
    """Per-run overrides of the profile's budget, e.g. {"tool_calls": 10}."""
    require_plan_approval: bool = False
    """Pause for a human to approve the plan before any tool runs."""
    require_result_approval: bool = False
    """A human must see the result before it commits, whatever its confidence."""

    @field_validator("goal")
    @classmethod
    def _goal_not_blank(cls, goal: str) -> str:
        if not goal.strip():
            raise ValueError("goal is blank; describe what the agent should achieve")
        return goal.strip()

    @field_validator("targets")
    @classmethod
    def _targets_parse(cls, targets: list[str]) -> list[str]:
        from boundloop.tools.authority import parse_target

        for text in targets:
            parse_target(text)
        return targets

    @field_validator("output_schema")
    @classmethod
    def _schema_is_valid(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None:
            from jsonschema import validators
            from jsonschema.exceptions import SchemaError

            try:
                validators.validator_for(schema).check_schema(schema)
            except SchemaError as error:
                raise ValueError(f"output_schema is not a valid JSON schema: {error.message}") from None
        return schema

    @field_validator("budget")
    @classmethod
    def _budget_known(cls, budget: dict[str, Any]) -> dict[str, Any]:
        from boundloop.graph.core.budget import Budget

        unknown = sorted(set(budget) - set(Budget.model_fields))
        if unknown:
            raise ValueError(f"unknown budget dimension(s) {unknown}; known: {sorted(Budget.model_fields)}")
        if problems := [problem for name, value in budget.items() if (problem := limit_problem(name, value))]:
            raise ValueError("; ".join(problems))
        Budget.model_validate({**PROFILES["coding_assistant"].model_dump(), **budget})
        return budget

    def content_hash(self) -> str:
        """SHA-256 of the task's canonical JSON: the same task on the same thread hashes the same."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def limit_problem(name: str, value: Any) -> str | None:
    """Why `value` cannot be a budget limit, or None. A NaN limit compares false with everything
    and would switch the budget off; a negative one can never be met."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return f"{name}={value!r} is not a limit; give a finite number, 0 or more, or none for no limit"
    return None


class RunSettings(BaseModel):
    """How a run executes: which model, which tool servers, how approvals work.

    Captured into the checkpointed state at intake, so a resumed run keeps the settings it
    started with even when the resuming process passes none.
    """

    # Validation errors never echo the input: settings may carry a secret (tools/secrets.py).
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", hide_input_in_errors=True)

    model: str = "scripted"
    """`scripted` for the offline scripted model, or an OpenAI-compatible model name (e.g. gpt-4o-mini)."""
    base_url: str | None = None
    """OpenAI-compatible endpoint; default from OPENAI_BASE_URL or the provider's."""
    role_models: dict[Literal["planner", "actor", "judge", "critic"], str] = Field(default_factory=dict)
    """A model per role over `model`, e.g. {"critic": "gpt-4o"}: a critic independent of the actor, a cheaper judge."""
    fallback_models: dict[Literal["planner", "actor", "judge", "critic", "*"], str] = Field(default_factory=dict)
    """The model a role calls when its own is unavailable (circuit open, retries spent, an error that is not
    transient), per role or `*` for every role: a degraded mode, traced, counted per role and named in the ending."""
    base_urls: dict[str, str] = Field(default_factory=dict)
    """An OpenAI-compatible endpoint per model name, over `base_url`: for role or fallback models served elsewhere."""
    api_key_file: str | None = None
    """Absolute path of a JSON file whose `api_key` is the model's key (the CLI's --config file),
    read each time the model is built: a resumed run, in any process, uses the key it started with,
    and the key itself is never stored with the run. None: OPENAI_API_KEY."""
    script: str | None = None
    """Path of the scripted model's JSON script (required when model is `scripted`)."""
    servers: Annotated[dict[str, Any] | str, WithJsonSchema(servers_schema())] | None = None
    """MCP servers: the absolute path of a servers file (read when a server starts), or the
    `mcpServers` document itself, whose `env` and `headers` values must then be `${VAR}` references
    (settings are checkpointed; secrets are not). Default: the shipped workspace server on `workspace_root`."""
    workspace_root: str | None = None
    """Directory the shipped workspace server is confined to."""
    policy: Annotated[dict[str, Any], WithJsonSchema(policy_schema())] | None = None
    """User permission rules, in the policy-file shape {"rules": [...], "trusted_servers": [...]};
    applied together with the profile's presets (deny > ask > allow > default)."""
    user: str = Field(default="default", min_length=1, max_length=200)
    """Who the run is for (user or tenant): persistent memory is kept and recalled per user and profile;
    recorded in the trace as its tenant/user scope, and as the approver of a decision that names none."""
    unattended: bool = False
    """No human available: every `ask` decision becomes `deny`, so the run never waits."""
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict)
    """Extra model prices, USD per million tokens: {"model": [input, output]}."""
    model_apis: dict[str, Literal["chat_completions", "responses"]] = Field(default_factory=dict)
    """The OpenAI API each model is called through, e.g. {"gpt-4.1": "responses"}; models not named
    use Chat Completions. Hosted tools need `responses`."""
    hosted_tools: dict[str, Any] | str | None = None
    """Provider-hosted tools (web search, code interpreter, file search, provider-side MCP connectors):
    the absolute path of a file, or the `{"hostedTools": {...}}` document itself, whose `headers` and
    `authorization` values must be `${VAR}` references (tools/hosted.py)."""
    tool_prices: dict[str, float] = Field(default_factory=dict)
    """Extra hosted tool call prices, USD per call, by provider item type: {"web_search_call": 0.01}."""
    approval_timeout_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Seconds a tool approval may wait; a decision after that counts as a rejection. None: no expiry."""
    count_wait_time: bool = False
    """Charge time spent waiting for a human to the wall-clock budget (default: only active time counts)."""
    tool_timeout_s: float = 30.0
    """Per-call timeout for tools; a call that runs longer is cancelled."""
    model_timeout_s: float = Field(default=120.0, gt=0)
    """Per-request timeout for the model; a request that runs longer is cancelled and retried
    (within budget.retries). No call, of the model or of a tool, outlives the wall-clock budget."""
    context_windows: dict[str, int] = Field(default_factory=dict)
    """Extra model context windows, tokens per request: {"model": tokens} (graph/models/catalog.py CONTEXT_WINDOWS)."""
    context_threshold: float = Field(default=0.8, gt=0, le=1)
    """Share of the context limit at which the actor's context is compacted before the call."""
    max_result_chars: int = 4_000
    """Characters of one tool result the model sees; the full payload is stored."""
    review_threshold: float = 0.5
    """Confidence below this ends the run LOW_CONFIDENCE."""
    commit_threshold: float = 0.8
    """Confidence at or above this commits automatically; between the two thresholds needs review."""
    safety_review_below: float = 0.98
    """A critic's safety score below this sends the result to review however high its confidence."""
    review_unapproved_irreversible: bool = False
    """Send a result to review when an irreversible side effect ran that no human approved."""
    judge_samples: int = Field(default=1, ge=1, le=9)
    """Judge verdicts asked per verification; above 1 the majority decides and their agreement is a confidence signal."""
    repair_stall_window: int = Field(default=2, ge=0)
    """Repair iterations without a better quality score after which repairing stops as stalled:
    the strategy escalates to a re-plan once, then the run ends (or a human reviews) keeping the best output. 0: off."""
    planning: Literal["auto", "always", "never"] | None = None
    """Whether the run asks the planner: `auto` plans a complex task (several criteria or check targets, numbered
    steps in the goal, a plan to approve) and runs a simple one on an implicit one-step plan; `always`; `never`
    (no planner call at all, re-plans included). None: the profile's choice, `auto` unless it asks."""
    judge: Literal["auto", "always"] | None = None
    """`auto`: the judge checks only the acceptance criteria no check covers (a check covers the criterion it is named
    after); `always`: every criterion. None: the profile's choice."""
    critique: Literal["auto", "always"] | None = None
    """`auto`: the critic runs only on a trigger (a failed or undecided verification, a failed call or post-condition,
    a repair, a risky side effect, conflicting sources, low confidence); `always`: on every result. None: the profile's choice."""
    goal_check_every: int = Field(default=10, ge=0)
    """Actor turns between goal checks: a window of that many turns with no new verified observation, no plan
    step done and no better repair score ends the run REPEATED_FAILURE instead of spending the budget. 0: off."""

    @field_validator("servers")
    @classmethod
    def _servers_hold_no_secret(cls, servers: dict[str, Any] | str | None) -> dict[str, Any] | str | None:
        if isinstance(servers, str):
            if not Path(servers).is_absolute():
                raise ValueError(f"servers file {servers!r} is not an absolute path; the run may resume in another directory, so give the full path")
        elif servers is not None and (literal := secrets.literal_secrets(servers)):
            raise ValueError(
                f"{literal[0]} is a literal value; settings are checkpointed, so it would be stored with the run. "
                "Write it as a reference to an environment variable (e.g. \"${TOKEN}\" or \"Bearer ${TOKEN}\") and export that "
                "variable, or put the servers in a file and pass its path (--servers FILE)"
            )
        return servers

    @field_validator("api_key_file")
    @classmethod
    def _key_file_is_absolute(cls, path: str | None) -> str | None:
        if path is not None and not Path(path).is_absolute():
            raise ValueError(f"api key file {path!r} is not an absolute path; the run may resume in another directory, so give the full path")
        return path

    @field_validator("hosted_tools")
    @classmethod
    def _hosted_hold_no_secret(cls, declared: dict[str, Any] | str | None) -> dict[str, Any] | str | None:
        from boundloop.tools import hosted

        if isinstance(declared, str) and not Path(declared).is_absolute():
            raise ValueError(f"hosted tools file {declared!r} is not an absolute path; the run may resume in another directory, so give the full path")
        if isinstance(declared, dict) and (literal := hosted.literal_secrets(declared)):  # a file is checked where it is read
            raise ValueError(hosted.LITERAL.format(where=literal[0]))
        return declared

    @field_validator("tool_prices")
    @classmethod
    def _prices_are_prices(cls, prices: dict[str, float]) -> dict[str, float]:
        if bad := [name for name, value in prices.items() if not math.isfinite(value) or value < 0]:
            raise ValueError(f"tool_prices[{bad[0]!r}] is not a price; give USD per call, 0 or more")
        return prices


class RunInput(BaseModel):
    """The graph's input: a task, and optionally the settings to run it with."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    task: Task
    """The task to run."""
    settings: RunSettings | None = None
    """How to run it. When absent, the run's context (RunSettings) is used. Given here, the
    settings are checkpointed with the input, so a crash before intake's first checkpoint loses nothing."""
