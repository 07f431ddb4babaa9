"""The peer benchmark still runs: its per-iteration comparison at a tiny size (figures unchecked)."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from tests.benchmarks.peer import (SYSTEMS, call_times, concurrency, in_run, iterations, model_requests, model_share, open_bench, parser,
                                   read, repetitions, run, soak)
from boundloop.tools import fresh_listing


async def test_the_per_iteration_comparison_runs_at_a_tiny_size(db_url: str) -> None:
    async with AsyncExitStack() as stack:
        bench = await open_bench(stack, db_url, warm_up=False)
        await bench.run("boundloop", 1)  # the workspace server starts (and lists its tools) once, here
        figures = await iterations(bench, reps=1, small=1, large=2)
    for system in SYSTEMS:
        checkpoints, writes, blobs, waits, listings = figures["counts"][system]
        assert checkpoints >= 1 and writes >= 1 and waits >= 1, (system, figures["counts"][system])
        assert listings == 0, (system, "one more iteration of a read from the trusted workspace server lists no tools")
        assert len(figures["wall"][system]) == len(figures["cpu"][system]) == 1
        [in_run_wall] = figures["in_run"][system]
        assert in_run_wall > 0, (system, "the large run's two calls are an iteration apart")


def test_the_in_run_time_per_iteration_leaves_out_the_settling_iterations_unless_the_run_is_too_short() -> None:
    assert in_run([0.0, 5.0, 6.0, 7.5], skip=1) == pytest.approx(1250.0)  # iterations 1..3: the slow first one is left out
    assert in_run([0.0, 0.5], skip=10) == pytest.approx(500.0)


async def test_the_soak_runs_for_boundloop_and_the_peer_at_a_tiny_size(db_url: str, capsys) -> None:
    async with AsyncExitStack() as stack:
        bench = await open_bench(stack, db_url, warm_up=False)
        await soak(bench, 4, "boundloop", reps=2)
        await soak(bench, 4, "bare", reps=1)
    out = capsys.readouterr().out
    assert out.count("wall ms per iteration") == out.count("CPU ms per iteration") == out.count("model requests ms per iteration") == 3
    assert out.count("last/first over 2 runs: wall ") == 1 and "over 1 runs" not in out
    assert out.count(", wall without the model requests ") == 1
    assert out.count("(linear = 4)") == 2


async def test_a_soak_under_a_context_budget_compacts_and_says_how_often(db_url: str, capsys) -> None:
    async with AsyncExitStack() as stack:
        await soak(await open_bench(stack, db_url, warm_up=False), 20, "boundloop", reps=1, context_tokens=4500)
    out = capsys.readouterr().out
    assert "one boundloop run of 20 iterations, context_tokens=4500" in out  # 20 reads compact twice under its threshold (3,600)
    [compactions] = [int(line.split(": ")[1]) for line in out.splitlines() if line.startswith("compactions: ")]
    assert compactions >= 1, out


@pytest.mark.parametrize("argv", [["soak", "--system", "bare", "--context-tokens", "6000"], ["iterations", "--context-tokens", "6000"]])
def test_a_context_budget_is_refused_where_it_bounds_nothing(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        run(argv)
    assert exited.value.code == 2
    assert "--context-tokens bounds a boundloop soak's context" in capsys.readouterr().err


def test_each_model_request_counts_for_the_iteration_it_began_in() -> None:
    stamps = [10.0, 11.0, 12.0, 13.0]  # three iterations, from one MCP call to the next
    spans = [(9.0, 0.5), (10.5, 0.1), (11.2, 0.2), (11.9, 0.05), (13.5, 1.0)]  # a planner before, a critic after
    assert model_share(stamps, spans) == pytest.approx([100.0, 250.0, 0.0])


async def test_every_iteration_of_either_system_holds_its_one_model_request(db_url: str) -> None:
    """The split the soak prints sees both systems' model requests (boundloop's scripted model and
    create_agent's), one per iteration, each inside its iteration."""
    async with AsyncExitStack() as stack:
        bench = await open_bench(stack, db_url, warm_up=False)
        for system in ("boundloop", "bare"):
            with call_times() as stamps, model_requests() as spans:
                await bench.run(system, 4)
            assert len(stamps) == 4, system
            assert sum(stamps[0] <= started < stamps[-1] for started, _ in spans) == 3, (system, spans)
            assert all(share > 0 for share in model_share(stamps, spans)), system


async def test_concurrent_runs_of_several_iterations_run_for_every_system(db_url: str, capsys) -> None:
    """`concurrency --run-iterations N`: runs of N iterations each, started at once, for every system,
    with the graph steps a run took, counted in the saver's tables."""
    async with AsyncExitStack() as stack:
        figures = await concurrency(await open_bench(stack, db_url, warm_up=False), [2], reps=1, run_iterations=3)
    out = capsys.readouterr().out
    assert "## 2 runs at once (3 iterations each; 1 repetitions;" in out
    assert out.count("errors 0;") == len(SYSTEMS), out
    wave = figures[2]
    assert all(len(wave.rates[system]) == len(wave.step_rates[system]) == 1 for system in SYSTEMS)
    assert wave.steps_per_run["bare"] == 2 * 3 + 1, "create_agent: a model step and a tool step per iteration, then the answer's"
    assert wave.steps_per_run["boundloop"] > wave.steps_per_run["bare"], wave.steps_per_run
    assert all(wave.step_rates[s][0] == pytest.approx(wave.rates[s][0] * wave.steps_per_run[s]) for s in SYSTEMS)
    assert out.count("graph steps per run") == len(SYSTEMS), out


def test_a_soak_runs_three_times_and_every_other_command_five_unless_told() -> None:
    assert [repetitions(parser().parse_args([command])) for command in ("soak", "iterations", "read")] == [3, 5, 5]
    assert repetitions(parser().parse_args(["soak", "--reps", "1"])) == 1


def test_the_concurrency_command_takes_the_iterations_of_each_run() -> None:
    assert parser().parse_args(["concurrency"]).run_iterations == 1  # the one-iteration figure by default
    assert parser().parse_args(["concurrency", "--runs", "50", "--run-iterations", "20"]).run_iterations == 20
    with pytest.raises(SystemExit):
        parser().parse_args(["concurrency", "--run-iterations", "0"])


async def test_reading_a_threads_state_runs_for_boundloop_and_the_peer_at_a_tiny_size(db_url: str, capsys) -> None:
    async with AsyncExitStack() as stack:
        figures = await read(await open_bench(stack, db_url, warm_up=False), [2], reps=2)
    assert [len(figures[2][system]) for system in ("boundloop", "bare")] == [2, 2]
    assert "2 it: boundloop" in capsys.readouterr().out


def test_list_every_call_measures_a_listing_per_call_for_boundloop_and_none_for_the_peers(db_url: str, capsys, monkeypatch) -> None:
    monkeypatch.setattr(fresh_listing, "MAX_FRESH_S", fresh_listing.MAX_FRESH_S)  # restored after the command sets it
    monkeypatch.setenv("BOUNDLOOP_DATABASE_URL", db_url)
    run(["iterations", "--sizes", "1", "2", "--reps", "1", "--list-every-call"])
    lines = {line.split(":")[0].strip(): line for line in capsys.readouterr().out.splitlines() if "tools lists" in line}
    assert set(lines) == set(SYSTEMS)
    assert lines["boundloop"].endswith(" / 1.00") and lines["bare"].endswith(" / 0.00"), lines
