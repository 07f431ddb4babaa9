"""status: the terminal codes a run can end with, one enum whose values equal their names."""

from __future__ import annotations

from enum import StrEnum


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



def ending(code: Terminal | str, reason: str, next_safe_action: str = "", **detail: str) -> dict[str, str]:
    """How a run ends, as stored in state (plain strings: state stays JSON, never enum objects).
    `detail` adds context a later node needs, e.g. `dimension` for a budget that tripped."""
    return {"code": Terminal(code).value, "reason": reason, "next_safe_action": next_safe_action, **detail}
