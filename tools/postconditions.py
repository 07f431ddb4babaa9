"""postconditions: what a side-effecting call's result must show before the loop believes it.

The "verified" rung of the grounding ladder (a call's record climbs intended → attempted →
observed → verified → committed, each rung only on evidence): an `ok` from a tool is an
observation, not proof. Where the tool allows a check, the structured result is compared with the
arguments sent (`verify`: the checksum of the content written, the id and data of the record), and
then the world is read back through the same server (`read_back`: the file on disk has that
checksum, the record exists with that data and version, a deleted thing is gone).

A check belongs to the tools it was written for: our shipped servers' writes, recognised by name,
parameters and the result fields their output schema declares, whatever the server is called in
the config. Another server's `write_file(path, content)` declares no checksum, so it is checked by
an independent read instead, where its server offers a read-only `read_text_file` or `read_file`:
the file read back must hold the content sent. A tool we know no check for is verified by its
`ok` alone.

Pure: describes the read-back call and judges its outcome; observe makes the call.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from boundloop.tools.outcome import CallOutcome
from boundloop.tools.registry import ToolSpec


@dataclass(frozen=True)
class Verdict:
    """`checked`: what was compared (empty when the tool has no post-condition); `problem`: why it failed."""

    checked: str = ""
    problem: str | None = None


NO_CHECK = Verdict()
NO_RESULT = "returned no structured result to check it against"


def verify(spec: ToolSpec, arguments: dict[str, Any], structured: Any) -> Verdict:
    """Check the post-condition of `spec(arguments)` on its structured result."""
    check = _check_of(spec)
    if check is None:
        return NO_CHECK
    if not isinstance(structured, dict):
        return Verdict(check.what, NO_RESULT)
    return Verdict(check.what, check.problem(arguments, structured))


@dataclass(frozen=True)
class ReadBack:
    """A read-only call on the write's own server, and what its outcome must show."""

    tool: str
    arguments: dict[str, Any]
    what: str
    expect: Callable[[CallOutcome], str | None]


def read_back(spec: ToolSpec, arguments: dict[str, Any], structured: Any, readers: Mapping[str, ToolSpec]) -> ReadBack | None:
    """The call that reads back what `spec(arguments)` changed; None when the tool allows none.
    `readers`: the tools of the same server, by name."""
    check = _check_of(spec)
    if check is None:
        return _independent_read(spec, arguments, readers)
    if check.read_back is None or verify(spec, arguments, structured).problem is not None:
        return None
    return check.read_back(arguments, structured)


def _check_of(spec: ToolSpec) -> _Check | None:
    """The post-condition written for this tool, if the tool is one it was written for: it takes the
    parameters and declares the result fields the check reads."""
    check = _CHECKS.get(spec.name)
    if check is None or spec.hints.read_only:
        return None
    parameters = (spec.input_schema or {}).get("properties") or {}
    declared = (spec.output_schema or {}).get("properties") or {}
    return check if check.parameters <= parameters.keys() and check.declares <= declared.keys() else None


INDEPENDENT_READERS = ("read_text_file", "read_file")
"""Read tools, in order of preference, that an independent read-back of a foreign write may use."""


def _independent_read(spec: ToolSpec, arguments: dict[str, Any], readers: Mapping[str, ToolSpec]) -> ReadBack | None:
    """A foreign `write_file(path, content)`, read back with its server's own read-only reader."""
    parameters = (spec.input_schema or {}).get("properties") or {}
    if spec.name != "write_file" or spec.hints.read_only or not {"path", "content"} <= parameters.keys():
        return None
    reader = next((readers[name] for name in INDEPENDENT_READERS
                   if name in readers and readers[name].hints.read_only and "path" in (readers[name].input_schema.get("properties") or {})), None)
    if reader is None:
        return None
    content = str(arguments.get("content", ""))

    def expect(outcome: CallOutcome) -> str | None:
        if not outcome.ok:
            return f"reading it back ended {outcome.status}: {outcome.text[:200]}"
        found = outcome.structured.get("content") if isinstance(outcome.structured, dict) else None
        text = found if isinstance(found, str) else outcome.text
        return _mismatch("sha256 of the file read back", _sha256(content), _sha256(text))

    return ReadBack(reader.name, {"path": arguments.get("path")}, "file read back by an independent read", expect)


@dataclass(frozen=True)
class _Check:
    parameters: frozenset[str]
    declares: frozenset[str]
    """The result fields the check reads: a tool whose output schema does not declare them is not the one it was written for."""
    what: str
    problem: Callable[[dict[str, Any], dict[str, Any]], str | None]
    read_back: Callable[[dict[str, Any], dict[str, Any]], ReadBack] | None = None


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _mismatch(name: str, expected: Any, found: Any) -> str | None:
    return None if expected == found else f"{name} is {found!r}, expected {expected!r}"


def _written(arguments: dict[str, Any], result: dict[str, Any]) -> str | None:
    return _mismatch("sha256 of the file", _sha256(str(arguments.get("content", ""))), result.get("sha256"))


def _edited(arguments: dict[str, Any], result: dict[str, Any]) -> str | None:
    before = result.get("previous_content")
    if not isinstance(before, str):
        return NO_RESULT
    expected = before.replace(str(arguments.get("old", "")), str(arguments.get("new", "")), 1)
    return _mismatch("sha256 of the edited file", _sha256(expected), result.get("sha256"))


def _deleted(arguments: dict[str, Any], result: dict[str, Any]) -> str | None:
    content = result.get("deleted_content")
    if not isinstance(content, str):
        return NO_RESULT
    return _mismatch("sha256 of the deleted content", _sha256(content), result.get("sha256"))


def _record(arguments: dict[str, Any], record: Any, *, data: bool) -> str | None:
    if not isinstance(record, dict):
        return NO_RESULT
    expected = {key: arguments[key] for key in ("collection", "id") if arguments.get(key) is not None}
    if data:
        expected["data"] = arguments.get("data")
    for key, value in expected.items():
        if problem := _mismatch(f"record {key}", value, record.get(key)):
            return problem
    return None


def _created(arguments: dict[str, Any], result: dict[str, Any]) -> str | None:
    return _record(arguments, result, data=True)


def _updated(arguments: dict[str, Any], result: dict[str, Any]) -> str | None:
    record, previous = result.get("record"), result.get("previous")
    if problem := _record(arguments, record, data=False):
        return problem
    if not isinstance(previous, dict):
        return NO_RESULT
    return _mismatch("record version", previous.get("version", 0) + 1, record.get("version"))


def _removed(arguments: dict[str, Any], result: dict[str, Any]) -> str | None:
    return _record(arguments, result.get("deleted"), data=False)


def _file_holds(result: dict[str, Any]) -> ReadBack:
    def expect(outcome: CallOutcome) -> str | None:
        found = outcome.structured if isinstance(outcome.structured, dict) else {}
        if not outcome.ok or not isinstance(found.get("content"), str):
            return f"reading it back ended {outcome.status}: {outcome.text[:200]}"
        if found.get("offset") == 0 and found.get("next_offset") is None:
            return _mismatch("sha256 of the file read back", result.get("sha256"), _sha256(found["content"]))
        return None  # too long to read back whole: the write's own checksum stands

    return ReadBack("read_file", {"path": result.get("path")}, "file read back", expect)


def _gone(tool: str, arguments: dict[str, Any]) -> ReadBack:
    def expect(outcome: CallOutcome) -> str | None:
        text = outcome.text.lower()
        if outcome.status == "tool_error" and ("not found" in text or "no such file" in text):
            return None
        return f"still there when read back ({outcome.status}: {outcome.text[:200]})"

    return ReadBack(tool, arguments, "gone when read back", expect)


def _record_holds(record: dict[str, Any]) -> ReadBack:
    def expect(outcome: CallOutcome) -> str | None:
        found = outcome.structured if isinstance(outcome.structured, dict) else {}
        if not outcome.ok:
            return f"the record does not exist when read back ({outcome.status}: {outcome.text[:200]})"
        return _mismatch("record read back", {key: record.get(key) for key in ("id", "data", "version")},
                         {key: found.get(key) for key in ("id", "data", "version")})

    return ReadBack("get_record", {"collection": record.get("collection"), "id": record.get("id")}, "record read back", expect)


_CHECKS: dict[str, _Check] = {
    "write_file": _Check(frozenset({"path", "content"}), frozenset({"sha256", "path"}), "checksum of the written file", _written,
                         lambda _, result: _file_holds(result)),
    "edit_file": _Check(frozenset({"path", "old", "new"}), frozenset({"sha256", "previous_content", "path"}), "checksum of the edited file", _edited,
                        lambda _, result: _file_holds(result)),
    "delete_file": _Check(frozenset({"path"}), frozenset({"sha256", "deleted_content", "path"}), "checksum of the deleted content", _deleted,
                          lambda _, result: _gone("read_file", {"path": result.get("path")})),
    "create_record": _Check(frozenset({"collection", "data"}), frozenset({"id", "data"}), "record id and data", _created,
                            lambda _, result: _record_holds(result)),
    "update_record": _Check(frozenset({"collection", "id", "data"}), frozenset({"record", "previous"}), "record id and version", _updated,
                            lambda _, result: _record_holds(result["record"])),
    "delete_record": _Check(frozenset({"collection", "id"}), frozenset({"deleted"}), "record id", _removed,
                            lambda arguments, _: _gone("get_record", {"collection": arguments["collection"], "id": arguments["id"]})),
}
