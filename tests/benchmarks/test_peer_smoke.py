"""The peer benchmark still runs: its per-iteration comparison at a tiny size (figures unchecked)."""

from __future__ import annotations

from contextlib import AsyncExitStack

from tests.benchmarks.peer import SYSTEMS, iterations, open_bench, soak


async def test_the_per_iteration_comparison_runs_at_a_tiny_size(db_url: str) -> None:
    async with AsyncExitStack() as stack:
        figures = await iterations(await open_bench(stack, db_url, warm_up=False), reps=1, small=1, large=2)
    for system in SYSTEMS:
        checkpoints, writes, blobs, waits = figures["counts"][system]
        assert checkpoints >= 1 and writes >= 1 and waits >= 1, (system, figures["counts"][system])
        assert len(figures["wall"][system]) == len(figures["cpu"][system]) == 1


async def test_the_soak_runs_for_boundloop_and_the_peer_at_a_tiny_size(db_url: str, capsys) -> None:
    async with AsyncExitStack() as stack:
        bench = await open_bench(stack, db_url, warm_up=False)
        for system in ("boundloop", "bare"):
            await soak(bench, 4, system)
    out = capsys.readouterr().out
    assert out.count("wall ms per iteration") == out.count("CPU ms per iteration") == 2
    assert out.count("(linear = 4)") == 2
