"""status: the terminal codes a run can end with, one enum whose values equal their names, and the exit
code a command that drove a run ends with, one per family of endings.

| exit | family | endings |
|-----:|--------|---------|
| 0 | success | SUCCESS |
| 1 | unexpected error | (a bug: a traceback) |
| 2 | bad input | refused before anything ran, one line says what to fix |
| 3 | waiting for a human | CONFIRM_REQUIRED, MISSING_INFO, REVIEW_REQUIRED, any pending request, a run stopped mid-step (resume it) |
| 4 | budget or time | BUDGET_EXHAUSTED, TIMEOUT |
| 5 | result not good enough | PARTIAL_SUCCESS, IMPOSSIBLE, AMBIGUOUS_INTENT, VALIDATION_FAIL, LOW_CONFIDENCE, SOURCE_CONFLICT, REPEATED_FAILURE; any `eval` miss (a threshold, an ending, a golden path, a replay) |
| 6 | permission or safety | PERMISSION_DENIED, UNSAFE_DETECTION |
| 7 | dependency unavailable | UNAVAILABLE_DEP |
| 8 | cancelled | USER_CANCEL |
| 130, 143 | halted by SIGINT (Ctrl-C), SIGTERM | USER_CANCEL, resumable |
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import cast

from boundloop.graph.core.records import Ending


class Terminal(StrEnum):
    SUCCESS = "SUCCESS"
    PARTIAL_SUCCESS = "PARTIAL_SUCCESS"
    IMPOSSIBLE = "IMPOSSIBLE"
    MISSING_INFO = "MISSING_INFO"
    """Waiting for the user to supply information; resumable, not final."""
    AMBIGUOUS_INTENT = "AMBIGUOUS_INTENT"
    CONFIRM_REQUIRED = "CONFIRM_REQUIRED"
    """Waiting for a human approval; resumable, not final."""
    REVIEW_REQUIRED = "REVIEW_REQUIRED"
    """Waiting for a human review of the result; resumable, not final."""
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    TIMEOUT = "TIMEOUT"
    VALIDATION_FAIL = "VALIDATION_FAIL"
    LOW_CONFIDENCE = "LOW_CONFIDENCE"
    SOURCE_CONFLICT = "SOURCE_CONFLICT"
    REPEATED_FAILURE = "REPEATED_FAILURE"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    UNSAFE_DETECTION = "UNSAFE_DETECTION"
    UNAVAILABLE_DEP = "UNAVAILABLE_DEP"
    USER_CANCEL = "USER_CANCEL"



def ending(code: Terminal | str, reason: str, next_safe_action: str = "", **detail: str) -> Ending:
    """How a run ends, as stored in state (plain strings: state stays JSON, never enum objects).
    `detail` adds context a later node needs, e.g. `dimension` for a budget that tripped."""
    return cast(Ending, {"code": Terminal(code).value, "reason": reason, "next_safe_action": next_safe_action, **detail})


class Exit(IntEnum):
    """Exit codes of the commands that drive a run (`run`, `resume`, `approve`, `reject`, `demo`,
    `eval`): one per family of endings. 1 is left to unexpected errors, 2 to bad input (Typer's
    usage errors use it too), 128+N to signals."""

    SUCCESS = 0
    UNEXPECTED = 1
    BAD_INPUT = 2
    WAITING = 3
    BUDGET = 4
    QUALITY = 5
    PERMISSION = 6
    UNAVAILABLE = 7
    CANCELLED = 8
    SIGINT = 130
    SIGTERM = 143


EXIT_OF: dict[Terminal, Exit] = {
    Terminal.SUCCESS: Exit.SUCCESS,
    Terminal.CONFIRM_REQUIRED: Exit.WAITING,
    Terminal.MISSING_INFO: Exit.WAITING,
    Terminal.REVIEW_REQUIRED: Exit.WAITING,
    Terminal.BUDGET_EXHAUSTED: Exit.BUDGET,
    Terminal.TIMEOUT: Exit.BUDGET,
    Terminal.PARTIAL_SUCCESS: Exit.QUALITY,
    Terminal.IMPOSSIBLE: Exit.QUALITY,
    Terminal.AMBIGUOUS_INTENT: Exit.QUALITY,
    Terminal.VALIDATION_FAIL: Exit.QUALITY,
    Terminal.LOW_CONFIDENCE: Exit.QUALITY,
    Terminal.SOURCE_CONFLICT: Exit.QUALITY,
    Terminal.REPEATED_FAILURE: Exit.QUALITY,
    Terminal.PERMISSION_DENIED: Exit.PERMISSION,
    Terminal.UNSAFE_DETECTION: Exit.PERMISSION,
    Terminal.UNAVAILABLE_DEP: Exit.UNAVAILABLE,
    Terminal.USER_CANCEL: Exit.CANCELLED,
}
"""Every terminal code's exit code (the module docstring's table)."""


def exit_code(status: str, *, waiting: bool) -> Exit:
    """The exit code of a run that stands at `status`. A run with a request pending waits for a
    human whatever its status reads (a budget extension reads BUDGET_EXHAUSTED); a status that is
    no terminal code (a run stopped mid-step, resumable) waits too."""
    if waiting or status not in Terminal.__members__:
        return Exit.WAITING
    return EXIT_OF[Terminal(status)]
