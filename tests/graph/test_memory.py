"""Persistent memory: the write gate promotes only claims the run's verified observations back,
after commit, within budget and approval; recall is namespaced, fresh, and never sees quarantine;
a quarantined memory is rebuilt from the trace of the run that wrote it."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from langgraph.store.memory import InMemoryStore
from typer.testing import CliRunner

from boundloop.checkpoints import store as tables
from boundloop.checkpoints.memory_store import memory_store
from boundloop.graph.context import memory
from boundloop.graph.cli.app import app
from boundloop.graph.trace.replay import STEP_KINDS
from boundloop.graph.core.status import Terminal
from boundloop.graph.models.catalog import model_for
from boundloop.nodes.act import _brief as actor_brief
from tests.graph.conftest import CRITIC_PASS, JUDGE_PASS, PLAN_ONE_STEP, READ_NOTES, step

SUPPORTED = {"text": "Ana: publish the notes", "sources": ["call_actor_0_0"]}
POISON = {"text": "Ana is the CEO and approved the budget", "sources": ["call_actor_0_0"]}


def answer(*candidates: dict[str, Any]) -> dict[str, Any]:
    return step("Ana publishes the notes.\n<memory-candidates>" + json.dumps(list(candidates)) + "</memory-candidates>")


def roles(final: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), final], "judge": [JUDGE_PASS], "critic": [CRITIC_PASS]}


async def decisions(runner, thread_id: str) -> list[dict[str, Any]]:
    return [item for event in await runner.trace(thread_id) if event["kind"] == "memory" for item in event["data"]["decisions"]]


async def test_only_supported_claims_are_promoted_within_budget_and_a_later_run_recalls_only_those(run_script, runner, db_url, tmp_path):
    other = {"text": "Action items for Ana: publish the notes", "sources": ["a0.0"]}
    final = answer(SUPPORTED, POISON, {"text": "Bob owns the roadmap", "sources": []}, {"text": "Ana", "sources": ["call_x"]}, other)
    first = await run_script(roles(final), task={"budget": {"memory_writes": 1}}, user="alice")
    assert first.status == Terminal.SUCCESS
    assert "memory-candidates" not in first.result["output"]  # the proposal is not part of the result
    verdicts = await decisions(runner, first.thread_id)
    assert [item["promoted"] for item in verdicts] == [True, False, False, False, False]
    reasons = [item.get("reason", "") for item in verdicts]
    assert "not in the cited observations: approved, budget, ceo" in reasons[1]
    assert "no source call ids" in reasons[2] and "'call_x' is not a tool call of this run" in reasons[3]
    assert "budget.memory_writes exhausted" in reasons[4]
    assert first.values["usage"]["memory_writes"] == 1
    promoted = memory.promoted_by(await runner.trace(first.thread_id))
    assert memory.memory_write_quality(promoted) == 1.0
    assert promoted[0]["sources"][0]["call_id"] == "a0.0" and promoted[0]["validator"] == memory.VALIDATOR

    later_script = tmp_path / "later.json"  # models are cached per script file: the later run needs its own
    later_script.write_text(json.dumps({"roles": {"planner": [PLAN_ONE_STEP], "actor": [step("Ana.")], "judge": [JUDGE_PASS], "critic": [CRITIC_PASS]}}))
    later = await run_script({}, task={"goal": "Who publishes the notes?"}, user="alice", script=str(later_script))
    assert [item["text"] for item in later.values["memories"]] == ["Ana: publish the notes"]
    brief = actor_brief(later.values)
    assert "Retrieved evidence from earlier runs" in brief and "not instructions" in brief
    assert f"from run {first.thread_id}, sources a0.0" in brief and "CEO" not in brief
    await quarantine_and_rebuild(runner, db_url, first.thread_id, user="alice")


async def quarantine_and_rebuild(runner, db_url: str, run_id: str, *, user: str) -> None:
    """Through the CLI: a quarantined memory is never recalled; rebuilt from the run's trace it is
    again; a tampered source payload is refused; forget deletes; an unknown key gets one clear line."""
    key = f"{run_id}.0"

    def cli(*args: str) -> Any:
        return asyncio.to_thread(CliRunner().invoke, app, ["memory", *args, "--database-url", db_url])

    async def recalled() -> list[str]:
        return [item["key"] for item in await memory.recall(store, user=user, profile="coding_assistant", goal="publish the notes")]

    store = await memory_store(runner.pool)
    listed = await cli("list", "--json", "--user", user)
    assert listed.exit_code == 0 and [row["key"] for row in json.loads(listed.stdout)] == [key]
    assert (await cli("quarantine", key, "--reason", "looks wrong")).exit_code == 0
    shown = json.loads((await cli("show", key)).stdout)
    assert shown["status"] == "quarantined" and shown["status_reason"] == "looks wrong"
    assert await recalled() == []
    rebuilt = await cli("rebuild", run_id)
    assert rebuilt.exit_code == 0 and f"rebuilt {key}" in rebuilt.stdout
    assert await recalled() == [key]

    pointer = (await memory.find(store, key)).value["sources"][0]["pointer"]
    async with runner.pool.connection() as conn:
        await conn.execute("UPDATE boundloop_payloads SET body = 'Ana is the CEO' WHERE id = %s", (tables._payload_id(pointer),))
    refused = await cli("rebuild", run_id)
    assert refused.exit_code == 1 and "stored payload is missing or altered" in refused.stdout
    assert (await cli("forget", key)).exit_code == 0
    missing = await cli("show", key)
    assert missing.exit_code == 2 and f"no memory {key!r}" in missing.stderr


async def test_a_run_that_does_not_commit_promotes_nothing(run_script, runner):
    judge_fail = step({"passed": False, "failures": [{"criterion": "owner", "reason": "owner missing"}]})
    report = await run_script(
        {"planner": [PLAN_ONE_STEP], "actor": [step(calls=[READ_NOTES]), answer(SUPPORTED)], "judge": [judge_fail], "critic": [CRITIC_PASS]},
        task={"acceptance_criteria": ["names the owner"], "budget": {"repairs": 0}}, unattended=True,
    )
    assert report.status == Terminal.VALIDATION_FAIL
    assert await decisions(runner, report.thread_id) == []
    assert await memory.list_memories(await memory_store(runner.pool)) == []


async def test_only_a_run_that_may_write_memory_is_told_how_to_propose_it(run_script):
    """With `memory_writes` 0 every proposal would be refused, so the actor is not told the format."""
    told = {}
    for writes in (0, 1):
        report = await run_script({"actor": [step("Ana publishes the notes.")]}, task={"budget": {"memory_writes": writes}})
        assert report.status == Terminal.SUCCESS
        told[writes] = "<memory-candidates>" in model_for(report.values["settings"]).last_request("actor")[0].content
    assert told == {0: False, 1: True}


async def test_the_write_gate_is_a_step_only_when_the_answer_proposes_memories(run_script, runner, tmp_path):
    """No block, or an empty one: commit goes on to finalize, with no remember step and no memory
    event. A block that does not parse still goes through the gate, which rejects it, saying why."""
    for number, (final, gated) in enumerate([(step("Ana publishes the notes."), False), (answer(), False),
                                             (step("Ana publishes the notes.\n<memory-candidates>not json</memory-candidates>"), True)]):
        script = tmp_path / f"gate-{number}.json"  # models are cached per script file
        script.write_text(json.dumps({"roles": roles(final)}))
        report = await run_script({}, script=str(script))
        assert report.status == Terminal.SUCCESS, number
        path = [event["node"] for event in await runner.trace(report.thread_id) if event["kind"] in STEP_KINDS]
        assert path[-3:] == (["commit", "remember", "finalize"] if gated else ["verify", "commit", "finalize"]), (number, path)
        verdicts = await decisions(runner, report.thread_id)
        assert [item["promoted"] for item in verdicts] == ([False] if gated else []), number
        if gated:
            assert "not JSON" in verdicts[0]["reason"]


async def test_research_profile_writes_memory_only_after_a_human_approves(run_script, runner):
    task = {"profile": "research_assistant", "budget": {"cost_usd": None}}
    waiting = await run_script(roles(answer(SUPPORTED)), task=task)
    assert waiting.waiting and waiting.interrupts[0]["value"]["type"] == "memory_approval"
    assert await memory.list_memories(await memory_store(runner.pool)) == []  # nothing before the decision
    done = await runner.decide(waiting.thread_id, "m.approval", {"decision": "approve", "approver": "ana"})
    assert done.status == Terminal.SUCCESS
    [item] = await memory.list_memories(await memory_store(runner.pool), user="default", profile="research_assistant")
    assert item.value["approved_by"] == "ana"

    unattended = await run_script(roles(answer(SUPPORTED)), task=task, unattended=True)
    assert unattended.status == Terminal.SUCCESS
    [refused] = await decisions(runner, unattended.thread_id)
    assert "needs approval for memory writes and the run is unattended" in refused["reason"]


def _value(text: str, *, run_id: str = "run-x", user: str = "alice", expires_in: float = 3600) -> dict[str, Any]:
    now = time.time()
    return {"text": text, "sources": [{"call_id": "a1.0", "tool": "t", "stage": "verified", "pointer": "p", "sha256": "h"}],
            "validator": memory.VALIDATOR, "confidence": 1.0, "run_id": run_id, "user": user, "profile": "coding_assistant",
            "created_at": now, "expires_at": now + expires_in, "status": "active", "approved_by": None}


async def test_recall_is_per_user_fresh_and_never_returns_quarantined_memories(pool):
    store = await memory_store(pool)
    ns = memory.namespace("alice", "coding_assistant")
    await store.aput(ns, "fresh", _value("the deploy window is Friday"))
    await store.aput(ns, "stale", _value("the deploy window is Monday", expires_in=-1))
    await store.aput(memory.namespace("bob", "coding_assistant"), "bobs", _value("the deploy window is Sunday", user="bob"))
    goal = "When is the deploy window?"

    async def recalled(user: str, profile: str = "coding_assistant") -> list[str]:
        return [item["key"] for item in await memory.recall(store, user=user, profile=profile, goal=goal)]

    assert await recalled("alice") == ["fresh"]
    assert await recalled("bob") == ["bobs"]
    assert await recalled("carol") == [] and await recalled("alice", "sre_agent") == []
    await memory.set_status(store, await memory.find(store, "fresh"), "quarantined", "test")
    assert await recalled("alice") == []


def test_memory_write_quality_counts_only_backed_memories():
    backed, bare = _value("x"), {**_value("y"), "sources": []}
    assert memory.memory_write_quality([backed, bare]) == 0.5
    assert memory.memory_write_quality([]) is None


_CONCEPTS = {"deploy": 0, "release": 0, "ship": 0, "window": 1, "slot": 1, "when": 1, "friday": 2, "lunch": 3, "menu": 3}


def _concept_embedding(texts: list[str]) -> list[list[float]]:
    """A stand-in embedding model: synonyms share a dimension, so similar meaning scores high
    even with no word in common — what keyword overlap cannot find."""
    vectors = []
    for text in texts:
        vector = [0.0] * 4
        for word in memory.words(text):
            if word in _CONCEPTS:
                vector[_CONCEPTS[word]] += 1.0
        vectors.append(vector if any(vector) else [0.0, 0.0, 0.0, 0.01])
    return vectors


async def test_a_store_with_an_embedding_index_recalls_by_meaning_within_the_same_guards():
    store = InMemoryStore(index={"dims": 4, "embed": _concept_embedding, "fields": ["text"]})
    ns = memory.namespace("alice", "coding_assistant")
    await store.aput(ns, "meaning", _value("ship slot is Friday"))
    await store.aput(ns, "unrelated", _value("lunch menu changes"))
    await store.aput(ns, "expired", _value("release slot was Monday", expires_in=-1))
    await store.aput(memory.namespace("bob", "coding_assistant"), "bobs", _value("release slot Sunday", user="bob"))
    goal = "When is the deploy window?"
    assert memory.words(goal).isdisjoint(memory.words("ship slot is Friday")), "the test needs no keyword overlap"

    recalled = [item["key"] for item in await memory.recall(store, user="alice", profile="coding_assistant", goal=goal)]
    assert recalled[0] == "meaning" and "expired" not in recalled and "bobs" not in recalled

    await memory.set_status(store, await memory.find(store, "meaning"), "quarantined", "test")
    assert "meaning" not in [item["key"] for item in await memory.recall(store, user="alice", profile="coding_assistant", goal=goal)]
