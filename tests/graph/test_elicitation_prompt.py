"""The terminal side of a server's question (an interrupt of type `elicitation`): typed fields,
defaults, decline, the refusal of a last answer and the re-send warning."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from boundloop.graph.cli.approvals import _elicitation, ask_decisions

QUESTION = {
    "type": "elicitation", "call_id": "a1.1.q0", "server": "asking", "tool": "asking__ask", "message": "Which colour, and how many?",
    "schema": {"type": "object", "required": ["colour"],
               "properties": {"colour": {"type": "string", "enum": ["red", "green"]}, "count": {"type": "integer", "default": 2},
                              "sure": {"type": "boolean"}}},
}


@pytest.fixture(autouse=True)
def user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER", "ana")


def test_answer_is_typed_and_empty_optional_fields_are_left_out() -> None:
    with CliRunner().isolation(input="a\ngreen\n7\n\n"):
        assert _elicitation(QUESTION) == {"action": "accept", "content": {"colour": "green", "count": 7}, "approver": "ana"}


def test_decline_and_cancel() -> None:
    with CliRunner().isolation(input="d\n"):
        assert _elicitation(QUESTION) == {"action": "decline", "approver": "ana"}
    with CliRunner().isolation(input="c\n"):
        assert _elicitation(QUESTION) == {"action": "cancel", "approver": "ana"}


def test_the_pending_question_is_answered_by_interrupt_id_showing_the_refusal_and_the_resend_warning() -> None:
    asked = {**QUESTION, "refused": "colour: 'blue' is not one of ['red', 'green']", "resend_warning": "asking__note is sent again"}
    with CliRunner().isolation(input="a\nred\n\n\n") as (out, _, _):
        decisions = ask_decisions([{"id": "i1", "value": asked}])
        shown = out.getvalue().decode()
    assert decisions == {"i1": {"action": "accept", "content": {"colour": "red", "count": 2}, "approver": "ana"}}
    assert "That answer was refused: colour: 'blue'" in shown and "Note: asking__note is sent again" in shown
