"""The import rules of the product, read from the source with `ast`.

Layers, lowest first: checkpoints and mcp_servers → graph.core (the vocabulary) → tools → graph's
contracts (state, task, services and the flat modules beside them) → graph.models → graph.context →
graph.trace → graph.quality → graph.calls → the routing (guards, tripwires) → nodes → the drivers
(builder, server, check, run, console, evals, cli). A module imports only its own layer or lower
ones, nothing imports the CLI, no package depends on itself through others, and no module imports
another module's `_private` name. Every import of product code says `boundloop.`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("graph", "nodes", "tools", "checkpoints", "mcp_servers")
DRIVERS = ("graph.builder", "graph.server", "graph.check", "graph.run", "graph.console", "graph.evals", "graph.cli")
CONCERNS = ("graph.models", "graph.context", "graph.trace", "graph.quality", "graph.calls")
ROUTING = ("graph.guards", "graph.tripwires")
LAYERS = (
    ("checkpoints", "mcp_servers"), ("graph.core",), ("tools",), ("graph",), *((c,) for c in CONCERNS), ROUTING, ("nodes",), DRIVERS,
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[:2] == ["graph", "_package"]:
        parts = parts[2:]
    return ".".join(["boundloop", *(p for p in parts if p != "__init__")])


def product_files() -> Iterator[Path]:
    for folder in FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.py"))


def imports(path: Path) -> Iterator[tuple[int, str, str | None]]:
    """(line, imported module, imported name or None) for every absolute import in the file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                yield node.lineno, node.module, alias.name


def package_of(module: str) -> str:
    """The unit the layer and cycle rules speak of: a graph sub-package or a driver, else the top folder."""
    rest = module.removeprefix("boundloop.")
    for unit in sorted((*DRIVERS, *ROUTING, *CONCERNS, "graph.core"), key=len, reverse=True):
        if rest == unit or rest.startswith(unit + "."):
            return unit
    return rest.split(".")[0]


def layer_of(unit: str) -> int:
    for rank, members in enumerate(LAYERS):
        if unit in members:
            return rank
    return LAYERS.index(("graph",))


def product_edges() -> list[tuple[str, int, str, str | None]]:
    edges = []
    for path in product_files():
        for line, module, name in imports(path):
            if module == "boundloop" or module.startswith("boundloop."):
                edges.append((module_name(path), line, module, name))
    return edges


def test_product_and_tests_import_product_code_only_through_boundloop() -> None:
    # Hidden folders under tests/ hold installed third-party packages (npm), not our code.
    tests = [path for path in sorted((ROOT / "tests").rglob("*.py"))
             if not any(part.startswith(".") for part in path.relative_to(ROOT).parts)]
    bare = [
        f"{path.relative_to(ROOT)}:{line}: import {module}"
        for path in [*product_files(), *tests]
        for line, module, _ in imports(path)
        if module.split(".")[0] in FOLDERS
    ]
    assert bare == []


def test_each_module_imports_only_its_own_layer_or_lower() -> None:
    upward = [
        f"{source}:{line} ({package_of(source)}) imports {target} ({package_of(target)})"
        for source, line, target, _ in product_edges()
        if target != "boundloop" and layer_of(package_of(target)) > layer_of(package_of(source))
    ]
    assert upward == []


def test_nothing_outside_the_cli_imports_it() -> None:
    into_cli = [
        f"{source}:{line} imports {target}"
        for source, line, target, _ in product_edges()
        if package_of(target) == "graph.cli" and package_of(source) != "graph.cli"
    ]
    assert into_cli == []


def test_no_package_depends_on_itself_through_another() -> None:
    graph: dict[str, set[str]] = {}
    for source, _, target, _ in product_edges():
        if target != "boundloop" and package_of(source) != package_of(target):
            graph.setdefault(package_of(source), set()).add(package_of(target))
    cycles = []
    for start in graph:
        seen, stack = set(), [(start, [start])]
        while stack:
            unit, path = stack.pop()
            for nxt in graph.get(unit, ()):
                if nxt == start:
                    cycles.append(" → ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert cycles == []


def test_no_module_imports_another_modules_private_name() -> None:
    private = [
        f"{source}:{line}: from {target} import {name}"
        for source, line, target, name in product_edges()
        if name and name.startswith("_") and not name.startswith("__") and target != source
    ]
    assert private == []


@pytest.mark.parametrize("rule", [test_each_module_imports_only_its_own_layer_or_lower, test_no_module_imports_another_modules_private_name])
def test_the_rules_catch_a_violation(rule, monkeypatch: pytest.MonkeyPatch) -> None:
    """An upward import and a private import, planted in the edges the rules read, are both reported."""
    planted = [("boundloop.tools.gateway", 1, "boundloop.nodes.act", "_brief")]
    monkeypatch.setitem(globals(), "product_edges", lambda: planted)
    with pytest.raises(AssertionError):
        rule()


def test_graph_stays_a_table_of_contents() -> None:
    """At most fifteen modules beside graph's sub-packages, and every package says what it owns."""
    flat = sorted(path.name for path in (ROOT / "graph").glob("*.py") if path.name != "__init__.py")
    assert len(flat) <= 15, flat
    silent = [str(init.relative_to(ROOT)) for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")
              if "_package" not in init.parts and not ast.get_docstring(ast.parse(init.read_text()))]
    assert silent == []


@pytest.mark.parametrize(("unit", "allowed"), [
    ("checkpoints", {"checkpoints"}),
    ("mcp_servers", {"mcp_servers"}),
    ("tools", {"tools", "checkpoints", "graph.core"}),
])
def test_the_lowest_packages_import_only_what_they_build_on(unit: str, allowed: set[str]) -> None:
    outside = [f"{source}:{line} imports {target}" for source, line, target, _ in product_edges()
               if package_of(source) == unit and package_of(target) not in allowed]
    assert outside == []
