"""Hard caps hold after the call that would trip them, not only before it: each test tries to break
one cap with a real run (only the model is scripted or faked) and checks what was charged."""

from __future__ import annotations

import sys
from pathlib import Path

from boundloop.graph.core.status import Terminal
from tests.faults.conftest import PRICE
from tests.graph.conftest import READ_NOTES, step
from tests.graph.fake_openai import FakeOpenAI

LONG = "Ana publishes the notes. " * 400
"""A reply of about 10 000 characters: far more output than the caps below allow."""
PROBE = Path(__file__).parents[1] / "tools" / "servers" / "probe_server.py"


def read(path: str) -> dict[str, object]:
    return {"name": "workspace__read_file", "args": {"path": path}}


async def test_a_long_reply_is_cut_at_the_output_tokens_left(run_script):
    actor = [{"content": LONG, "tool_calls": [READ_NOTES]}, step("Ana publishes the notes.")]
    report = await run_script({"actor": actor}, task={"budget": {"output_tokens": 40}}, unattended=True)
    usage = report.values["usage"]
    assert usage["output_tokens"] == 40  # the reply stopped at the cap instead of charging ~2 500 tokens
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert report.values["ending"]["dimension"] == "output_tokens"


async def test_a_long_reply_is_cut_at_what_the_cost_left_buys(run_script):
    prices = {"scripted-test": [0.0, 10_000.0]}  # $0.01 per output token
    actor = [{"content": LONG, "tool_calls": [READ_NOTES]}, step("Ana publishes the notes.")]
    report = await run_script({"actor": actor}, task={"budget": {"cost_usd": 0.5}}, prices=prices, unattended=True)
    usage = report.values["usage"]
    assert 0 < usage["cost_usd"] <= 0.5
    assert usage["output_tokens"] <= 50
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert report.values["ending"]["dimension"] == "cost_usd"


async def test_a_request_whose_input_alone_would_pass_the_cost_cap_is_not_sent(run_script):
    prices = {"scripted-test": [1_000_000.0, 0.0]}  # $1 per input token: any request costs more than the cap
    report = await run_script({"actor": [step("Ana publishes the notes.")]}, task={"budget": {"cost_usd": 5.0}}, prices=prices, unattended=True)
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert report.values["ending"]["dimension"] == "cost_usd"
    assert report.values["usage"]["model_turns"] == 0 and report.values["usage"]["cost_usd"] == 0


async def test_a_request_whose_input_would_pass_the_input_tokens_cap_is_not_sent(run_script):
    report = await run_script({"actor": [step("Ana publishes the notes.")]}, task={"budget": {"input_tokens": 20}}, unattended=True)
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert report.values["ending"]["dimension"] == "input_tokens"
    assert report.values["usage"]["input_tokens"] == 0


async def test_a_big_tool_result_is_cut_to_the_characters_left(run_script, workspace, runner):
    (workspace / "big.md").write_text("line of the big file\n" * 2_000)
    actor = [step(calls=[read("big.md")]), step(calls=[READ_NOTES]), step("Ana publishes the notes.")]
    report = await run_script({"actor": actor}, task={"budget": {"tool_result_chars": 300}}, unattended=True)
    assert report.values["usage"]["tool_result_chars"] <= 300
    [big, *_] = report.values["observations"]
    assert big["truncated"] and big["pointer"] and big["chars"] > 42_000  # the full payload is stored
    assert report.status == Terminal.BUDGET_EXHAUSTED
    assert report.values["ending"]["dimension"] == "tool_result_chars"


async def test_parallel_results_in_one_turn_share_what_is_left(run_script, workspace):
    for name in ("a.md", "b.md", "c.md"):
        (workspace / name).write_text(f"{name} " * 1_000)
    actor = [step(calls=[read("a.md"), read("b.md"), read("c.md")]), step(calls=[READ_NOTES]), step("done")]
    report = await run_script({"actor": actor}, task={"budget": {"tool_result_chars": 700}}, unattended=True)
    observations = [obs for obs in report.values["observations"] if obs["tool"] == "workspace__read_file"]
    assert len(observations) >= 3 and all(obs["truncated"] and obs["pointer"] for obs in observations[:3])
    assert report.values["usage"]["tool_result_chars"] <= 700  # three calls at once: a third of what is left each


async def test_a_hanging_tool_is_cut_so_the_charged_wall_clock_stays_within_the_cap(run_script, workspace):
    servers = {"mcpServers": {
        "workspace": {"command": sys.executable, "args": ["-m", "boundloop.mcp_servers.workspace", "--root", str(workspace)], "trusted": True},
        "probe": {"command": sys.executable, "args": [str(PROBE)], "trusted": True},
    }}
    actor = [step(calls=[{"name": "probe__slow", "args": {"seconds": 45}}]), step("done")]
    report = await run_script({"actor": actor}, task={"budget": {"wall_clock_s": 12}}, servers=servers, unattended=True)
    assert report.status == Terminal.TIMEOUT
    assert 0 < report.values["usage"]["wall_clock_s"] <= 12


async def test_a_server_start_slower_than_the_wall_clock_ends_the_run_in_time(run_script):
    report = await run_script({"actor": [step("done")]}, task={"budget": {"wall_clock_s": 0.05}}, unattended=True)
    assert report.status == Terminal.TIMEOUT
    assert report.values["usage"]["wall_clock_s"] <= 0.05
    assert report.values["usage"]["model_turns"] == 0


async def test_the_provider_is_sent_the_output_tokens_left_as_max_completion_tokens(run_provider):
    with FakeOpenAI() as fake:
        report = await run_provider(fake.base_url, task={"budget": {"output_tokens": 5_000}})
    assert report.status == Terminal.SUCCESS
    sent = [request["max_completion_tokens"] for request in fake.requests]
    assert sent == [5_000 - 100 * index for index in range(len(sent))]  # each fake reply charges 100 output tokens


async def test_the_provider_is_sent_what_the_cost_left_buys_and_the_cost_cap_holds(run_provider):
    with FakeOpenAI() as fake:
        report = await run_provider(fake.base_url, task={"budget": {"cost_usd": 0.01, "output_tokens": None}}, unattended=True)
    sent = [request["max_completion_tokens"] for request in fake.requests]
    assert sent and sent[0] < 0.01 * 1_000_000 / PRICE[1]  # the input's cost is reserved first
    assert report.values["usage"]["cost_usd"] <= 0.01
    assert all(later < earlier for earlier, later in zip(sent, sent[1:]))  # each request is sent what is left then
