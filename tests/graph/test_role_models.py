"""Per-role models and fallbacks, through the OpenAI-compatible provider path (two local fake
endpoints: the only stand-in is the model).

A role's own model serves only that role's requests; a role whose model is unavailable calls its
fallback, and the run says it ran degraded — in its ending, its usage, its trace and `show`."""

from __future__ import annotations

import subprocess

import httpx
import pytest
from rich.console import Console

from boundloop.checkpoints import store
from boundloop.graph.cli.progress import render_report
from boundloop.graph.console import ConsoleSettings, create_app
from boundloop.graph.core.status import Terminal
from boundloop.graph.models.roles import by_role
from tests.graph.fake_openai import FakeOpenAI
from tests.graph.test_cli import BOUNDLOOP

PRICES = {"primary-model": (2.0, 8.0), "critic-model": (1.0, 4.0), "backup-model": (0.5, 2.0)}
REFUSED = {"status": 401}
"""Not transient: the role's model is unavailable at once, no retries spent on it."""


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")


async def test_the_critic_calls_its_own_model_and_each_role_is_costed_apart(run_script, db_url):
    with FakeOpenAI() as fake:
        report = await run_script({}, model="primary-model", script=None, base_url=fake.base_url, prices=PRICES,
                                  role_models={"critic": "critic-model"}, critique="always")
    assert report.status == Terminal.SUCCESS, report.values["ending"]
    models = {(role, body["model"]) for role, body in zip(fake.roles, fake.requests)}
    assert models == {("actor", "primary-model"), ("critic", "critic-model")}
    rows = {row["role"]: row for row in by_role(report.values)}
    assert (rows["actor"]["model"], rows["actor"]["calls"], rows["actor"]["input_tokens"]) == ("primary-model", 2, 2000)
    assert rows["actor"]["cost_usd"] == pytest.approx(2 * (1000 * 2.0 + 100 * 8.0) / 1_000_000)
    assert (rows["critic"]["model"], rows["critic"]["calls"], rows["critic"]["output_tokens"]) == ("critic-model", 1, 100)
    assert rows["critic"]["cost_usd"] == pytest.approx((1000 * 1.0 + 100 * 4.0) / 1_000_000)
    assert sum(row["cost_usd"] for row in rows.values()) == pytest.approx(report.values["usage"]["cost_usd"])
    assert "degraded" not in report.values["ending"]
    shown = Console(record=True, width=300)
    render_report(shown, report)
    assert any(line.split()[:3] == ["critic", "critic-model", "1"] for line in shown.export_text().splitlines())
    app = create_app(ConsoleSettings(database_url=db_url))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=("127.0.0.1", 40000)), base_url="http://testserver") as http:
        page = (await http.get(f"/console/runs/{report.thread_id}")).text
    await app.state.console.close()
    assert '<tr data-role="critic"><td>critic</td><td>critic-model</td><td>1</td>' in page


async def test_an_unavailable_actor_model_falls_back_and_the_run_says_it_ran_degraded(run_script, runner):
    with FakeOpenAI(faults={"actor": [REFUSED] * 10}) as primary, FakeOpenAI() as backup:
        report = await run_script({}, model="primary-model", script=None, base_url=primary.base_url, prices=PRICES,
                                  fallback_models={"*": "backup-model"}, base_urls={"backup-model": backup.base_url})
    assert report.status == Terminal.SUCCESS, report.values["ending"]
    assert report.result["output"] == "Ana publishes the notes."
    assert primary.roles == ["actor", "actor"]  # each turn tried its own model first, refused
    assert [body["model"] for body in backup.requests] == ["backup-model", "backup-model"]
    assert report.values["usage"]["fallbacks_by_role"] == {"actor": 2}
    assert "the actor called its fallback model 2 time(s)" in report.values["ending"]["degraded"]
    events = [event for event in await store.read_trace(runner.pool, report.thread_id) if event.kind == "model_fallback"]
    assert [(event.data["role"], event.data["model"], event.data["fallback"]) for event in events] == [("actor", "primary-model", "backup-model")] * 2
    assert "HTTP 401" in events[0].data["reason"]
    assert report.values["usage"]["cost_usd"] == pytest.approx(2 * (1000 * 0.5 + 100 * 2.0) / 1_000_000)  # the refused calls cost nothing


async def test_a_fallback_only_for_the_critic_leaves_an_unavailable_actor_unavailable(run_script):
    with FakeOpenAI(faults={"actor": [REFUSED] * 10}) as primary, FakeOpenAI() as backup:
        report = await run_script({}, model="primary-model", script=None, base_url=primary.base_url, prices=PRICES,
                                  fallback_models={"critic": "backup-model"}, base_urls={"backup-model": backup.base_url})
    assert report.status == Terminal.UNAVAILABLE_DEP
    assert "'primary-model' is unavailable to the actor" in report.values["ending"]["reason"]
    assert backup.requests == []


async def test_a_fallback_that_fails_too_ends_the_run_naming_the_fallback(run_script):
    with FakeOpenAI(faults={"actor": [REFUSED] * 10}) as primary, FakeOpenAI(faults={"actor": [REFUSED] * 10}) as backup:
        report = await run_script({}, model="primary-model", script=None, base_url=primary.base_url, prices=PRICES,
                                  fallback_models={"actor": "backup-model"}, base_urls={"backup-model": backup.base_url})
    assert report.status == Terminal.UNAVAILABLE_DEP
    assert "'backup-model' is unavailable to the actor" in report.values["ending"]["reason"]
    assert (primary.count("actor"), backup.count("actor")) == (1, 1)


async def test_a_cost_budget_refuses_a_run_whose_fallback_model_has_no_price(run_script):
    with FakeOpenAI() as fake:
        report = await run_script({}, task={"budget": {"cost_usd": 1.0}}, model="primary-model", script=None, base_url=fake.base_url,
                                  prices={"primary-model": (2.0, 8.0)}, fallback_models={"*": "unpriced-model"})
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert "'unpriced-model'" in report.values["ending"]["reason"]
    assert fake.requests == []


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--role-model", "critic", "--role-model 'critic' is not ROLE=MODEL"),
    ("--fallback-model", "=gpt-4o", "--fallback-model '=gpt-4o' is not ROLE=MODEL"),
    ("--role-model", "wizard=gpt-4o", "config: role_models.wizard"),
])
def test_a_bad_role_model_flag_is_one_line_and_exit_2(tmp_path, flag, value, said):
    done = subprocess.run([BOUNDLOOP, "run", "Summarize notes.md", "--model", "gpt-4o-mini", flag, value],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
