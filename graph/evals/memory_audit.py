"""memory_audit: the "memory write quality" of one run (promoted memories backed by verified observations, unsupported candidates rejected), judged again after the run.

The run's write gate (nodes/remember.py) left a `memory` trace event with its verdict on every
candidate. This module checks those verdicts from what an auditor has — the trace, the run's final
observations and the payload store — not from the gate's own reasons: a promoted memory must rest
on verified observations of its own run whose stored payloads still hash to what it recorded and
still contain its every significant word; a rejected candidate is unsupported when the same
validator, run again on the run's evidence, finds it unsupported. A candidate refused for the
budget or by a human while supported is neither right nor wrong here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints.store import get_payload
from boundloop.graph.context import memory


@dataclass(frozen=True)
class MemoryVerdict:
    """One candidate of a run: whether the gate promoted it and whether the evidence supports it."""

    promoted: bool
    supported: bool

    @property
    def judged(self) -> bool:
        """Counts in the metric: a promoted memory, or an unsupported candidate."""
        return self.promoted or not self.supported

    @property
    def right(self) -> bool:
        return self.promoted == self.supported


async def audit_run(pool: AsyncConnectionPool, run_id: str, events: Sequence[Mapping[str, Any]], state: Mapping[str, Any]) -> list[MemoryVerdict]:
    """A verdict per candidate the run's write gate decided (none when it proposed no memory)."""
    decisions = [item for event in events if event["kind"] == "memory" for item in event["data"].get("decisions", [])]
    if not decisions:
        return []
    bodies = {}
    for obs in state.get("observations", []):
        if obs.get("pointer") and (payload := await get_payload(pool, obs["pointer"])) is not None:
            bodies[obs["pointer"]] = payload.body
    sources = memory.source_texts(state, bodies)
    verdicts = []
    for decision in decisions:
        if decision.get("promoted"):
            verdicts.append(MemoryVerdict(True, await _backed(pool, run_id, decision.get("memory") or {}, state)))
        else:
            verdicts.append(MemoryVerdict(False, memory.judge(decision.get("candidate"), sources)[0] is None))
    return verdicts


async def _backed(pool: AsyncConnectionPool, run_id: str, value: Mapping[str, Any], state: Mapping[str, Any]) -> bool:
    """The promoted memory cites verified, ok observations of this run, and their stored payloads
    (same hash as recorded, written by this run) contain every significant word of its text."""
    if value.get("run_id") != run_id or not memory.supported(value):
        return False
    verified = {obs["call_id"] for obs in state.get("observations", [])
                if obs.get("status") == "ok" and obs.get("stage") in memory.VERIFIED_STAGES}
    texts = []
    for source in value["sources"]:
        payload = await get_payload(pool, source["pointer"])
        if source["call_id"] not in verified or payload is None or payload.thread_id != run_id or payload.sha256 != source["sha256"]:
            return False
        texts.append(payload.body)
    return not memory.words(value["text"]) - set().union(*(memory.words(text) for text in texts))
