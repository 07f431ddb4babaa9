"""The families benchmark still runs: every family once for every system, at zero latency, with its
bookkeeping checked (calls per role, phases entered, endings); figures unchecked."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from boundloop.graph.core.status import Terminal
from boundloop.graph.models.scripted import ScriptedChatModel
from tests.benchmarks.families import (FAMILIES, PEERS, SYSTEMS, FamilyModel, Latency, latency_model, measure, open_bench, parser,
                                       report)

ZERO = Latency(0.0, 0.0)


async def test_every_family_runs_for_every_system_and_the_books_say_what_each_did(db_url: str) -> None:
    with latency_model(ZERO, (ScriptedChatModel, FamilyModel)) as meters:
        async with AsyncExitStack() as stack:
            bench = await open_bench(stack, db_url, meters)
            outcomes = {(system, name): await bench.run(system, family) for name, family in FAMILIES.items() for system in SYSTEMS}
    assert meters == [meters[0]] and meters[0].calls == 0, "each run metered into its own meter, none left behind"

    simple = outcomes["boundloop", "simple"]
    assert (simple.ending, simple.passed) == (Terminal.SUCCESS, True)
    assert dict(simple.meter.roles) == {"actor": 3}, "no planner, judge or critic call"
    control = simple.report.values["control"]
    assert (control["planning"]["plan"], control["judge"]["run"], control["critique"]["run"]) == (False, False, False)

    medium = outcomes["boundloop", "medium"]
    assert (medium.ending, medium.passed, dict(medium.meter.roles)) == (Terminal.SUCCESS, True, {"actor": 4})

    hard = outcomes["boundloop", "hard"]
    assert (hard.ending, hard.passed) == (Terminal.SUCCESS, True), "the first write failed its check and was repaired"
    assert dict(hard.meter.roles) == {"actor": 5, "critic": 2}
    assert hard.report.values["control"]["critique"]["triggers"] == ["the output was repaired 1 time(s)"]

    long = outcomes["boundloop", "long"]
    assert long.ending == Terminal.SUCCESS and long.meter.roles["actor"] == 61
    assert long.report.values["usage"].get("compactions", 0) >= 1, "the context budget bounded the long run"

    for peer in PEERS:
        for name, family in FAMILIES.items():
            outcome = outcomes[peer, name]
            assert dict(outcome.meter.roles) == {"actor": len(family.peer_turns)}, (peer, name)
            assert outcome.ending.startswith("answer ") and outcome.meter.input_tokens > 0, (peer, name)
        assert outcomes[peer, "hard"].passed is False, "create_agent has no check: it ends with the first, wrong write"
        assert outcomes[peer, "simple"].passed is outcomes[peer, "medium"].passed is True
    assert all(outcome.meter.output_tokens > 0 for outcome in outcomes.values())


async def test_a_repetition_runs_alone_and_at_once_and_prints_a_row_per_system(db_url: str, capsys) -> None:
    with latency_model(ZERO, (ScriptedChatModel, FamilyModel)) as meters:
        async with AsyncExitStack() as stack:
            bench = await open_bench(stack, db_url, meters)
            figures = await measure(bench, FAMILIES["simple"], reps=1, runs=2)
    rows = report(FAMILIES["simple"], figures, reps=1, runs=2)
    assert all(len(figures.wall[s]) == len(figures.rates[s]) == 1 for s in SYSTEMS)
    assert not any("concurrent runs failed" in ending for s in SYSTEMS for ending in figures.endings[s])
    assert [row.split(" | ")[1] for row in rows] == list(SYSTEMS)
    assert capsys.readouterr().out.count("2 at once") == len(SYSTEMS)


def test_the_latency_model_is_a_base_plus_a_time_per_output_token_and_is_removed_afterwards() -> None:
    assert Latency(0.3, 0.002).of(50) == pytest.approx(0.4)
    originals = ScriptedChatModel._agenerate, FamilyModel._agenerate
    with latency_model(Latency(0.3, 0.002), (ScriptedChatModel, FamilyModel)):
        assert (ScriptedChatModel._agenerate, FamilyModel._agenerate) != originals
    assert (ScriptedChatModel._agenerate, FamilyModel._agenerate) == originals


def test_the_defaults_are_five_repetitions_300_ms_a_call_and_50_runs_at_once() -> None:
    options = parser().parse_args([])
    assert (options.reps, options.latency_ms, options.concurrency, options.families) == (5, 300.0, 50, list(FAMILIES))
