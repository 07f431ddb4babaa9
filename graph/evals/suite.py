"""suite: the evaluation suite file — scenarios, what each must end with, and the CI thresholds.

A suite is one JSON file validated here (one clear line for any problem). Paths in it are relative
to the file. A scenario names its task, the model (a scripted-model script, inline or a file, or an
OpenAI-compatible endpoint), the workspace files, extra MCP servers, policy and settings, the
human decisions to give when it waits, and what it must end with. In server `command`/`args`,
`{python}` is this interpreter and `{workspace}` the scenario's fresh workspace directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from boundloop.graph.core.errors import ConfigError
from boundloop.graph.evals.provider_server import HttpFault
from boundloop.graph.models.scripted import Script
from boundloop.graph.core.status import Terminal
from boundloop.graph.task import RunSettings, Task

Mode = Literal["golden", "fault", "budget", "escalation", "replay", "policy", "soak"]
"""The test modes (golden, fault, budget, escalation, replay, policy, soak); each scenario says which one it exercises."""


class SuiteError(ConfigError):
    """The suite file cannot be used; the message names the file, the place and the fix."""


class Endpoint(BaseModel):
    """An OpenAI-compatible model instead of a script (its key comes from OPENAI_API_KEY)."""

    model_config = ConfigDict(extra="forbid")
    model: str
    base_url: str | None = None


class Expect(BaseModel):
    model_config = ConfigDict(extra="forbid")
    terminal: Terminal
    """The terminal (or waiting) code the run must end with."""
    golden: list[str] | None = None
    """The reference path: node names in order, as the trace records them. Trajectory efficiency
    divides the run's steps by its steps; a `golden` scenario must follow it exactly."""
    escalates: bool = False
    """An anomaly is injected that must reach a human or fail closed (escalation accuracy's truth)."""
    memories: dict[str, bool] = Field(default_factory=dict)
    """Memory candidate text → whether it should be promoted (the observations it cites support it): the truth memory write
    quality judges the write gate's decisions against (an unlabelled candidate is not judged)."""


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    mode: Mode
    description: str = ""
    task: Task
    script: Script | str | None = None
    """The scripted model's script, inline ({"roles": ...}) or a path relative to the suite file."""
    endpoint: Endpoint | None = None
    http_faults: dict[str, list[HttpFault]] = Field(default_factory=dict)
    """Over the provider path (`boundloop eval --provider http`) only: per role, transport faults the
    script server answers that role's next requests with before its steps (graph/evals/provider_server.py)."""
    workspace: dict[str, str] = Field(default_factory=dict)
    """Files (relative path → text) written into the scenario's fresh workspace."""
    servers: dict[str, Any] | None = None
    """Extra MCP servers ({"name": entry}, the mcpServers entry shape), beside the workspace server."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """Further RunSettings fields (policy, unattended, tool_timeout_s, prices, ...)."""
    decisions: list[dict[str, Any]] = Field(default_factory=list)
    """Answers given in order, one per human request, as `boundloop approve`/`reject` give them:
    {"decision": "approve" | "reject" | "edit" | "respond", "message", "args", "answer", "grant"}."""
    repeat: int = Field(default=1, ge=1)
    """Runs of this scenario (a soak scenario runs many); each run counts in the metrics."""
    quick: bool = False
    """Part of the quick selection (`boundloop eval --quick`, and the default test suite)."""
    replay: bool = False
    """Run it twice and require the same path, tool calls and terminal code (deterministic replay)."""
    expect: Expect

    @model_validator(mode="after")
    def _one_model(self) -> "Scenario":
        if (self.script is None) == (self.endpoint is None):
            raise ValueError("give exactly one of 'script' (the scripted model) or 'endpoint' (an OpenAI-compatible model)")
        return self


class Bound(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min: float | None = None
    max: float | None = None
    why: str = ""
    """Where the bound is looser than the ideal (100% adherence, 1% timeouts), the reason."""


METRICS = (
    "task_success_rate", "correct_termination", "trajectory_validity", "trajectory_efficiency",
    "escalation_precision", "escalation_recall", "tool_calls_per_run", "failed_tool_calls", "retry_rate",
    "timeout_rate", "budget_adherence", "cost_per_success", "observation_grounding_rate",
    "human_override_rate", "trace_completeness", "memory_write_quality",
    "step_count_efficiency", "loop_depth", "user_correction_rate", "model_calls_per_success", "tokens_per_success",
)
"""Every metric `boundloop eval` reports (graph/evals/metrics.py computes them)."""


class Suite(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    concurrency: int = Field(default=8, ge=1, le=64)
    """Scenarios run at once in one process."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """RunSettings fields every scenario starts from (e.g. `prices`); a scenario's own win."""
    thresholds: dict[str, Bound] = Field(default_factory=dict)
    scenarios: list[Scenario] = Field(min_length=1)

    @model_validator(mode="after")
    def _known(self) -> "Suite":
        if unknown := sorted(set(self.thresholds) - set(METRICS)):
            raise ValueError(f"thresholds name unknown metric(s) {unknown}; known: {list(METRICS)}")
        for scenario in self.scenarios:
            try:
                RunSettings.model_validate({**self.settings, **scenario.settings})
            except ValidationError as error:
                first = error.errors()[0]
                raise ValueError(f"scenario {scenario.name!r} has unusable settings at {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        names = [scenario.name for scenario in self.scenarios]
        if twice := sorted({name for name in names if names.count(name) > 1}):
            raise ValueError(f"scenario names must be unique; repeated: {twice}")
        return self


def quick_selection(suite: Suite) -> Suite:
    """The suite with only its `quick` scenarios (at least one per test mode, in seconds not minutes)."""
    chosen = [scenario for scenario in suite.scenarios if scenario.quick]
    if not chosen:
        raise SuiteError(f"suite {suite.name!r} marks no scenario `quick`; run it whole (without --quick)")
    return suite.model_copy(update={"scenarios": chosen})


PROVIDER_MODES = ("golden", "fault")
"""The families `boundloop eval --provider http` runs through the provider path."""


def provider_selection(suite: Suite) -> Suite:
    """The suite's scripted golden and fault scenarios, to run through the provider path; its name
    says so, so its stored runs and their trend stay apart from the scripted model's."""
    chosen = [scenario for scenario in suite.scenarios if scenario.mode in PROVIDER_MODES and scenario.script is not None]
    if not chosen:
        raise SuiteError(f"suite {suite.name!r} has no scripted golden or fault scenario for --provider http; run it without --provider")
    return suite.model_copy(update={"name": f"{suite.name} (provider http)", "scenarios": chosen})


def load_suite(path: str | Path) -> Suite:
    """Read and validate a suite; scripts given as paths are read now, relative to the file."""
    file = Path(path)
    try:
        raw = json.loads(file.read_text())
    except FileNotFoundError:
        raise SuiteError(f"suite {str(file)!r} not found; pass the path of a suite JSON file (e.g. graph/evals/default.json)") from None
    except (OSError, UnicodeDecodeError) as error:
        raise SuiteError(f"suite {str(file)!r} cannot be read ({error}); pass a readable UTF-8 JSON file") from None
    except json.JSONDecodeError as error:
        raise SuiteError(f"suite {str(file)!r} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None
    try:
        suite = Suite.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = _where(raw, first["loc"])
        raise SuiteError(f"suite {str(file)!r} is malformed at {where}: {first['msg']}") from None
    for scenario in suite.scenarios:
        if isinstance(scenario.script, str):
            script_path = (file.parent / scenario.script).resolve()
            try:
                scenario.script = Script.model_validate_json(script_path.read_text())
            except (OSError, ValidationError) as error:
                reason = error.errors()[0]["msg"] if isinstance(error, ValidationError) else error.strerror
                raise SuiteError(f"suite {str(file)!r}: scenario {scenario.name!r} has an unusable script {str(script_path)!r} ({reason})") from None
    return suite


def _where(raw: Any, loc: tuple[Any, ...]) -> str:
    """`scenarios[3] (name) .expect.terminal`: a location a person can find in the file."""
    parts: list[str] = []
    for position, part in enumerate(loc):
        if isinstance(part, int):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{part}]"]
            if position == 1 and loc[0] == "scenarios" and isinstance(raw, dict):
                scenarios = raw.get("scenarios")
                if isinstance(scenarios, list) and part < len(scenarios) and isinstance(scenarios[part], dict) and "name" in scenarios[part]:
                    parts[-1] += f" ({scenarios[part]['name']})"
        else:
            parts.append(str(part))
    return ".".join(parts) or "the top level"
