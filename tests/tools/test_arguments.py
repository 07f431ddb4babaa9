"""tools/arguments.py: argument checks the model can act on (path, value, expectation)."""

from __future__ import annotations

from typing import Any

import pytest

from boundloop.tools.arguments import validate
from boundloop.tools.registry import ToolSpec

READ_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "lines": {"type": "array", "items": {"type": "integer", "minimum": 1}},
        "mode": {"enum": ["text", "bytes"]},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def spec(schema: dict[str, Any]) -> ToolSpec:
    return ToolSpec(server="workspace", name="read_file", description="", input_schema=schema)


def test_valid_arguments_give_no_messages() -> None:
    assert validate(spec(READ_SCHEMA), {"path": "a.txt", "lines": [1, 2], "mode": "text"}) == []


@pytest.mark.parametrize(("arguments", "messages"), [
    ({}, ["arguments: missing required argument(s) 'path'."]),
    ({"path": 7}, ["arguments.path: expected string, got integer 7."]),
    ({"path": ""}, ['arguments.path: expected a string of at least 1 characters, got "".']),
    ({"path": "a", "lines": [1, 0]}, ["arguments.lines[1]: expected a number >= 1, got 0."]),
    ({"path": "a", "mode": "json"}, ['arguments.mode: expected one of ["text", "bytes"], got "json".']),
    ({"path": "a", "recursive": True}, ["arguments: unexpected argument(s) 'recursive'; allowed: lines, mode, path."]),
    ({"path": 1, "mode": 2}, ["arguments.mode: expected one of [\"text\", \"bytes\"], got 2.",
                              "arguments.path: expected string, got integer 1."]),
])
def test_each_violation_names_path_value_and_expectation(arguments: dict[str, Any], messages: list[str]) -> None:
    assert validate(spec(READ_SCHEMA), arguments) == messages


def test_arguments_must_be_an_object() -> None:
    assert validate(spec(READ_SCHEMA), ["a.txt"]) == [
        'arguments: expected a JSON object of named arguments, got array ["a.txt"]. Send {"name": value, ...}.'
    ]


def test_long_values_are_truncated_in_messages() -> None:
    """A 10 000-character value is shown as its first characters and its length, not in full."""
    [message] = validate(spec(READ_SCHEMA), {"path": "a", "mode": "x" * 10_000})
    assert message.startswith('arguments.mode: expected one of ["text", "bytes"], got "xxxx')
    assert message.endswith("... (10002 chars).")
    assert len(message) < 200


def test_the_draft_the_schema_declares_is_used() -> None:
    """Draft 7 reads `items: [...]` as a tuple; Draft 2020-12 would ignore it in favour of prefixItems."""
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}}}
    assert validate(spec(draft7), {"pair": ["a", "b"]}) == ["arguments.pair[1]: expected integer, got string \"b\"."]


def test_a_broken_schema_is_reported_not_raised() -> None:
    """A server bug (an invalid schema) blocks the call with a message instead of crashing the gate."""
    [message] = validate(spec({"type": "object", "properties": {"a": {"type": "strng"}}}), {"a": "x"})
    assert message.startswith("the input schema of workspace__read_file is itself invalid (")
    assert message.endswith("), so no call to it can be checked. Use another tool.")
