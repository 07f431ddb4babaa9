"""Who may use the console: loopback only without a token, the token everywhere with one, no
cross-site decisions, and `boundloop console` refusing a public address without a token."""

from __future__ import annotations

import re
import uuid

from starlette.testclient import TestClient
from typer.testing import CliRunner

from boundloop.checkpoints import upsert_run
from boundloop.graph.cli.app import app
from boundloop.graph.console import ConsoleSettings, create_app

ELSEWHERE = ("203.0.113.7", 40000)
LOOPBACK = ("127.0.0.1", 40000)


def test_without_a_token_a_client_on_another_host_is_refused():
    with TestClient(create_app(ConsoleSettings(database_url="postgresql://unused")), client=ELSEWHERE, follow_redirects=False) as http:
        refused = http.get("/console/inbox")
    assert refused.status_code == 403
    assert "loopback clients only" in refused.text and "--token" in refused.text


def test_with_a_token_every_client_must_present_it_and_the_link_sets_a_strict_cookie():
    settings = ConsoleSettings(database_url="postgresql://unused", token="s3cret-token")
    with TestClient(create_app(settings), client=LOOPBACK, follow_redirects=False) as http:
        assert http.get("/console/inbox").status_code == 401
        assert http.get("/console/inbox?token=wrong").status_code == 401
        entered = http.get("/console/inbox?token=s3cret-token")
    assert entered.status_code == 303 and entered.headers["location"] == "http://testserver/console/inbox"
    cookie = entered.headers["set-cookie"]
    assert cookie.startswith("boundloop_console=s3cret-token;") and "HttpOnly" in cookie and "SameSite=strict" in cookie


def test_a_decision_posted_from_another_site_is_refused_before_it_is_read():
    with TestClient(create_app(ConsoleSettings(database_url="postgresql://unused")), client=LOOPBACK, follow_redirects=False) as http:
        forged = http.post("/console/decide", data={"action": "approve"}, headers={"Origin": "https://evil.example"})
        fetched = http.post("/console/decide", data={"action": "approve"}, headers={"Sec-Fetch-Site": "cross-site"})
    assert (forged.status_code, fetched.status_code) == (403, 403)
    assert "https://evil.example is refused" in forged.text


def test_the_console_command_refuses_a_public_address_without_a_token(monkeypatch):
    monkeypatch.delenv("BOUNDLOOP_CONSOLE_TOKEN", raising=False)
    done = CliRunner().invoke(app, ["console", "--host", "0.0.0.0"])
    assert done.exit_code == 2
    assert " ".join(done.output.split()) == ("error: --host 0.0.0.0 is not a loopback address: give a token (--token or BOUNDLOOP_CONSOLE_TOKEN) "
                                             "so only you can decide")


def test_a_run_id_no_run_can_have_is_a_page_that_says_so(db_url):
    """A NUL in the path reaches the database as no text can: the page says no such run (404), not 500."""
    with TestClient(create_app(ConsoleSettings(database_url=db_url)), client=LOOPBACK, follow_redirects=False) as http:
        for path in ("/console/runs/%00", "/console/runs/a%00b", "/console/runs/no-such-run"):
            page = http.get(path)
            assert page.status_code == 404, (path, page.status_code)
            assert "no run" in page.text


async def test_the_runs_list_pages_past_two_hundred_runs(db_url, pool):
    """Every run is reachable by following "older runs" from the first page, 200 to a page."""
    mine = {f"page-{uuid.uuid4().hex[:6]}-{n:03d}" for n in range(205)}
    for thread in mine:
        await upsert_run(pool, thread_id=thread, goal="paging", profile="research", status="SUCCESS", task_hash="h")
    seen, path, pages = set(), "/console/", 0
    with TestClient(create_app(ConsoleSettings(database_url=db_url)), client=LOOPBACK, follow_redirects=False) as http:
        while path:
            page = http.get(path)
            assert page.status_code == 200
            rows = re.findall(r'data-run="([^"]+)"', page.text)
            assert len(rows) <= 200 and (pages == 0 or 'rel="prev"' in page.text)
            seen.update(rows)
            pages += 1
            older = re.search(r'rel="next" href="([^"]+)"', page.text)
            path = older.group(1) if older else None
        assert mine <= seen and pages >= 2
        for bad in ("0", "-1", "two", "1.5"):
            refused = http.get(f"/console/?page={bad}")
            assert refused.status_code == 400 and "not a page number" in refused.text


def test_the_evaluation_pages_follow_the_same_access_rules():
    """Loopback only without a token; with one, every Evaluation page and its stylesheet needs it."""
    with TestClient(create_app(ConsoleSettings(database_url="postgresql://unused")), client=ELSEWHERE, follow_redirects=False) as http:
        for path in ("/console/evals", "/console/evals/1", "/console/evals/report.css"):
            assert http.get(path).status_code == 403, path
    settings = ConsoleSettings(database_url="postgresql://unused", token="s3cret-token")
    with TestClient(create_app(settings), client=LOOPBACK, follow_redirects=False) as http:
        for path in ("/console/evals", "/console/evals/1", "/console/evals/report.css"):
            assert http.get(path).status_code == 401, path
        assert http.get("/console/evals/report.css", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200


def test_a_suite_run_that_is_not_stored_is_a_page_that_says_so(db_url):
    with TestClient(create_app(ConsoleSettings(database_url=db_url)), client=LOOPBACK, follow_redirects=False) as http:
        assert http.get("/console/evals").status_code == 200
        for path in ("/console/evals/999999", "/console/evals/abc", "/console/evals/-1", "/console/evals/99999999999999999999"):
            page = http.get(path)
            assert page.status_code == 404, (path, page.status_code)
            assert "no stored suite run" in page.text
