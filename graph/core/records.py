"""records: the shape of each state channel's record, as the nodes write it and LoopState holds it.

Types only: a record is a plain dict at run time (JSON in checkpoints and the trace), so these
`TypedDict`s change nothing the graph stores. A record merged by call id (`observations`,
`approvals`) is written in parts: a later write for the same call carries only the keys it changes,
so every key but `call_id` is optional. The other records are optional where a node leaves a key
out, which is most of them: state is built up by the phases, and a reader asks with `.get`.
"""

from __future__ import annotations

from typing import Any, Literal

from typing_extensions import NotRequired, TypedDict

Stage = Literal["intended", "attempted", "observed", "verified", "committed"]
"""The grounding ladder of a tool call, lowest first: the call was decided (intended), sent
without an answer (attempted), answered (observed), its result checked (verified), kept as part of
the run's result (committed). A call climbs it; nothing above a rung is claimed before it."""

STAGES: tuple[Stage, ...] = ("intended", "attempted", "observed", "verified", "committed")
"""The stages in order, lowest first."""


class Observation(TypedDict, total=False):
    """One tool call on the grounding ladder (`observations`, merged by call id)."""

    call_id: str
    tool_call_id: str
    name: str
    tool: str
    server: str | None
    args: dict[str, Any]
    args_hash: str
    phase: str
    """The phase that made the call: act, retrieve, verify."""
    step_id: str | None
    stage: Stage
    status: str
    """How the call ended (ok, tool_error, denied, budget_exceeded, …), or pending."""
    detail: str | None
    side_effect: bool | None
    reversibility: str
    hosted: bool
    provider_id: str
    provider_item: str
    """The provider's item type of a hosted call (e.g. mcp_call, web_search_call)."""
    permitted: bool
    rule: str | None
    outside: list[str]
    """What a side-effecting call in a tainted run reached outside the task's authority (tools/authority.py)."""
    decision: str
    approved: bool
    approver: str | None
    answered_by: str
    grounded: bool
    postcondition: str
    instructions: list[str]
    """The kinds of instruction the tool's result carries (graph/safety.py), which the model must not follow."""
    excerpt: str
    pointer: str | None
    sha256: str | None
    chars: int
    truncated: bool
    attempts: int
    started_at: float
    ended_at: float
    latency_ms: float
    ledger_key: str | None
    server_requests: list[dict[str, Any]]
    """What the server asked of the run during the call (sampling, elicitation), redacted."""


class Approval(TypedDict, total=False):
    """A call waiting for a human decision, then the decision (`approvals`, merged by call id)."""

    call_id: str
    tool_call_id: str
    name: str
    tool: str
    server: str
    args: dict[str, Any]
    args_hash: str
    step_id: str | None
    reason: str | None
    reservation: Usage
    expires_at: float | None
    decision: str
    approver: str | None
    status: str
    run: bool


class Usage(TypedDict, total=False):
    """The budget consumed so far (`usage`), or a node's delta of it: counters, peaks, maps."""

    model_turns: int
    tool_calls: int
    side_effects: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    wall_clock_s: float
    repairs: int
    replans: int
    tool_result_chars: int
    retries: int
    unpriced_model_calls: int
    unpriced_tool_calls: int
    escalations: int
    estimated_usage_calls: int
    memory_writes: int
    context_tokens_total: int
    compactions: int
    recovered_model_calls: int
    """Model calls of steps that never saved their update (a crash, an outage, a stop for a question),
    charged from the write-ahead record (graph/models/write_ahead.py)."""
    context_tokens: int
    """The largest request so far (a peak, not a sum)."""
    per_tool: dict[str, int]
    per_server: dict[str, int]
    calls_by_role: dict[str, int]
    input_tokens_by_role: dict[str, int]
    output_tokens_by_role: dict[str, int]
    cost_usd_by_role: dict[str, float]
    fallbacks_by_role: dict[str, int]
    """Calls a role made to its fallback model because its own was unavailable (graph/models/roles.py)."""


class Step(TypedDict, total=False):
    """One plan step (graph/core/plan.py's PlanStep as JSON) and what the run made of it."""

    id: str
    description: str
    depends_on: list[str]
    tools: list[str]
    args: dict[str, Any]
    optional: bool
    done_when: str
    evidence: dict[str, Any] | None
    parallel: bool
    status: str
    """pending, done or failed."""
    verified: dict[str, str]
    """Tool → the call id of its verified call for this step."""
    failure: str
    failures: int


class Plan(TypedDict, total=False):
    """The plan (`plan`): its steps and what validation and the human made of it."""

    steps: list[Step]
    ordering: str
    blocked: dict[str, Any] | None
    hash: str
    valid: bool
    errors: list[str]
    approved: bool
    approver: str | None
    attempts: int
    revisions: list[dict[str, Any]]
    replan: dict[str, Any]
    """A pending re-plan: the steps it is for, the ones reopened."""
    implicit: bool
    """The one-step plan of a task that is not planned (graph/quality/proportion.py's `implicit_plan`)."""


class Ending(TypedDict):
    """How the run ends (`ending`, graph/core/status.py's `ending`), with any detail a later node needs."""

    code: str
    reason: str
    next_safe_action: str
    dimension: NotRequired[str]
    """The budget dimension that ran out."""
    escalation: NotRequired[str]
    dependency: NotRequired[str]
    resume_to: NotRequired[str]
    """The phase a run stopped by an unavailable dependency continues at."""
    limit: NotRequired[str]
    share: NotRequired[str]
    threshold: NotRequired[str]
    source: NotRequired[str]
    """The call whose result carried instructions (an unsafe detection)."""
    sources: NotRequired[str]
    """The verified calls that disagree, comma-separated (a source conflict)."""
    step: NotRequired[str]
    """The plan step no permitted tool can do (a permission denial)."""
    degraded: NotRequired[str]
    """Which roles called their fallback model because their own was unavailable."""


ResumeTo = Literal["accepted_plan", "plan", "retrieve", "act", "commit", "repair"]
"""Where a run continues after a human answered (`status.resume_to`); accepted_plan: past the plan
the human approved."""


class Status(TypedDict, total=False):
    """Where the run is (`status`): the phase, and once ended, the terminal code."""

    phase: str
    terminal: str
    resume_to: ResumeTo | None
    gated: bool
    """act decided or grounded calls this step (graph/guards.py routes on)."""


class Quality(TypedDict, total=False):
    """Verification verdicts, critique scores, the repair log, failure signatures (`quality`)."""

    verification: dict[str, Any]
    critique: dict[str, Any]
    scores: list[Any]
    repairs: list[dict[str, Any]]
    failure_signatures: list[str]
    best: dict[str, Any]
    accepted_by: str
    stall_replanned: bool
    fresh_from: dict[str, int]
    """Where the repair counts start again after a human granted more repairs."""
    confidence: float
    confidence_signals: dict[str, Any]
    review_triggers: list[str]


PhaseMode = Literal["auto", "always", "never"]
"""How a costly phase is chosen: `auto` decides from the task (or, for the critic, from triggers)."""


class PlanningDecision(TypedDict):
    """Whether the run asks the planner, decided at intake."""

    mode: PhaseMode
    plan: bool
    reason: str


class JudgeDecision(TypedDict):
    """Whether the judge runs, and on which criteria (those no deterministic check covers under `auto`)."""

    mode: PhaseMode
    run: bool
    criteria: list[str]
    reason: str


class CritiqueDecision(TypedDict, total=False):
    """Whether the critic runs: undecided (`run` None) until verify has its verdict and the triggers."""

    mode: PhaseMode
    run: bool | None
    triggers: list[str]
    reason: str
    beside_judge: bool
    """The critic ran beside the judge, in verify's step; the next step (weigh) settles its scores."""


class ListingDecision(TypedDict):
    """Where the run's tool definitions came from at intake, and why (tools/kept_listing.py)."""

    kept: bool
    """Pinned from a listing kept from an earlier run, not listed by the servers at intake."""
    reason: str
    differed: NotRequired[bool]
    """The live listing differed from the kept one (written by act only then: a match, the common
    case, costs no write; `tools` losing its `kept` mark says the check was made)."""


class Control(TypedDict):
    """Which of the costly phases the run enters, and why (`control`)."""

    planning: PlanningDecision
    judge: JudgeDecision
    critique: CritiqueDecision
    listing: NotRequired[ListingDecision]
