"""check: the graph's build-time check, run on the real compiled graph before any run uses it.

1. every node but finalize has a legal outgoing transition; finalize's only exit is END;
2. every cycle is bounded: it takes at least one conditional edge whose guard, on the way to
   that target, consults a budget or a counter in state. The bounds are read from the guards' own
   code, not from a list: a guard's route to a target is bounded when a budget check
   (`graph/core/budget.py`'s `check_before_*`, or a guard helper that returns or tests one, such
   as `must_stop` or `may_call_model`) or a comparison with a `usage` counter decides it, or when
   it fans out one task per pending item of a queue in state (each item runs or is decided once);
3. every node can reach finalize, and END is reachable only through finalize;
4. every path to END writes the run's trace: each node with an edge to END calls the trace
   writer (`record_node`, which records the ending at finalize).
"""

from __future__ import annotations

import ast
import builtins
import functools
import gc
import inspect
import sys
import textwrap
import types
import typing
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from langgraph.graph.state import CompiledStateGraph

from boundloop.graph.core.budget import check_before_model_call, check_before_step
from boundloop.graph.trace.record import record_node

TERMINAL = "finalize"
BUDGET_CHECKS: tuple[Callable[..., Any], ...] = (check_before_step, check_before_model_call)
"""The checks that compare a run's use with its limits; a guard that reaches one consults a budget."""
TRACE_WRITER: Callable[..., Any] = record_node
"""Writes a node's trace events, and the run's ending when the node is finalize."""
COUNTER = "usage"
"""The state channel of a run's counters: a comparison that reads it consults a counter."""

Bounds = dict[str, set[str | None]]
"""Each target a guard can route to → what bounds each route to it (None: nothing)."""


class GraphCheckError(Exception):
    """The compiled graph breaks a compilation rule; the message names the node and the edge."""


def check_graph(compiled: CompiledStateGraph[Any, Any, Any, Any]) -> None:
    drawn = compiled.get_graph()
    edges: dict[str, set[str]] = defaultdict(set)
    for edge in drawn.edges:
        edges[edge.source].add(edge.target)
    nodes = [node for node in drawn.nodes if node not in {"__start__", "__end__"}]
    for node in nodes:
        if not edges[node]:
            raise GraphCheckError(f"node {node!r} has no outgoing transition")
        if "__end__" in edges[node] and node != TERMINAL:
            raise GraphCheckError(f"edge {node}→END bypasses {TERMINAL}: only {TERMINAL} may end a run")
    if edges[TERMINAL] != {"__end__"}:
        raise GraphCheckError(f"{TERMINAL} must lead only to END, found {sorted(edges[TERMINAL])}")
    for node in nodes:
        if not _reaches(edges, node, TERMINAL):
            raise GraphCheckError(f"node {node!r} cannot reach {TERMINAL}")
    bounded = edge_bounds(compiled)
    unbounded = {source: {target for target in targets if not bounded.get((source, target))} for source, targets in edges.items()}
    if cycle := _cycle(unbounded):
        raise GraphCheckError(f"cycle {'→'.join(cycle)} has no bound in state: no guard on it consults a budget or counter before taking its edge")
    for source in sorted(node for node in nodes if "__end__" in edges[node]):
        if not writes_trace(compiled, source):
            raise GraphCheckError(f"path {source}→END writes no trace: {source} never calls {TRACE_WRITER.__name__}, so the run's ending is not recorded")


def edge_bounds(compiled: CompiledStateGraph[Any, Any, Any, Any]) -> dict[tuple[str, str], str]:
    """Every conditional edge whose every route is bounded → what bounds it (a check's name, a
    counter, or the queue a fan-out drains), read from the guard's code."""
    found: dict[tuple[str, str], str] = {}
    for source, branches in compiled.builder.branches.items():
        for branch in branches.values():
            guard = getattr(branch.path, "func", None) or getattr(branch.path, "afunc", None)
            if guard is None:
                continue
            for target, reasons in guard_bounds(inspect.unwrap(guard)).items():
                if reasons and None not in reasons:
                    found[(source, target)] = " or ".join(sorted(reason for reason in reasons if reason))
    return found


def guard_bounds(guard: Callable[..., Any]) -> Bounds:
    """What bounds each route of `guard` (a plain function; a lambda or builtin bounds nothing)."""
    return _Reader().targets(guard, None)


class _Reader:
    """Reads guard functions' syntax trees, following the helpers they call (memoized)."""

    def __init__(self) -> None:
        self._checks: dict[Any, str | None] = {}
        self._targets: dict[Any, Bounds] = {}

    def targets(self, function: Callable[..., Any], checked: str | None) -> Bounds:
        """The targets `function` returns; routes decided under `checked` are bounded by it."""
        function = inspect.unwrap(function)
        if function not in self._targets:
            self._targets[function] = {}  # a recursive helper adds nothing new on its second visit
            tree = _tree(function)
            found: Bounds = defaultdict(set)
            if tree is None:
                for target in _declared(function):
                    found[target].add(None)
            else:
                self._block(function, tree.body, None, found)
            self._targets[function] = dict(found)
        return {target: {checked if reason is None and checked else reason for reason in reasons}
                for target, reasons in self._targets[function].items()}

    def _block(self, function: Callable[..., Any], body: list[ast.stmt], checked: str | None, found: Bounds) -> None:
        for statement in body:
            if isinstance(statement, ast.Return) and statement.value is not None:
                self._returns(function, statement.value, checked, found)
            elif isinstance(statement, ast.If):
                decided = checked or self.consults(function, statement.test)
                self._block(function, statement.body, decided, found)
                self._block(function, statement.orelse, decided, found)
                if decided and statement.body and isinstance(statement.body[-1], ast.Return):
                    checked = decided  # an early return under a check: every later route was decided by it
            elif isinstance(statement, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)):
                for inner in (statement.body, getattr(statement, "orelse", []), getattr(statement, "finalbody", [])):
                    self._block(function, inner, checked, found)

    def _returns(self, function: Callable[..., Any], value: ast.expr, checked: str | None, found: Bounds) -> None:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            found[value.value].add(checked)
        elif isinstance(value, ast.IfExp):
            decided = checked or self.consults(function, value.test)
            self._returns(function, value.body, decided, found)
            self._returns(function, value.orelse, decided, found)
        elif isinstance(value, ast.BoolOp):
            for operand in value.values:
                self._returns(function, operand, checked, found)
        elif isinstance(value, ast.List) and value.elts and all(isinstance(item, ast.Constant) and isinstance(item.value, str) for item in value.elts):
            for item in value.elts:  # nodes run side by side in one step
                self._returns(function, item, checked, found)
        elif isinstance(value, (ast.ListComp, ast.List)) and (sent := _sent_to(value)):
            queue = ast.unparse(value.generators[0].iter) if isinstance(value, ast.ListComp) else None
            found[sent].add(checked or (f"one task per pending item of {queue}" if queue else None))
        elif isinstance(value, ast.Call) and inspect.isfunction(callee := _resolve(function, value.func)):
            for target, reasons in self.targets(callee, checked).items():
                found[target] |= reasons
        else:  # a route the reader cannot follow: any target the guard declares, bounded only by what decided it
            for target in _declared(function):
                found[target].add(checked)

    def consults(self, function: Callable[..., Any], expression: ast.expr) -> str | None:
        """The budget check or counter `expression` consults, or None."""
        for node in ast.walk(expression):
            if isinstance(node, ast.Compare) and _reads_counter(node):
                return f"a {COUNTER} counter"
            if isinstance(node, ast.Call) and (name := self.check(_resolve(function, node.func))):
                return name
        return None

    def check(self, callee: Any) -> str | None:
        """`callee`'s name when it is a budget check, or returns or tests the result of one."""
        callee = inspect.unwrap(callee) if callable(callee) else callee
        if any(callee is known for known in BUDGET_CHECKS):
            return str(callee.__name__)
        if not inspect.isfunction(callee):
            return None
        if callee not in self._checks:
            self._checks[callee] = None
            tree = _tree(callee)
            tested = [node.value for node in ast.walk(tree) if isinstance(node, ast.Return) and node.value is not None] if tree else []
            tested += [node.test for node in ast.walk(tree) if isinstance(node, (ast.If, ast.IfExp))] if tree else []
            if any(self.consults(callee, expression) for expression in tested):
                self._checks[callee] = callee.__name__
        return self._checks[callee]


@functools.cache
def _tree(function: Callable[..., Any]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function's syntax tree, or None for a lambda or code without source.

    Parsed once per function, and with the garbage collector paused: a collection during the parse
    can finalize a cancelled run's coroutines, and CPython 3.11's parser then fails with "AST
    constructor recursion depth mismatch" (a graph is built while such runs wind down)."""
    if not inspect.isfunction(function) or function.__name__ == "<lambda>":
        return None
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return None
    collecting = gc.isenabled()
    gc.disable()
    try:
        parsed = ast.parse(source)
    except SyntaxError:
        return None
    finally:
        if collecting:
            gc.enable()
    first = parsed.body[0] if parsed.body else None
    return first if isinstance(first, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _resolve(function: Callable[..., Any], expression: ast.expr) -> Any:
    """The object a name or dotted name means inside `function` (its globals, then builtins)."""
    if isinstance(expression, ast.Name):
        return function.__globals__.get(expression.id, getattr(builtins, expression.id, None))
    if isinstance(expression, ast.Attribute):
        base = _resolve(function, expression.value)
        return getattr(base, expression.attr, None) if isinstance(base, types.ModuleType) else None
    return None


def _sent_to(value: ast.ListComp | ast.List) -> str | None:
    """The node a fan-out sends its tasks to (`[send("execute", call) for call in ...]`)."""
    element = value.elt if isinstance(value, ast.ListComp) else (value.elts[0] if value.elts else None)
    if isinstance(element, ast.Call) and element.args and isinstance(first := element.args[0], ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def _reads_counter(compare: ast.Compare) -> bool:
    return any(isinstance(node, ast.Constant) and node.value == COUNTER for node in ast.walk(compare))


def _declared(function: Callable[..., Any]) -> list[str]:
    """The targets a guard's `Literal[...]` return annotation names."""
    try:
        returned = typing.get_type_hints(function).get("return")
    except Exception:  # noqa: BLE001  (an annotation that does not resolve declares nothing)
        return []
    options = [returned] if typing.get_origin(returned) is typing.Literal else list(typing.get_args(returned))
    return [str(arg) for option in options if typing.get_origin(option) is typing.Literal for arg in typing.get_args(option)]


def writes_trace(compiled: CompiledStateGraph[Any, Any, Any, Any], node: str) -> bool:
    """Whether `node`'s function reaches the trace writer (through the functions and closures it calls)."""
    runnable = compiled.builder.nodes[node].runnable
    function = getattr(runnable, "afunc", None) or getattr(runnable, "func", None)
    return function is not None and _calls(function, TRACE_WRITER, set())


def _calls(function: Any, goal: Callable[..., Any], seen: set[Any]) -> bool:
    function = inspect.unwrap(function)
    if function is goal:
        return True
    if not inspect.isfunction(function) or function in seen or _library(function):
        return False
    seen.add(function)
    code = function.__code__
    names = set(code.co_names)
    for inner in code.co_consts:
        if isinstance(inner, types.CodeType):
            names |= set(inner.co_names)
    reached = [function.__globals__.get(name) for name in names]
    reached += [cell.cell_contents for cell in function.__closure__ or () if _filled(cell)]
    reached += [getattr(module, name, None) for module in reached if isinstance(module, types.ModuleType) for name in names]
    return any(_calls(candidate, goal, seen) for candidate in reached if callable(candidate))


def _library(function: types.FunctionType) -> bool:
    """Code of an installed library or the standard library: not followed (it writes no trace of ours)."""
    filename = function.__code__.co_filename
    return "site-packages" in filename or filename.startswith(sys.base_prefix)


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, frontier = {start}, [start]
    while frontier:
        node = frontier.pop()
        if node == goal:
            return True
        for target in edges[node] - seen:
            seen.add(target)
            frontier.append(target)
    return False


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `edges` (END excluded), as the nodes it passes, or None."""
    path: list[str] = []
    state: dict[str, str] = {}

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if target == "__end__":
                continue
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None
