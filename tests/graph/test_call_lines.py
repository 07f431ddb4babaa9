"""The compaction record's call lines are the same as grouping the whole history afresh, however the
history changed since the last request (calls appended, records replaced anywhere, another list),
and a request after a call appended groups only what changed, not the run's every call."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from boundloop.graph.context import call_lines as lines_module
from boundloop.graph.context.call_lines import call_lines
from boundloop.graph.fold_index import KEPT
from boundloop.graph.core.status import Terminal
from tests.graph.test_context import CALLS, LIMIT, long_notes, long_script  # noqa: F401  (long_notes: a fixture)


def grouped_afresh(records: list[dict[str, Any]]) -> str:
    """The record's call lines as first written: one pass over every record."""
    def key(obs: dict[str, Any]) -> tuple[Any, ...]:
        return obs.get("tool"), obs.get("status"), obs.get("stage"), obs.get("step_id")

    def ranges(ids: list[str]) -> str:
        parts: list[str] = []
        run: list[int] = []
        for call_id in ids + [""]:
            match = re.fullmatch(r"a(\d+)\.(\d+)", call_id)
            if match and match.group(2) == "0" and (not run or int(match.group(1)) == run[-1] + 1):
                run.append(int(match.group(1)))
                continue
            if run:
                parts.append(f"a{run[0]}.0" if len(run) == 1 else f"a{run[0]}.0–a{run[-1]}.0")
                run = []
            if match and match.group(2) == "0":
                run.append(int(match.group(1)))
            elif call_id:
                parts.append(call_id)
        return ", ".join(parts)

    groups: list[list[dict[str, Any]]] = []
    for obs in records:
        if groups and key(obs) == key(groups[-1][-1]) and not obs.get("pointer") and not groups[-1][-1].get("pointer"):
            groups[-1].append(obs)
        else:
            groups.append([obs])
    return "\n".join(
        f"- {ranges([obs['call_id'] for obs in group])}{f' ({len(group)} calls)' if len(group) > 1 else ''}: "
        f"{group[0].get('tool')} -> {group[0].get('status')}, {group[0].get('stage')}, step {group[0].get('step_id') or '-'}"
        f"{', ' + group[0]['pointer'] if group[0].get('pointer') else ''}"
        for group in groups) or "(none)"


def call(random_: random.Random, turn: int) -> dict[str, Any]:
    record: dict[str, Any] = {"call_id": random_.choice([f"a{turn}.0", f"a{turn}.0", f"a{turn}.1", f"x{turn}", f"a{turn}.0x"]),
                              "tool": random_.choice(["ws__read_file", "ws__read_file", "ws__write_file"]),
                              "status": random_.choice(["ok", "ok", "ok", "error", "denied"]),
                              "stage": random_.choice(["verified", "verified", "grounded", "observed"])}
    if random_.random() < 0.5:
        record["step_id"] = random_.choice(["s1", "s2"])
    if random_.random() < 0.1:
        record["pointer"] = f"payload:{turn}"
    return record


@pytest.mark.parametrize("seed", range(20))
def test_the_lines_kept_for_a_run_are_the_lines_of_its_whole_history_after_any_change(seed: int) -> None:
    random_ = random.Random(seed)
    run_id = f"lines-{seed}"
    records: list[dict[str, Any]] = []
    for turn in range(300):
        change = random_.random()
        if change < 0.7 or not records:  # a call appended (a new list: the fold never changes one in place)
            records = [*records, call(random_, turn)]
        elif change < 0.9:  # a record replaced by a new one: grounding, a late verdict, near the end or anywhere
            position = random_.choice([len(records) - 1, random_.randrange(len(records))])
            records = [*records[:position], {**records[position], **{k: v for k, v in call(random_, turn).items() if k != "call_id"}},
                       *records[position + 1:]]
        elif change < 0.95:  # another list with the same content (restored from a checkpoint)
            records = [dict(record) for record in records]
        else:  # a shorter list (another branch of the thread)
            records = records[:random_.randrange(len(records) + 1)]
        assert call_lines(run_id, records) == grouped_afresh(records), (seed, turn)


def test_each_run_keeps_its_own_lines_and_at_most_the_fold_indexs_bound_of_runs_are_kept() -> None:
    histories = {f"run-{n}": [{"call_id": f"a{k}.0", "tool": f"t{n}", "status": "ok", "stage": "verified"} for k in range(n + 1)]
                 for n in range(KEPT + 3)}
    for run_id, records in histories.items():
        assert call_lines(run_id, records) == grouped_afresh(records)
    for run_id, records in histories.items():
        assert call_lines(run_id, records) == grouped_afresh(records)
    assert len(lines_module._KEPT) == KEPT


@pytest.fixture
def grouped(monkeypatch: pytest.MonkeyPatch) -> list[list[dict[str, Any]]]:
    """The records each request grouped, a list per request."""
    requests: list[list[dict[str, Any]]] = []
    original_of, original_add = lines_module._Lines.of, lines_module._Lines._add

    def of(self: Any, records: list[dict[str, Any]]) -> str:
        requests.append([])
        return original_of(self, records)

    def add(self: Any, position: int, record: dict[str, Any]) -> None:
        requests[-1].append(record)
        original_add(self, position, record)

    monkeypatch.setattr(lines_module._Lines, "of", of)
    monkeypatch.setattr(lines_module._Lines, "_add", add)
    return requests


def test_a_request_after_a_call_appended_groups_that_call_only(grouped) -> None:
    records: list[dict[str, Any]] = []
    for turn in range(1000):
        records = [*records, {"call_id": f"a{turn}.0", "tool": "ws__read_file", "status": "ok", "stage": "verified"}]
        text = call_lines("flat", records)
    assert text == "- a0.0–a999.0 (1000 calls): ws__read_file -> ok, verified, step -"
    assert [len(records) for records in grouped] == [1] * 1000


async def test_a_compacted_runs_requests_group_only_the_calls_made_since_the_one_before(run_script, long_notes, grouped) -> None:
    """The real loop: after the first compaction every actor request carries the record, and the
    calls grounded since the request before are all each one groups again (the grounding replaces a
    call's record before the request that shows it, so the record it replaces was never grouped)."""
    task = {"budget": {"model_turns": None, "tool_calls": None, "input_tokens": None, "wall_clock_s": None,
                       "tool_result_chars": None, "context_tokens": LIMIT}}
    report = await run_script(long_script(CALLS), task=task, unattended=True)
    assert report.status == Terminal.SUCCESS, report.values.get("ending")
    assert report.values["usage"]["compactions"] >= 3
    first, *later = [len(records) for records in grouped]
    assert first > 5 and len(later) > CALLS / 2, (first, later)
    assert max(later) <= 1, later
