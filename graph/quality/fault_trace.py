"""fault_trace: name the plan step that produced what a verification failure or a critic's defect is about.

Deterministic where the evidence tells it, and nowhere else:
- a failing check whose arguments name a file (an artifact check reading `summary.md`), or a failing
  test whose location is a file (`test_calc.py:5`), is traced to the step whose call wrote that file.
  Files are compared by their real path on this host, resolved as the gateway resolves a call's paths
  (tools/resources.py: joined to the server's root, every symlink followed), so `./a.md`, `a.md` and
  a symlink to it are one file. A test location is read from the check's `cwd` in the server's root.
- "Wrote" means a side-effecting call that succeeded and counted for a plan step (observe bound it):
  its path arguments, as the ledger recorded them sent. A call that runs code (a sandbox command) may
  touch any file and names none, so it is no writer. Calls that served no step (a repair's edits)
  never own a file: the file stays the work of the step that produced it.
- A file written by several steps is traced to the last of them: its content is what that step
  left. The trace says so, naming the others.
- A location that is a call id (`a3.0`) is traced to the step that call served.
- The critic may name a step; a name that is not a step of the plan is ignored, never trusted.
Anything else names no step, and a re-plan for it is not targeted (graph/quality/replan.py).
"""

from __future__ import annotations

import asyncio
import os
import posixpath
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from typing import Any

from boundloop.checkpoints import store
from boundloop.graph.services import Services, current_run_id
from boundloop.tools import resources
from boundloop.tools.registry import ToolSpec


@dataclass(frozen=True)
class Writers:
    """Which plan steps wrote which files in this run."""

    by_file: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Real path → the steps whose calls wrote it, in the order they wrote (a step once, at its last write)."""

    def trace(self, files: list[str], shown: dict[str, str] | None = None) -> dict[str, str] | None:
        """The step behind the first of `files` a step wrote: {"step", "trace"}, or None."""
        for real in files:
            if steps := self.by_file.get(real):
                name = (shown or {}).get(real, real)
                others = f" (also written by {', '.join(steps[:-1])}; the last writer is taken)" if len(steps) > 1 else ""
                return {"step": steps[-1], "trace": f"{steps[-1]} wrote {name}{others}"}
        return None


async def run_writers(observations: Sequence[Mapping[str, Any]], registry: Any, services: Services) -> Writers:
    """`writers` of the current run: the arguments come from its ledger (what was sent, after any edit at approval)."""
    if not any(_wrote_for_a_step(obs) for obs in observations):
        return Writers()
    entries = await store.run_ledger(await services.pool(), current_run_id())
    sent = {entry.call_id: entry.result.get("arguments") or {} for entry in entries
            if entry.status == "COMPLETE" and isinstance(entry.result, dict)}
    return await asyncio.to_thread(writers, observations, sent, registry)


def writers(observations: Sequence[Mapping[str, Any]], sent: dict[str, dict[str, Any]], registry: Any) -> Writers:
    """The run's writers, from the observations (which call served which step, and when it ended) and
    `sent` (call id → arguments the ledger recorded). Touches the filesystem (realpath): run it off the loop."""
    by_file: dict[str, list[str]] = {}
    for obs in sorted(filter(_wrote_for_a_step, observations), key=lambda obs: obs.get("ended_at") or 0.0):
        spec = registry.get(obs["tool"])
        if spec is None or obs["call_id"] not in sent:
            continue
        for real in _files(spec, sent[obs["call_id"]]):
            order = by_file.setdefault(real, [])
            if obs["step_id"] in order:
                order.remove(obs["step_id"])
            order.append(obs["step_id"])
    return Writers({real: tuple(steps) for real, steps in by_file.items()})


def served(observations: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Call id → the plan step the call counted for (observe's binding)."""
    return {obs["call_id"]: obs["step_id"] for obs in observations if obs.get("step_id")}


def _wrote_for_a_step(obs: Mapping[str, Any]) -> bool:
    return bool(obs.get("step_id") and obs.get("side_effect") and obs.get("status") == "ok")


def check_files(spec: ToolSpec | None, args: dict[str, Any], location: str | None) -> tuple[list[str], dict[str, str]]:
    """The real paths a failing check points at — the file of its test failure's location first, then
    the files its arguments name — and how to show each. Touches the filesystem (realpath)."""
    if spec is None:
        return [], {}
    shown: dict[str, str] = {}
    files: list[str] = []
    root = os.path.realpath(spec.root) if spec.root else None
    if location and root is not None and (file := _location_file(location)):
        cwd = given if isinstance(given := args.get("cwd"), str) else "."
        real = os.path.realpath(os.path.join(root, cwd, file))
        files.append(real)
        shown[real] = file
    for real, raw in _files_shown(spec, args):
        if real not in shown:
            files.append(real)
            shown[real] = raw
    return files, shown


def critic_step(defect: Mapping[str, Any], steps: Sequence[Mapping[str, Any]], calls: dict[str, str]) -> dict[str, Any]:
    """The critic's defect with the step it is traced to: the step the critic named, when the plan
    has it (a name it does not have is kept only as `ignored_step`), else the step of the call its
    location names; neither: no step."""
    named, location = defect.get("step") or None, defect.get("location") or ""
    traced = {key: value for key, value in defect.items() if key not in ("step", "trace")}
    if named is not None and any(step["id"] == named for step in steps):
        return {**traced, "step": named, "trace": f"named by the critic: {named}"}
    if named is not None:
        traced["ignored_step"] = str(named)
    if location in calls:
        traced.update(step=calls[location], trace=f"{location} served {calls[location]}")
    return traced


def _files(spec: ToolSpec, args: dict[str, Any]) -> list[str]:
    return [real for real, _ in _files_shown(spec, args)]


def _files_shown(spec: ToolSpec, args: dict[str, Any]) -> list[tuple[str, str]]:
    """(real path, as written) of each path argument that names a file (not a directory, not unresolvable)."""
    found = resources.resolve(spec, args)
    return [(path.real, posixpath.normpath(path.raw)) for path in found.paths if path.real is not None and not path.is_dir]


def _location_file(location: str) -> str | None:
    """The file of a `file:line` location (a test failure's), or None when it is not of that form."""
    file, _, line = location.rpartition(":")
    return file if file and line.isdigit() else None
