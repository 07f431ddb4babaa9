"""tools/breakers.py: repeated calls warn then block; circuits open, half-open and close, all driven by `now`."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from boundloop.tools.breakers import (
    BreakerSettings,
    Refusal,
    RepeatWarning,
    arguments_hash,
    changes,
    check,
    circuit_state,
    merge,
    merged,
    record,
    recorded,
)
from boundloop.tools.registry import ToolHints, ToolSpec

SEARCH = ToolSpec(server="docs", name="search", description="", input_schema={})
READ = ToolSpec(server="files", name="read", description="", input_schema={}, hints=ToolHints(read_only=True), trusted=True)
WRITE = ToolSpec(server="files", name="write", description="", input_schema={}, hints=ToolHints(read_only=False), trusted=True)
FETCH = ToolSpec(server="docs", name="fetch", description="", input_schema={})
SETTINGS = BreakerSettings(block_at=3, failure_threshold=3, cooldown_s=30.0)


def run(state: dict[str, Any], spec: ToolSpec, status: str, now: float, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    return record(state, spec, arguments or {}, status, now, SETTINGS)


def test_identical_calls_warn_on_the_second_and_are_refused_on_the_third() -> None:
    state: dict[str, Any] = {}
    assert check(state, SEARCH, {"q": "x", "n": 1}, 0.0, SETTINGS) is None
    state = run(state, SEARCH, "ok", 0.0, {"q": "x", "n": 1})
    warning = check(state, SEARCH, {"n": 1, "q": "x"}, 1.0, SETTINGS)  # same call, keys in another order
    assert warning == RepeatWarning(
        "repeated_call warning: docs__search was already called 1 time(s) with these exact arguments. "
        "Use the earlier result or change the arguments; identical call number 3 will be refused."
    )
    state = run(state, SEARCH, "ok", 1.0, {"n": 1, "q": "x"})
    assert check(state, SEARCH, {"q": "x", "n": 1}, 2.0, SETTINGS) == Refusal(
        "repeated_call",
        "repeated_call: docs__search was already called 2 times with these exact arguments, so this call was refused. "
        "Use the earlier result, change the arguments, or take another approach.",
    )
    assert check(state, SEARCH, {"q": "y", "n": 1}, 2.0, SETTINGS) is None


def test_refused_calls_do_not_count_as_calls() -> None:
    state = run({}, SEARCH, "denied", 0.0)
    assert check(state, SEARCH, {}, 0.0, SETTINGS) is None


def test_circuit_opens_after_three_failures_then_half_opens_and_closes_on_success() -> None:
    state: dict[str, Any] = {}
    for now, arguments in ((0.0, {"q": 1}), (1.0, {"q": 2})):
        state = run(state, SEARCH, "timeout", now, arguments)
        assert circuit_state(state, "tool:docs__search", now, SETTINGS) == "closed"
    state = run(state, SEARCH, "timeout", 2.0, {"q": 3})
    assert circuit_state(state, "tool:docs__search", 2.0, SETTINGS) == "open"
    assert check(state, SEARCH, {"q": 4}, 31.9, SETTINGS) == Refusal(
        "circuit_open",
        "circuit_open: MCP server 'docs' failed 3 times in a row, so calls to it are paused for 1 s more. "
        "Use another tool meanwhile, or continue without it.",
    )
    assert circuit_state(state, "server:docs", 32.0, SETTINGS) == "half_open"
    assert check(state, SEARCH, {"q": 4}, 32.0, SETTINGS) is None  # the probe may run
    state = run(state, SEARCH, "ok", 32.5, {"q": 4})
    assert circuit_state(state, "tool:docs__search", 33.0, SETTINGS) == "closed"
    assert circuit_state(state, "server:docs", 33.0, SETTINGS) == "closed"


def test_a_failed_probe_in_half_open_reopens_with_a_fresh_cooldown() -> None:
    state: dict[str, Any] = {}
    for i in range(3):
        state = run(state, SEARCH, "server_unavailable", float(i), {"q": i})
    state = run(state, SEARCH, "server_unavailable", 40.0, {"q": 9})
    assert circuit_state(state, "server:docs", 40.0, SETTINGS) == "open"
    assert circuit_state(state, "server:docs", 69.9, SETTINGS) == "open"
    assert circuit_state(state, "server:docs", 70.0, SETTINGS) == "half_open"


def test_tool_errors_open_the_tool_circuit_but_not_the_server_circuit() -> None:
    """A tool that keeps failing is paused; the server's other tools keep working."""
    state: dict[str, Any] = {}
    for i in range(3):
        state = run(state, SEARCH, "tool_error", float(i), {"q": i})
    refusal = check(state, SEARCH, {"q": 9}, 3.0, SETTINGS)
    assert isinstance(refusal, Refusal) and refusal.text.startswith("circuit_open: docs__search failed 3 times in a row")
    assert circuit_state(state, "server:docs", 3.0, SETTINGS) == "closed"
    assert check(state, FETCH, {}, 3.0, SETTINGS) is None


def test_a_success_resets_the_failure_count() -> None:
    state: dict[str, Any] = {}
    for i, status in enumerate(["timeout", "timeout", "ok", "timeout", "timeout"]):
        state = run(state, SEARCH, status, float(i), {"q": i})
    assert circuit_state(state, "tool:docs__search", 5.0, SETTINGS) == "closed"


def test_state_stays_plain_json_and_inputs_are_never_mutated() -> None:
    state = run({}, SEARCH, "timeout", 0.0)
    frozen = copy.deepcopy(state)
    new = run(state, SEARCH, "timeout", 1.0)
    assert state == frozen
    assert json.loads(json.dumps(new)) == new


def test_arguments_hash_ignores_key_order() -> None:
    assert arguments_hash({"a": 1, "b": [1, 2]}) == arguments_hash({"b": [1, 2], "a": 1})
    assert arguments_hash({"a": 1}) != arguments_hash({"a": "1"})


def test_a_step_writes_only_the_entries_it_changed_and_merging_them_gives_the_new_state() -> None:
    """Twenty earlier calls stay out of the delta of the twenty-first; merged back, nothing is lost."""
    before: dict[str, Any] = {}
    for n in range(20):
        before = run(before, SEARCH, "ok", float(n), {"q": n})
    after = run(before, FETCH, "timeout", 20.0, {"url": "x"})
    delta = changes(before, after)
    assert list(delta["calls"]) == [f"docs__fetch#{arguments_hash({'url': 'x'})[:16]}"]
    assert set(delta["circuits"]) == {"tool:docs__fetch", "server:docs"}
    assert merge(before, delta) == after
    assert changes(after, after) == {}


def test_merging_deltas_one_batch_at_a_time_equals_merging_them_all_at_once() -> None:
    """The reducer is replayed in batches of any size after a resume (LangGraph's DeltaChannel contract)."""
    first = changes({}, run({}, SEARCH, "timeout", 0.0))
    second = changes({}, run(run({}, SEARCH, "timeout", 0.0), SEARCH, "ok", 1.0))
    third = {"calls": {"other#1": 4}}
    one_by_one = merge(merge(merge({}, first), second), third)
    assert one_by_one == merge(merge({}, first), merge(second, third))
    assert one_by_one["circuits"]["tool:docs__search"] == {"failures": 0, "opened_at": None}
    assert merge(None, None) == {"calls": {}, "circuits": {}, "progress": {}, "epochs": {}}


def test_recorded_writes_what_recording_each_call_changes_reading_only_the_entries_they_touch() -> None:
    """A node's delta after a wave of calls (observe) equals the changes of recording them one by one,
    for any mix of outcomes, repeats, circuits that open, and outcomes that count for neither."""
    rng = random.Random(11)
    statuses = ["ok", "tool_error", "timeout", "server_unavailable", "cancelled", "unknown_after_crash", "denied"]
    for trial in range(300):
        state: dict[str, Any] = {}
        for _ in range(rng.randint(0, 6)):  # some history first
            state = run(state, rng.choice([SEARCH, FETCH]), rng.choice(statuses), rng.uniform(0, 100), {"q": rng.randint(0, 2)})
        ended = [(rng.choice([SEARCH, FETCH]), {"q": rng.randint(0, 2)}, rng.choice(statuses), rng.uniform(0, 100)) for _ in range(rng.randint(0, 5))]
        after = state
        for spec, arguments, status, now in ended:
            after = run(after, spec, status, now, arguments)
        delta = recorded(state, ended, SETTINGS)
        assert delta == changes(state, after), trial
        assert merge(state, delta) == merge(state, after), trial


def test_recorded_does_not_read_the_calls_a_wave_did_not_make() -> None:
    class OnlyTouched(dict):  # the run's calls, which fail the test if walked
        def walked(self, *args: Any) -> Any:
            raise AssertionError("recorded walked every call of the run")

        __iter__ = keys = values = items = walked  # type: ignore[assignment]

    calls = OnlyTouched({f"docs__search#{n:016x}": 1 for n in range(1000)})
    delta = recorded({"calls": calls, "circuits": {}}, [(FETCH, {"url": "x"}, "ok", 1.0)], SETTINGS)
    assert list(delta["calls"].values()) == [1] and set(delta["circuits"]) == {"tool:docs__fetch", "server:docs"}


def test_a_side_effect_that_succeeded_starts_the_count_of_reads_again_but_never_of_itself() -> None:
    """Reading a file again after writing it is not a loop; writing the same thing three times is."""
    state = run(run({}, READ, "ok", 0.0, {"path": "a"}), READ, "ok", 1.0, {"path": "a"})
    assert isinstance(check(state, READ, {"path": "a"}, 2.0, SETTINGS), Refusal)
    state = run(state, WRITE, "ok", 2.0, {"path": "a", "content": "x"})
    assert check(state, READ, {"path": "a"}, 3.0, SETTINGS) is None
    state = run(state, READ, "ok", 3.0, {"path": "a"})
    assert isinstance(check(state, READ, {"path": "a"}, 4.0, SETTINGS), RepeatWarning)
    state = run(state, READ, "ok", 4.0, {"path": "a"})
    assert isinstance(check(state, READ, {"path": "a"}, 5.0, SETTINGS), Refusal)
    state = run(run(state, WRITE, "ok", 5.0, {"path": "a", "content": "x"}), READ, "ok", 6.0, {"path": "b"})
    assert isinstance(check(state, WRITE, {"path": "a", "content": "x"}, 7.0, SETTINGS), Refusal)  # its own third time


def test_a_side_effect_that_failed_or_was_refused_is_no_progress() -> None:
    state = run(run({}, READ, "ok", 0.0, {"path": "a"}), READ, "ok", 1.0, {"path": "a"})
    for status in ("tool_error", "timeout", "denied", "unknown_after_crash"):
        state = run(state, WRITE, status, 2.0, {"path": "a", "content": status})
        assert isinstance(check(state, READ, {"path": "a"}, 3.0, SETTINGS), Refusal), status


def test_progress_survives_merging_deltas_in_any_batches() -> None:
    """What the checkpoint replays (deltas, merged in batches) gives the same counts as recording in order."""
    rng = random.Random(7)
    calls = [(rng.choice((READ, WRITE)), {"path": rng.choice("ab")}, rng.choice(("ok", "ok", "tool_error"))) for _ in range(60)]
    state: dict[str, Any] = {}
    deltas = []
    for now, (spec, arguments, status) in enumerate(calls):
        delta = recorded(state, [(spec, arguments, status, float(now))], SETTINGS)
        deltas.append(delta)
        state = merge(state, delta)
    batched: dict[str, Any] = {}
    while deltas:
        size = rng.randint(1, 5)
        batch, deltas = deltas[:size], deltas[size:]
        batched = merged(batched, batch)
    for spec in (READ, WRITE):
        for path in "ab":
            assert check(batched, spec, {"path": path}, 99.0, SETTINGS) == check(state, spec, {"path": path}, 99.0, SETTINGS)
