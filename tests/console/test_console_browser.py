"""The web console in a real headless Chromium: the run list, a run's timeline, and decisions
made in the approval inbox that continue the run — or are refused when tampered with or replayed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Locator, Page, expect

from boundloop.graph.run.runner import RunReport
from boundloop.graph.core.status import Terminal
from tests.console.conftest import APPROVER, LiveConsole


def workspace_of(report: RunReport) -> Path:
    return Path(report.values["settings"]["workspace_root"])


def request_of(page: Page, run: RunReport) -> Locator:
    return page.locator(f"article.request[data-run='{run.thread_id}']")


def open_request(page: Page, live_console: LiveConsole, run: RunReport, kind: str) -> Locator:
    """The run's pending request in the inbox, checked to be of `kind`."""
    page.goto(f"{live_console.url}/console/inbox")
    request = request_of(page, run)
    expect(request.locator("h3")).to_contain_text(kind)
    return request


def test_the_run_list_shows_each_run_and_opens_its_timeline(page: Page, live_console: LiveConsole, waiting_runs: dict[str, RunReport]):
    run = waiting_runs["list"]
    assert run.status == Terminal.CONFIRM_REQUIRED and waiting_runs["extend"].status == Terminal.BUDGET_EXHAUSTED

    page.goto(f"{live_console.url}/console/")
    for each in waiting_runs.values():
        expect(page.locator(f"tr[data-run='{each.thread_id}']")).to_be_visible()
    expect(page.locator(f"tr[data-run='{run.thread_id}'] .status")).to_have_text("waiting")

    page.click(f"a[href='/console/runs/{run.thread_id}']")
    expect(page.locator("#run-status")).to_have_text("CONFIRM_REQUIRED")
    phases = page.locator("svg.timeline text.label")
    expect(phases.first).to_have_text("intake")
    assert {"plan", "act"} <= set(phases.all_text_contents())
    expect(page.locator("table.calls tr[data-call='a0.0'] td").nth(1)).to_have_text("workspace__delete_file")
    expect(page.locator("table.escalations tr[data-call='a0.0'] td").nth(3)).to_have_text("pending")
    expect(page.locator("table.calls tr[data-call='a0.0'] td").nth(2)).to_have_text("waiting")
    expect(page.locator("table.budget tr[data-dimension='model_turns'] td").nth(1)).to_have_text("2")
    expect(page.locator("svg.timeline rect.phase.node-act title")).to_have_text(re.compile(r"act: [\d.]+ ms · workspace__delete_file:(pending|ask)"))  # act's gate names the decision
    expect(request_of(page, run)).to_contain_text("rule:coding_assistant.delete")  # decidable from its timeline too


def test_approving_a_pending_call_in_the_inbox_runs_it_and_the_run_finishes(page: Page, live_console: LiveConsole, waiting_runs: dict[str, RunReport]):
    run = waiting_runs["approve"]
    page.goto(f"{live_console.url}/console/inbox")
    request = request_of(page, run)
    expect(request).to_contain_text("workspace__delete_file")
    expect(request).to_contain_text('"path": "notes.md"')
    expect(request).to_contain_text("rule:coding_assistant.delete")
    expect(request.locator("dd").nth(4)).to_have_text("compensable")

    request.get_by_role("button", name="Approve").click()

    expect(page.locator("#run-status")).to_have_text("SUCCESS")
    expect(page.locator("p.notice")).to_have_text("approve a0.0: the run continued here: SUCCESS")
    expect(page.locator("table.calls tr[data-call='a0.0'] td").nth(2)).to_have_text("approve")
    expect(page.locator("table.calls tr[data-call='a0.0'] td").nth(3)).to_have_text(APPROVER)
    expect(page.locator("table.calls tr[data-call='a0.0'] .status")).to_have_text("ok")
    assert {"verify", "finalize"} <= set(page.locator("svg.timeline text.label").all_text_contents())
    assert not (workspace_of(run) / "notes.md").exists()


def test_rejecting_with_a_message_tells_the_model_and_replaying_that_form_is_refused(
    page: Page, live_console: LiveConsole, waiting_runs: dict[str, RunReport]
):
    run = waiting_runs["reject"]
    page.goto(f"{live_console.url}/console/inbox")
    used = request_of(page, run).evaluate("article => article.outerHTML")
    request_of(page, run).locator("input[name=reject]").fill("keep the notes")
    request_of(page, run).get_by_role("button", name="Reject").click()

    expect(page.locator("#run-status")).to_have_text("SUCCESS")
    expect(page.locator("table.calls tr[data-call='a0.0'] .status")).to_have_text("rejected")
    assert (workspace_of(run) / "notes.md").exists()

    async def told() -> Any:
        report = await (await live_console.runner()).report(run.thread_id)
        return next(m.content for m in report.values["messages"] if getattr(m, "tool_call_id", None) == "call_actor_0_0")

    assert live_console.call(told) == "rejected: a human declined workspace__delete_file: keep the notes"

    page.goto(f"{live_console.url}/console/inbox")
    page.locator("main").evaluate("(main, html) => main.insertAdjacentHTML('beforeend', html)", used)  # the same form, posted again
    request_of(page, run).get_by_role("button", name="Approve").click()

    expect(page.locator("p.error[role=alert]")).to_contain_text("refused: this decision was already submitted once")
    assert (workspace_of(run) / "notes.md").exists()


def test_a_tampered_decision_is_refused_in_the_page_and_the_run_still_waits(page: Page, live_console: LiveConsole, waiting_runs: dict[str, RunReport]):
    run = waiting_runs["tamper"]
    page.goto(f"{live_console.url}/console/inbox")
    form = request_of(page, run).locator("form")
    form.locator("input[name=args_hash]").evaluate("input => input.value = 'a'.repeat(64)")  # approve other arguments
    form.get_by_role("button", name="Approve").click()

    expect(page.locator("p.error[role=alert]")).to_contain_text("refused: the form was altered")
    form = request_of(page, run).locator("form")
    form.locator("input[name=token]").evaluate("input => input.value = input.value.slice(0, -6) + 'AAAAAA'")  # forge the signature
    form.get_by_role("button", name="Approve").click()

    expect(page.locator("p.error[role=alert]")).to_contain_text("refused: the form's token does not verify")
    expect(request_of(page, run)).to_be_visible()  # still waiting, still decidable
    assert (workspace_of(run) / "notes.md").exists()


def test_granting_a_budget_extension_in_the_inbox_lets_the_run_finish(page: Page, live_console: LiveConsole, waiting_runs: dict[str, RunReport]):
    run = waiting_runs["extend"]
    request = open_request(page, live_console, run, "budget_extension")
    expect(request).to_contain_text("tool_calls: limit 1")
    request.locator("input[name=grant]").fill("tool_calls=3")
    request.get_by_role("button", name="Grant").click()

    expect(page.locator("#run-status")).to_have_text("SUCCESS")
    expect(page.locator("table.budget tr[data-dimension='tool_calls'] td").nth(1)).to_have_text("2")
    expect(page.locator("table.budget tr[data-dimension='tool_calls'] td").nth(2)).to_have_text("3")
    expect(page.locator("table.escalations tr[data-call='e0.budget_extension'] td").nth(4)).to_have_text(APPROVER)


def test_editing_the_arguments_in_the_inbox_runs_the_edited_call(page: Page, live_console: LiveConsole, waiting_runs: dict[str, RunReport]):
    run = waiting_runs["edit"]
    request = open_request(page, live_console, run, "tool_approval")
    request.locator("textarea[name=edit]").fill('{"path": "other.md"')  # not JSON: refused, still waiting
    request.get_by_role("button", name="Edit and run").click()
    expect(page.locator("p.error[role=alert]")).to_contain_text("--edit is not valid JSON")

    request = request_of(page, run)
    request.locator("textarea[name=edit]").fill('{"path": "other.md"}')
    request.get_by_role("button", name="Edit and run").click()

    expect(page.locator("#run-status")).to_have_text("SUCCESS")
    expect(page.locator("table.calls tr[data-call='a0.0'] td").nth(2)).to_have_text("edit")
    assert not (workspace_of(run) / "other.md").exists() and (workspace_of(run) / "notes.md").exists()


def test_answering_a_question_in_the_inbox_reaches_the_planner(page: Page, live_console: LiveConsole, waiting_runs: dict[str, RunReport]):
    run = waiting_runs["ask"]
    assert run.status == Terminal.MISSING_INFO
    request = open_request(page, live_console, run, "ask_user")
    expect(request).to_contain_text("which file should I summarize?")
    request.locator("input[name=answer]").fill("notes.md")
    request.get_by_role("button", name="Answer").click()

    expect(page.locator("#run-status")).to_have_text("SUCCESS")

    async def clarifications() -> Any:
        return (await (await live_console.runner()).report(run.thread_id)).values["clarifications"]

    assert live_console.call(clarifications) == ["planner reports MISSING_INFO: which file should I summarize? → notes.md"]


def test_answering_a_servers_question_in_the_inbox_checks_it_against_the_schema_and_completes_the_call(
    page: Page, live_console: LiveConsole, waiting_runs: dict[str, RunReport]
):
    run = waiting_runs["elicit"]
    request = open_request(page, live_console, run, "elicitation")
    expect(request).to_contain_text("Which colour, and how many?")
    expect(request).to_contain_text('"enum": [')
    request.locator("textarea[name=answer]").fill('{"colour": "blue"}')
    request.get_by_role("button", name="Answer").click()
    expect(page.locator("p.error[role=alert]")).to_contain_text("'blue' is not one of ['red', 'green']")

    request = request_of(page, run)
    expect(request.locator("p.error")).to_contain_text("the last decision was refused")
    request.locator("textarea[name=answer]").fill('{"colour": "green"}')
    request.get_by_role("button", name="Answer").click()

    expect(page.locator("#run-status")).to_have_text("SUCCESS")

    async def answered() -> Any:
        report = await (await live_console.runner()).report(run.thread_id)
        return next(m.content for m in report.values["messages"] if getattr(m, "name", None) == "asking__ask")

    assert '{"action": "accept", "content": {"colour": "green", "count": 2}}' in live_console.call(answered)
