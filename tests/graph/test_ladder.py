"""graph/ladder.py: the counts the fold keeps with each list of call records must be what a pass
over the list gives, after any sequence of writes (new calls, a call's record replaced with another
status, stage, grounding, pointer or phase), however the writes are batched, and for folds from a copy or a
fork of a list; the guards and the grounding that read them must answer as their full scans did."""

from __future__ import annotations

import copy
import random
from typing import Any

from boundloop.graph import ladder, safety
from boundloop.graph.context import payloads as payload_tool
from boundloop.graph.ladder import Ladder
from boundloop.graph.state import _fold_by_call_id
from boundloop.nodes.observe import _done

STATUSES = [None, "pending", "ok", "tool_error", "timeout", "denied", "rejected", "unknown_tool", "repeated_call"]
STAGES = ["intended", "admitted", "observed", "attempted", "verified", "committed"]


def _random_writes(rng: random.Random, calls: int, writes: int) -> list[list[dict[str, Any]]]:
    ids = [f"a{n}.0" for n in range(calls)]
    batches = []
    for _ in range(writes):
        batch = []
        for _ in range(rng.randint(0, 3)):
            record: dict[str, Any] = {"call_id": rng.choice(ids)}
            for key, values in (("status", STATUSES), ("stage", STAGES), ("grounded", [True, False]), ("pointer", [None, "p1", ""]),
                                ("phase", [None, "act", "retrieve"])):
                if rng.random() < 0.5:
                    record[key] = rng.choice(values)
            batch.append(record)
        batches.append(batch)
    return batches


def _shape(index: Ladder) -> tuple[Any, ...]:
    return index.positions, dict(index.statuses), set(index.ungrounded), index.pointers, set(index.evidence)


def _scanned(records: list[dict[str, Any]]) -> tuple[Any, ...]:
    """What the guards and the grounding read from a full pass, as they did before the ladder."""
    return (
        {record.get("status") for record in records},
        [record for record in records if record.get("stage") in {"observed", "attempted"} and not record.get("grounded")],
        any(record.get("pointer") for record in records),
        [record for record in records if record.get("phase") == "retrieve"],
    )


def _read(records: list[dict[str, Any]]) -> tuple[Any, ...]:
    index = ladder.of(records)
    return set(index.statuses), index.awaiting_grounding(records), index.pointers > 0, index.evidence_of(records)


def test_the_kept_ladder_matches_a_full_pass_after_every_fold_batched_forked_or_copied():
    rng = random.Random(20261127)
    for trial in range(200):
        writes = _random_writes(rng, calls=rng.randint(1, 12), writes=rng.randint(1, 12))
        split = rng.randint(0, len(writes))
        start = _fold_by_call_id(None, writes[:split])
        base = copy.copy(start) if trial % 2 else start  # LangGraph may hand a copy of the channel's list
        kept_before = _shape(ladder.of(start))
        folded = _fold_by_call_id(base, writes[split:])
        fork = _fold_by_call_id(start, list(reversed(writes[split:])))  # another branch from the same list
        for records in (start, folded, fork):
            assert _shape(ladder.of(records)) == _shape(ladder.build(records)), trial
            assert _read(records) == _scanned(records), trial
        assert _shape(ladder.of(start)) == kept_before, "a later fold changed the ladder of the list it folded from"


def test_statuses_count_records_and_forget_a_status_no_record_has_any_more():
    folded = _fold_by_call_id(None, [[{"call_id": "a", "status": "denied"}, {"call_id": "b", "status": "denied"}]])
    assert ladder.of(folded).statuses == {"denied": 2}
    folded = _fold_by_call_id(folded, [[{"call_id": "a", "status": "ok"}]])
    assert ladder.of(folded).statuses == {"denied": 1, "ok": 1}
    folded = _fold_by_call_id(folded, [[{"call_id": "b", "status": "ok"}]])
    assert ladder.of(folded).statuses == {"ok": 2} and not safety.refused_any({"observations": folded})


def test_a_list_the_fold_did_not_make_is_read_by_a_full_pass_and_never_takes_a_kept_ladder():
    """A hand-built list with the same length and last record as a kept one, but another record
    before it, is not taken for it (the ladder would say a refusal is there when none is)."""
    last = {"call_id": "b", "status": "ok", "stage": "verified"}
    folded = _fold_by_call_id(None, [[{"call_id": "a", "status": "denied"}], [last]])
    assert safety.refused_any({"observations": folded})
    other = [{"call_id": "a", "status": "ok"}, folded[-1]]
    assert not safety.refused_any({"observations": other})
    assert ladder.KEPT.held(other) is None


def test_the_guards_and_the_grounding_read_the_ladder_as_their_full_scans_read_the_list():
    records = _fold_by_call_id(None, [
        [{"call_id": "a0.0", "status": "ok", "stage": "observed"}, {"call_id": "a0.1", "status": "pending", "stage": "admitted"}],
        [{"call_id": "a0.0", "grounded": True, "stage": "verified"}, {"call_id": "a1.0", "status": "timeout", "stage": "attempted"}],
        [{"call_id": "r0.0", "status": "ok", "stage": "observed", "pointer": "payload-1"}],
    ])
    assert [record["call_id"] for record in ladder.of(records).awaiting_grounding(records)] == ["a1.0", "r0.0"]
    assert payload_tool.offered({"observations": records}) and not payload_tool.offered({"observations": records[:2]})
    assert not safety.refused_any({"observations": records})
    assert [_done(ladder.of(records).record(records, call_id)) for call_id in ("a0.0", "a0.1", "a1.0", "never")] == [True, False, True, False]
    refused = _fold_by_call_id(records, [[{"call_id": "a2.0", "status": "unknown_tool", "stage": "intended"}]])
    assert safety.refused_any({"observations": refused}) and not safety.refused_any({"observations": records})
