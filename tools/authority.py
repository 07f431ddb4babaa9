"""authority: what a task may change, and whether a side-effecting call stays inside it.

A task's authority is the list of side-effect targets it declares, each with where it came from:
paths and globs (`path`), record collections (`collection`), programs (`command`) and addressees
of send or mail tools (`recipient`). They are read deterministically from the task: its explicit
`targets`, the paths, addresses and backquoted commands its goal and acceptance criteria name,
and the arguments of its checks (`declared`); an accepted plan widens them with what its steps'
arguments name (`from_plan`). A plan made after the run was tainted widens nothing: the planner had
read the untrusted output and may have been steered by it, so from the first such re-plan on, the
plan targets are those in force before it (`before_taint`, `in_force`). A call reaching nothing of
those kinds (no path, collection, program or recipient argument) is inside when a plan step names
its tool.

A call is compared on what the gateway resolved it reaches (tools/resources.py): each path the
call reaches, physically and lexically, must be one a path target names, resolved the same way
(`resources.path_pattern`, `resources.within`); so a `..` or a symlink that looks in scope but
leads out of it is outside. A directory target names everything below it.

The run is tainted once the output of a tool whose server is not marked `trusted_output` in the
servers file has been read (`taint`): from then on, the gateway's authority stage holds every
side-effecting call that reaches outside the authority (tools/gateway.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from boundloop.tools import resources
from boundloop.tools.registry import ToolSpec

Kind = Literal["path", "collection", "command", "recipient", "tool"]
KINDS: tuple[str, ...] = ("path", "collection", "command", "recipient")
"""The kinds a task's explicit `targets` may name as `KIND:VALUE` (a bare value is a path, or a recipient when it is an address)."""
RULE = "authority"
"""The rule id of the gateway's authority stage."""
OUTSIDE = "outside what the task asked to change"
RECIPIENT_NAMES = frozenset({"to", "cc", "bcc", "recipient", "recipients", "email", "emails", "address", "addresses",
                             "addressee", "url", "webhook", "channel", "destination_url", "endpoint"})
"""Argument names whose values are where a send or mail tool delivers (compared as written, case ignored)."""

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"\bhttps?://[^\s`'\"<>)\]]+")
_CODE = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"(?<![\w@/:.-])((?:[\w*.-]+/)+[\w*.-]*|[\w*-][\w*.-]*\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w@/-])")


def target(kind: str, value: str, source: str) -> dict[str, str]:
    return {"kind": kind, "value": value, "source": source}


def parse_target(text: str) -> tuple[str, str]:
    """`KIND:VALUE` or a bare path or address, as (kind, value); ValueError names the kinds."""
    kind, sep, value = text.partition(":")
    if sep and kind in KINDS and value.strip():
        return kind, value.strip()
    if sep and kind.isidentifier() and "/" not in kind and not value.startswith("//"):
        raise ValueError(f"target {text!r}: unknown kind {kind!r}; use one of {', '.join(KINDS)} (KIND:VALUE), or a bare path")
    if not text.strip():
        raise ValueError("a target is blank; give a path, an address, or KIND:VALUE")
    return ("recipient", text.strip()) if _EMAIL.fullmatch(text.strip()) or _URL.fullmatch(text.strip()) else ("path", text.strip())


def declared(task: Mapping[str, Any]) -> list[dict[str, str]]:
    """The targets a task declares, each with its source, in a stable order without repeats."""
    found = [target(*parse_target(text), "targets") for text in task.get("targets") or []]
    found += _from_text(task.get("goal") or "", "goal")
    for position, criterion in enumerate(task.get("acceptance_criteria") or []):
        found += _from_text(criterion, f"acceptance_criteria[{position}]")
    for position, check in enumerate(task.get("checks") or []):
        found += _from_args(check.get("args") or {}, f"checks[{position}]")
    return _unique(found)


def from_plan(steps: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The targets an accepted plan's steps declare: their arguments, and their tools (for calls that reach nothing else)."""
    found: list[dict[str, str]] = []
    for step in steps:
        source = f"plan step {step.get('id')}"
        found += _from_args(step.get("args") or {}, source)
        found += [target("tool", tool, source) for tool in step.get("tools") or []]
    return _unique(found)


def in_force(boundary: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The targets a tainted run's side effects are held to: the task's, and the accepted plan's
    `steps`, or, once a plan was made after the taint, the plan targets in force before it."""
    held = boundary.get("authority") or {}
    planned = held["before_taint"] if "before_taint" in held else from_plan(steps)
    return [*held.get("targets", []), *planned]


def run_taint(boundary: Mapping[str, Any], observations: Iterable[Mapping[str, Any]], registry: Any) -> dict[str, str] | None:
    """The call that tainted the run: the one recorded in the boundary, else the first untrusted
    result read (None: the run is clean)."""
    return boundary.get("taint") or taint(observations, lambda tool: bool((spec := registry.get(tool)) is not None and spec.trusted_output))


def taint(observations: Iterable[Mapping[str, Any]], trusted_output: Any) -> dict[str, str] | None:
    """The first tool result the model read from a source not marked trusted (None: the run is clean).
    `trusted_output(tool)` says whether a tool's server is marked `trusted_output`."""
    for obs in observations:
        if obs.get("phase") in ("act", "retrieve") and obs.get("status") == "ok" and not trusted_output(obs.get("tool")):
            return {"call_id": str(obs.get("call_id")), "tool": str(obs.get("tool"))}
    return None


def outside(targets: Sequence[Mapping[str, str]], spec: ToolSpec, args: Mapping[str, Any], reached: resources.Resources) -> list[str]:
    """What the call reaches that no target names, as short descriptions (empty: inside the authority)."""
    by_kind: dict[str, list[str]] = {}
    for each in targets:
        by_kind.setdefault(each["kind"], []).append(each["value"])
    patterns = [made for value in by_kind.get("path", []) for glob in _globs(value)
                if (made := resources.path_pattern(glob, reached.root)) is not None]
    found: list[str] = []
    paths = reached.paths
    if reached.commands:  # a program run in the root: judged by the program, not by the root it runs in
        paths = tuple(path for path in paths if not (path.raw == "." and path.real == reached.root))
    for path in paths:
        if not any(resources.within(path, pattern) for pattern in patterns):
            found.append(f"path {resources.shown(path, reached.root)}")
    for command in reached.commands:
        if not any(resources.command_matches(command, value, strict=True) for value in by_kind.get("command", [])):
            found.append(f"program {command.raw}")
    found += [f"collection {name}" for name in reached.collections if name not in by_kind.get("collection", [])]
    allowed = {value.lower() for value in by_kind.get("recipient", [])}
    addressed = _recipients(args)
    found += [f"recipient {value}" for value in addressed if value.lower() not in allowed]
    if not (paths or reached.commands or reached.collections or addressed) and spec.qualified_name not in by_kind.get("tool", []):
        found.append(f"tool {spec.qualified_name} (it names nothing the task declares)")
    return list(dict.fromkeys(found))


def _globs(value: str) -> list[str]:
    """A path target names itself and, when it is a directory, everything below it."""
    bare = value.rstrip("/") or "/"
    return [bare] if set(bare) & set("*?[") else [bare, bare.rstrip("/") + "/**"]


def _from_text(text: str, source: str) -> list[dict[str, str]]:
    found = [target("recipient", address, source) for address in _EMAIL.findall(text)]
    found += [target("recipient", url.rstrip(".,;:"), source) for url in _URL.findall(text)]
    plain = _URL.sub(" ", _EMAIL.sub(" ", text))
    for code in _CODE.findall(plain):
        words = code.split()
        if words and len(words) > 1 and not _PATH.fullmatch(words[0]):
            found.append(target("command", words[0], source))
    found += [target("path", path.rstrip(".,;:"), source) for path in _PATH.findall(plain) if path.rstrip(".,;:")]
    return found


def _from_args(args: Mapping[str, Any], source: str) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    for name, value in args.items():
        strings = [value] if isinstance(value, str) else [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
        if not strings and isinstance(value, Mapping):
            found += _from_args(value, source)
        kind = resources.name_kind(name)
        for text in strings:
            if kind is not None:
                found.append(target("path", text, source))
            elif name.lower() in RECIPIENT_NAMES:
                found.append(target("recipient", text, source))
            elif name.lower() in ("command", "cmd", "argv", "program"):
                program = text.split()[0] if text.split() else ""
                if program:
                    found.append(target("command", program, source))
                break
            elif name.lower() in ("collection", "collections", "table"):
                found.append(target("collection", text, source))
    return found


def _recipients(args: Mapping[str, Any]) -> list[str]:
    found: list[str] = []
    for name, value in args.items():
        if name.lower() in RECIPIENT_NAMES:
            found += [value] if isinstance(value, str) else [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
        elif isinstance(value, Mapping):
            found += _recipients(value)
    return found


def _unique(targets: list[dict[str, str]]) -> list[dict[str, str]]:
    seen: set[tuple[str, str]] = set()
    kept = []
    for each in targets:
        if (each["kind"], each["value"]) not in seen:
            seen.add((each["kind"], each["value"]))
            kept.append(each)
    return kept
