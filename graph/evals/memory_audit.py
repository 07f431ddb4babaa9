"""memory_audit: the "memory write quality" of one run, judged after the run against the scenario's labels.

The run's write gate (nodes/remember.py) left a `memory` trace event with its verdict on every
candidate. The truth is the scenario's label for each candidate text (`expect.memories`: does the
run's evidence support it), never the gate's own validator. A promoted memory is right when its
label says supported and it still rests on verified observations of its own run whose stored
payloads hash to what it recorded and contain its every significant word; a rejected candidate is
right when its label says unsupported. A supported candidate refused for the budget or by a
person (or for want of one) is neither right nor wrong; an unlabelled candidate is not judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints.store import get_payload
from boundloop.graph.context import memory


NOT_THE_VALIDATOR = ("budget.", "rejected by the approver", "needs approval")
"""How a refusal that is no judgement of the candidate's support begins or reads (nodes/remember.py)."""


@dataclass(frozen=True)
class MemoryVerdict:
    """One candidate of a run: whether the gate promoted it, its label, and whether it counts."""

    promoted: bool
    supported: bool | None
    """The scenario's label (None: unlabelled)."""
    backed: bool = True
    """A promoted memory's sources re-checked in the payload store (always true for a rejection)."""
    refused_elsewhere: bool = False
    """Refused for the budget or by a person, not by the gate's judgement of its support."""

    @property
    def judged(self) -> bool:
        """Counts in the metric: labelled, and not a supported candidate refused for another reason."""
        return self.supported is not None and not (self.supported and not self.promoted and self.refused_elsewhere)

    @property
    def right(self) -> bool:
        return self.judged and (self.promoted and bool(self.supported) and self.backed or not self.promoted and self.supported is False)


async def audit_run(pool: AsyncConnectionPool, run_id: str, events: Sequence[Mapping[str, Any]], state: Mapping[str, Any],
                    labels: Mapping[str, bool]) -> list[MemoryVerdict]:
    """A verdict per candidate the run's write gate decided (none when it proposed no memory)."""
    decisions = [item for event in events if event["kind"] == "memory" for item in event["data"].get("decisions", [])]
    verdicts = []
    for decision in decisions:
        candidate = decision.get("candidate") or {}
        label = labels.get(str(candidate.get("text", ""))) if isinstance(candidate, Mapping) else None
        if decision.get("promoted"):
            verdicts.append(MemoryVerdict(True, label, await _backed(pool, run_id, decision.get("memory") or {}, state)))
        else:
            reason = str(decision.get("reason") or "")
            verdicts.append(MemoryVerdict(False, label, refused_elsewhere=any(mark in reason for mark in NOT_THE_VALIDATOR)))
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
