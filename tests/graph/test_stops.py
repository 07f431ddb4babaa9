"""Where a cancelled drive may stop (graph/core/stops.py): a node in flight says "stop at once"; between
nodes the next node is held at its start and never runs; drives nobody watches are never held.
The end-to-end guarantees (the finished step stays saved, the halt is checkpointed, the run resumes
where it stopped) are tested with real runs in tests/faults/test_endings.py and
tests/security/test_pinning.py."""

from __future__ import annotations

import asyncio

from boundloop.graph.core.stops import Stops


async def test_a_node_of_a_drive_nobody_watches_runs_and_is_never_held():
    stops = Stops()
    ran = []
    async with stops.node("unwatched"):
        ran.append("node")
    assert ran == ["node"]


async def test_a_node_in_flight_means_stop_at_once_and_nothing_is_held():
    stops = Stops()
    with stops.watch("r") as drive:
        async with stops.node("r"):
            assert drive.in_flight == 1
            assert drive.stop() is True
        assert drive.in_flight == 0 and not drive.held.is_set()


async def test_between_nodes_the_next_node_is_held_at_its_start_and_never_runs():
    stops = Stops()
    ran = []

    async def next_node() -> None:
        async with stops.node("r"):
            ran.append("next")

    with stops.watch("r") as drive:
        async with stops.node("r"):
            pass  # the step finished; its checkpoint is still being written
        assert drive.stop() is False
        held = asyncio.create_task(next_node())
        await asyncio.wait_for(drive.held.wait(), timeout=5)
        assert not held.done() and drive.in_flight == 0
        held.cancel()  # what the Runner does once the next node is held
        await asyncio.gather(held, return_exceptions=True)
    assert ran == [] and held.cancelled()


async def test_a_node_that_raises_leaves_nothing_counted_in_flight():
    stops = Stops()
    with stops.watch("r") as drive:
        try:
            async with stops.node("r"):
                raise RuntimeError("the tool failed")
        except RuntimeError:
            pass
        assert drive.in_flight == 0 and drive.stop() is False


async def test_each_drive_is_watched_on_its_own_and_forgotten_when_it_ends():
    stops = Stops()
    with stops.watch("a") as a, stops.watch("b") as b:
        a.stop()
        async with stops.node("b"):  # b is not stopping: its node runs
            assert b.in_flight == 1 and a.in_flight == 0
    async with stops.node("a"):  # a's drive ended: nothing holds its nodes now
        pass
