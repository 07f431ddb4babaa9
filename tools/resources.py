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
- the servers file declares path arguments (`path_arguments`) of any server, by name or by JSON
  pointer with `*` for any key or list position (`/options/path`, `/files/*/path`);
- otherwise arguments named like paths, at any depth of the arguments (`path`, `file_name`,
  `pathname`, `old_path`, `files[].path`, `options.path`, ...) are paths;
- whatever else is said, a schema property of `format` `uri` or `uri-reference` (and any argument
  named like a URI) is a path when its value is a `file:` URI or has no scheme.
A `file:` URI is read as the path it names. A `command` or `code` argument runs a program in the
server's root: the call reaches the whole root. A path the gateway cannot resolve (no known root, a
NUL byte, a leading `~`) stays unresolved, and path rules treat it as reaching everything (fail closed).

Names and declarations can miss an argument, so on a server with a known root whose schema marks
are not relied on, every string anywhere in the arguments that resolves to an existing path (or
to a new entry of an existing directory) is kept as a *mention*; deny rules match mentions too.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Iterable, Iterator, Literal, Mapping
from urllib.parse import unquote, urlsplit

from boundloop.tools.registry import ToolSpec

MARK = "x-boundloop-resource"
Kind = Literal["path", "collection", "command", "code"]
KINDS: frozenset[str] = frozenset({"path", "collection", "command", "code"})
PATH_LIKE_NAMES = frozenset({
    "path", "paths", "source", "destination", "file", "files", "filename", "filepath", "file_path",
    "directory", "dir", "cwd", "root", "target", "from", "to", "src", "dst", "old_path", "new_path",
})
"""Argument names taken as paths when neither the server's schema nor the servers file says which are."""
PATH_WORDS = frozenset({
    "path", "paths", "file", "files", "filename", "filenames", "filepath", "filepaths", "pathname",
    "pathnames", "dir", "dirs", "dirname", "directory", "directories", "folder", "folders",
})
"""A name whose last word (or whole name, `_`, `-` and case ignored) is one of these is a path too:
`file_name`, `pathname`, `input_file`, `dirPath`."""
URI_WORDS = frozenset({"uri", "uris", "fileuri", "fileuris"})
"""Names of arguments holding URIs: a `file:` URI (or one without a scheme) in them is a path."""
URI_FORMATS = frozenset({"uri", "uri-reference", "iri", "iri-reference"})
"""JSON-schema `format`s whose values are read as URIs."""
MAX_MENTION = 4096
"""Longer strings are not taken as mentions (no path on this host is that long)."""
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
PathKind = Literal["path", "uri"]
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
    mentioned: tuple[PathResource, ...] = ()
    """Other strings of the arguments that resolve to an existing place under the root (deny rules see them)."""


def argument_kinds(spec: ToolSpec, arguments: Iterable[str] = ()) -> dict[str, Kind]:
    """Top-level argument name → the kind of resource it names, from a trusted server's schema marks
    and the names the servers file declares. Paths found by name, by pointer or by `format` at any
    depth are `path_values`'; `arguments` is kept for callers that pass the call's names."""
    properties = (spec.input_schema or {}).get("properties") or {}
    kinds: dict[str, Kind] = {}
    if spec.trusted:
        kinds.update({name: schema[MARK] for name, schema in properties.items()
                      if isinstance(schema, dict) and schema.get(MARK) in KINDS})
    for name in spec.declared_paths or ():
        if not name.startswith("/"):
            kinds.setdefault(name, "path")
    return kinds


def relies_on_marks(spec: ToolSpec) -> bool:
    """Whether the server's own schema marks say which arguments are resources (a trusted server that marks any)."""
    properties = (spec.input_schema or {}).get("properties") or {}
    return spec.trusted and any(isinstance(schema, dict) and schema.get(MARK) in KINDS for schema in properties.values())


def name_kind(name: str) -> PathKind | None:
    """`path` when an argument named `name` holds paths, `uri` when it holds URIs, else None."""
    if name.lower() in PATH_LIKE_NAMES:
        return "path"
    words = [word.lower() for word in _WORD.findall(name)]
    if not words:
        return None
    joined, last, last_two = "".join(words), words[-1], "".join(words[-2:])
    if joined in URI_WORDS or last in URI_WORDS or last_two in URI_WORDS:
        return "uri"
    if joined in PATH_WORDS or last in PATH_WORDS or last_two in PATH_WORDS:
        return "path"
    return None


def path_values(spec: ToolSpec, arguments: Mapping[str, Any]) -> list[tuple[str, PathKind]]:
    """Every string of the call's arguments that names a path, with how it is read (see the module docstring)."""
    found: list[tuple[str, PathKind]] = []
    for name, kind in argument_kinds(spec).items():
        if kind == "path":
            found.extend((text, "path") for text in _strings(arguments.get(name)))
    for pointer in spec.declared_paths or ():
        if pointer.startswith("/"):
            found.extend((text, "path") for value in _at(arguments, _split(pointer)) for text in _strings(value))
    if spec.declared_paths is None and not relies_on_marks(spec):
        found.extend((text, kind) for kind, value in _named(arguments) for text in _strings(value))
    for pointer in uri_pointers(spec.input_schema or {}):
        found.extend((text, "uri") for value in _at(arguments, pointer) for text in _strings(value))
    return list(dict.fromkeys(found))


def uri_pointers(schema: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """Pointers (as segments, `*` for any key or position) to the schema's properties of a URI `format`."""
    definitions = {**(schema.get("$defs") or {}), **(schema.get("definitions") or {})}
    pointers: list[tuple[str, ...]] = []

    def walk(node: Any, at: tuple[str, ...], depth: int) -> None:
        if not isinstance(node, Mapping) or depth > 16:
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.rsplit("/", 1)[-1] in definitions:
            walk(definitions[ref.rsplit("/", 1)[-1]], at, depth + 1)
        if node.get("format") in URI_FORMATS and at:
            pointers.append(at)
        for key, sub in (node.get("properties") or {}).items():
            walk(sub, (*at, key), depth + 1)
        for sub in [node.get("items"), node.get("additionalProperties")]:
            walk(sub, (*at, "*"), depth + 1)
        for combined in ("anyOf", "oneOf", "allOf"):
            for sub in node.get(combined) or ():
                walk(sub, at, depth + 1)

    walk(schema, (), 0)
    return list(dict.fromkeys(pointers))


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
    for name, kind in argument_kinds(spec).items():
        value = arguments.get(name)
        if value is None or kind == "path":
            continue
        if kind == "collection":
            collections.extend(_strings(value))
        elif kind == "command":
            runs_code = True
            program = _program_of(value)
            if program is not None:
                commands.append(CommandResource(program, _program(program) if resolve else None))
        else:
            runs_code = True
    for text, how in path_values(spec, arguments):
        paths.extend(resource for raw in _as_paths(text, how) for resource in _path(raw, root if resolve else None))
    if runs_code:
        paths.append(PathResource(".", root, is_dir=root is not None))
    mentioned = _mentions(arguments, root) if resolve and root is not None and not relies_on_marks(spec) else ()
    return Resources(root=root, paths=tuple(dict.fromkeys(paths)), collections=tuple(collections),
                     commands=tuple(commands), patterns=patterns, mentioned=mentioned)


def _path(raw: str, root: str | None) -> list[PathResource]:
    """The physical resolution of `raw`, and its lexical one when that names another place."""
    if root is None or "\0" in raw or raw.startswith("~"):
        return [PathResource(raw, None)]
    joined = os.path.join(root, raw)
    targets = dict.fromkeys([os.path.realpath(joined), os.path.normpath(joined)])
    return [PathResource(raw, target, is_dir=os.path.isdir(target)) for target in targets]


def _as_paths(text: str, how: PathKind) -> list[str]:
    """The paths a path or URI argument's text may name: a `file:` URI's path (a path argument's
    text is also kept as written, for a server that does not read URIs); another scheme names no
    file in a URI argument. A `file:` URI on another host cannot be resolved here (NUL: fail closed)."""
    if not _SCHEME.match(text) or len(text) < 3:
        return list(dict.fromkeys([text, unquote(text)])) if how == "uri" else [text]
    if not text.lower().startswith("file:"):
        return [] if how == "uri" else [text]
    parts = urlsplit(text)
    local = unquote(parts.path) if parts.netloc in ("", "localhost") else "\0"
    return [local] if how == "uri" else [text, local]


def _mentions(arguments: Mapping[str, Any], root: str) -> tuple[PathResource, ...]:
    """Every string of the arguments (keys included) that resolves to an existing place under
    `root`, or to a new entry of an existing directory (what a write would create)."""
    mentioned: list[PathResource] = []
    for text in dict.fromkeys(_every_string(arguments)):
        if not text.strip() or len(text) > MAX_MENTION or "\0" in text or "\n" in text:
            continue
        for raw in _as_paths(os.path.expanduser(text), "path"):
            for resource in _path(raw, root):
                real = resource.real
                if real is not None and (os.path.lexists(real) or os.path.isdir(os.path.dirname(real))):
                    mentioned.append(resource)
    return tuple(dict.fromkeys(mentioned))


def _strings(value: Any) -> list[str]:
    """A string, or the strings of a list."""
    if isinstance(value, str):
        return [value]
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _named(value: Any, depth: int = 0) -> Iterator[tuple[PathKind, Any]]:
    """(how it is read, value) of every key at any depth whose name says it holds paths or URIs."""
    if depth > 32:
        return
    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        kind = name_kind(key) if isinstance(key, str) else None
        if kind is not None:
            yield kind, item
        yield from _named(item, depth + 1)


def _every_string(value: Any, depth: int = 0) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif depth <= 32 and isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                yield key
            yield from _every_string(item, depth + 1)
    elif depth <= 32 and isinstance(value, list):
        for item in value:
            yield from _every_string(item, depth + 1)


def _split(pointer: str) -> tuple[str, ...]:
    """A JSON pointer's segments, `~1` and `~0` unescaped."""
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:])


def _at(value: Any, pointer: tuple[str, ...]) -> list[Any]:
    """The values at `pointer` in `value`; `*` stands for any key or list position."""
    if not pointer:
        return [value]
    head, rest = pointer[0], pointer[1:]
    if isinstance(value, Mapping):
        children = list(value.values()) if head == "*" else [value[head]] if head in value else []
    elif isinstance(value, list):
        children = value if head == "*" else [value[int(head)]] if head.isdigit() and int(head) < len(value) else []
    else:
        children = []
    return [found for child in children for found in _at(child, rest)]


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
