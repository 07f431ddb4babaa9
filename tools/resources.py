"""resources: what a tool call reaches, resolved on this host before the policy decides.

Owns which arguments of a tool name a resource, and their resolution. A path is joined to its
server's root and resolved two ways: physically, through every symlink (`os.path.realpath`: a '..'
after a symlink steps up from the link's target), and lexically, '..' by name (`os.path.normpath`).
A server that follows no symlink acts on the lexical target, one that follows them on the physical
target; where the two differ the call reaches both, so a deny or ask rule matching either matches
the call and an allow rule must name both (our workspace server also refuses such a path). A command's program is
looked up on PATH and resolved the same way; a record collection is taken as written (the store
compares it exactly). Resolving touches the filesystem (realpath, lstat, PATH lookup), so the
gateway runs it off the event loop; the policy then decides on the result without touching anything.

Which arguments name a resource:
- a trusted server marks them in its input schema, `{"x-boundloop-resource": KIND}` (ours do), with
  KIND one of `path`, `collection`, `command` (a program and its arguments) or `code`;
- the servers file declares path arguments (`path_arguments`) of any server;
- otherwise arguments named like paths (`path`, `paths`, `source`, `destination`, ...) are paths.
A `command` or `code` argument runs a program in the server's root: the call reaches the whole root.
A path the gateway cannot resolve (no known root, a NUL byte, a leading `~`) stays unresolved, and
path rules treat it as reaching everything (fail closed).
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Iterable, Literal, Mapping

from boundloop.tools.registry import ToolSpec

MARK = "x-boundloop-resource"
Kind = Literal["path", "collection", "command", "code"]
KINDS: frozenset[str] = frozenset({"path", "collection", "command", "code"})
PATH_LIKE_NAMES = frozenset({
    "path", "paths", "source", "destination", "file", "files", "filename", "filepath", "file_path",
    "directory", "dir", "cwd", "root", "target", "from", "to", "src", "dst", "old_path", "new_path",
})
"""Argument names taken as paths when neither the server's schema nor the servers file says which are."""
_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class PathResource:
    raw: str
    """As the model wrote it."""
    real: str | None
    """The absolute real path on this host; None when it cannot be resolved."""
    is_dir: bool = False
    """An existing directory: the call may reach everything below it (list, search, move, run)."""


@dataclass(frozen=True)
class CommandResource:
    raw: str
    """The program as the model wrote it (`argv[0]`)."""
    real: str | None
    """The real path of the program; None when it cannot be known here (not on PATH, or a path
    relative to a working directory that may be anywhere in the root)."""


@dataclass(frozen=True)
class PathPattern:
    """A rule's path glob made absolute and real: its fixed leading directory resolved like a path."""

    glob: str
    base: str
    """The glob's leading directory without glob characters, resolved through symlinks."""
    exists: bool
    """Whether `base` exists: a call reaching a directory above it can reach what the glob names."""


@dataclass(frozen=True)
class Resources:
    """Everything one call reaches, resolved."""

    root: str | None = None
    """The server's real root, or None when unknown."""
    paths: tuple[PathResource, ...] = ()
    collections: tuple[str, ...] = ()
    commands: tuple[CommandResource, ...] = ()
    patterns: Mapping[str, PathPattern] = field(default_factory=dict)
    """The policy's path globs for this tool, resolved against this server's root (missing: unknown root)."""


def argument_kinds(spec: ToolSpec, arguments: Iterable[str] = ()) -> dict[str, Kind]:
    """Argument name → the kind of resource it names, for this tool (see the module docstring).
    `arguments` are the names a call passes: the path-like fallback also sees ones the schema omits."""
    properties = (spec.input_schema or {}).get("properties") or {}
    kinds: dict[str, Kind] = {}
    if spec.trusted:
        kinds.update({name: schema[MARK] for name, schema in properties.items()
                      if isinstance(schema, dict) and schema.get(MARK) in KINDS})
    for name in spec.declared_paths or ():
        kinds.setdefault(name, "path")
    if spec.declared_paths is None and not kinds:
        kinds.update({name: "path" for name in [*properties, *arguments] if name.lower() in PATH_LIKE_NAMES})
    return kinds


def unresolved(spec: ToolSpec, arguments: Mapping[str, Any]) -> Resources:
    """The call's resources without touching the filesystem: every path unresolved (fail closed)."""
    return _collect(spec, arguments, root=None, resolve=False, patterns={})


def resolve(spec: ToolSpec, arguments: Mapping[str, Any], patterns: Iterable[str] = ()) -> Resources:
    """The call's resources resolved on this host, with `patterns` (the policy's path globs that
    apply to this tool) resolved against the same root. Touches the filesystem."""
    root = os.path.realpath(spec.root) if spec.root else None
    resolved = {pattern: made for pattern in patterns if (made := path_pattern(pattern, root)) is not None}
    return _collect(spec, arguments, root=root, resolve=True, patterns=resolved)


def reaches(resource: PathResource, pattern: PathPattern | None) -> bool:
    """Whether a call naming `resource` may touch something `pattern` names (deny and ask rules).

    True when the path matches; when it is a directory holding the pattern's existing base; when
    it is a directory inside the base and the rest of the pattern is a glob; and whenever either
    side could not be resolved.
    """
    if resource.real is None or pattern is None:
        return True
    if matches(resource.real, pattern.glob):
        return True
    if not resource.is_dir:
        return False
    if pattern.exists and _inside(pattern.base, resource.real):
        return True
    return _inside(resource.real, pattern.base) and bool(_GLOB_CHARS & set(pattern.glob[len(pattern.base):]))


def within(resource: PathResource, pattern: PathPattern | None) -> bool:
    """Whether `resource` is itself something `pattern` names (allow rules): resolved and matching."""
    return resource.real is not None and pattern is not None and matches(resource.real, pattern.glob)


def matches(real: str, glob: str) -> bool:
    """`fnmatch` over the whole path (`*` crosses `/`); `dir/**` also names `dir` itself."""
    return fnmatchcase(real, glob) or (glob.endswith("/**") and real == glob[:-3])


def command_matches(command: CommandResource, pattern: str, *, strict: bool) -> bool:
    """A pattern with a `/` is matched against the program's real path, one without against its
    name. Strict (allow rules): the real program must match. Otherwise the real or the written one
    does, and a program that cannot be resolved here matches every pattern (fail closed)."""
    def one(path: str) -> bool:
        return fnmatchcase(path if "/" in pattern else os.path.basename(path), pattern)

    if command.real is None:
        return not strict
    return one(command.real) or (not strict and one(command.raw))


def shown(resource: PathResource, root: str | None) -> str:
    """The resolved path for a message: relative to the root when inside it."""
    if resource.real is None:
        return "an unresolved path"
    if root is not None and _inside(resource.real, root):
        return os.path.relpath(resource.real, root)
    return resource.real


def _collect(spec: ToolSpec, arguments: Mapping[str, Any], *, root: str | None, resolve: bool,
             patterns: Mapping[str, PathPattern]) -> Resources:
    paths: list[PathResource] = []
    collections: list[str] = []
    commands: list[CommandResource] = []
    runs_code = False
    for name, kind in argument_kinds(spec, arguments).items():
        value = arguments.get(name)
        values = value if isinstance(value, list) else [value]
        texts = [item for item in values if isinstance(item, str)]
        if value is None:
            continue
        if kind == "path":
            paths.extend(resource for text in texts for resource in _path(text, root if resolve else None))
        elif kind == "collection":
            collections.extend(texts)
        elif kind == "command":
            runs_code = True
            program = _program_of(value)
            if program is not None:
                commands.append(CommandResource(program, _program(program) if resolve else None))
        else:
            runs_code = True
    if runs_code:
        paths.append(PathResource(".", root, is_dir=root is not None))
    return Resources(root=root, paths=tuple(paths), collections=tuple(collections), commands=tuple(commands), patterns=patterns)


def _path(raw: str, root: str | None) -> list[PathResource]:
    """The physical resolution of `raw`, and its lexical one when that names another place."""
    if root is None or "\0" in raw or raw.startswith("~"):
        return [PathResource(raw, None)]
    joined = os.path.join(root, raw)
    targets = dict.fromkeys([os.path.realpath(joined), os.path.normpath(joined)])
    return [PathResource(raw, target, is_dir=os.path.isdir(target)) for target in targets]


def _program_of(value: Any) -> str | None:
    if isinstance(value, list):
        return value[0] if value and isinstance(value[0], str) else None
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError:
            words = value.split()
        return words[0] if words else None
    return None


def _program(program: str) -> str | None:
    if "\0" in program:
        return None
    if "/" in program:
        return os.path.realpath(program) if os.path.isabs(program) else None
    found = shutil.which(program)
    return os.path.realpath(found) if found else None


def path_pattern(pattern: str, root: str | None) -> PathPattern | None:
    """A rule's path glob made absolute (from `root`) with its fixed leading directory resolved
    through symlinks; None for a relative glob without a root. Touches the filesystem."""
    if os.path.isabs(pattern):
        absolute = pattern
    elif root is None:
        return None
    else:
        absolute = os.path.join(root, pattern)
    first_glob = min((absolute.find(char) for char in _GLOB_CHARS if char in absolute), default=len(absolute))
    fixed = absolute[:first_glob]
    base_text = fixed if first_glob == len(absolute) else fixed[: fixed.rfind("/") + 1]
    base = os.path.realpath(base_text or "/")
    rest = absolute[len(base_text):]
    glob = os.path.join(base, rest) if rest else base
    return PathPattern(glob=glob, base=base, exists=os.path.lexists(base))


def _inside(path: str, directory: str) -> bool:
    """`path` is `directory` or below it."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")
