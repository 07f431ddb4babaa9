"""The terminal side of a server's question: typed fields, defaults, decline."""

from __future__ import annotations

from click.testing import CliRunner

from graph.approvals_prompt import _elicitation

QUESTION = {
    "server": "asking", "tool": "asking__ask", "message": "Which colour, and how many?", "problem": None,
    "schema": {"type": "object", "required": ["colour"],
               "properties": {"colour": {"type": "string", "enum": ["red", "green"]}, "count": {"type": "integer", "default": 2},
                              "sure": {"type": "boolean"}}},
}


def test_answer_is_typed_and_empty_optional_fields_are_left_out() -> None:
    with CliRunner().isolation(input="a\ngreen\n7\n\n"):
        assert _elicitation(QUESTION) == {"action": "accept", "content": {"colour": "green", "count": 7}}


def test_decline_and_cancel() -> None:
    with CliRunner().isolation(input="d\n"):
        assert _elicitation(QUESTION) == {"action": "decline"}
    with CliRunner().isolation(input="c\n"):
        assert _elicitation(QUESTION) == {"action": "cancel"}
