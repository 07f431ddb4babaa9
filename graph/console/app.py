"""app: the console's routes, under `/console`, for `boundloop console` and the LangGraph server.

Server-rendered pages (Jinja2, autoescaped), no JavaScript: the run list, one run's timeline, the
approval inbox with its decision forms, and the Evaluation page (stored `boundloop eval` runs and
one run's report, drawn by the same renderer as `boundloop eval --html`). Access: a client on another host is served only when
the console has a token (`BOUNDLOOP_CONSOLE_TOKEN` or `--token`), and then every request must
carry it (`?token=` once, which sets a same-site cookie, or `Authorization: Bearer`). A decision
is posted with its signed, single-use form token (tokens.py); a cross-site post is refused.

No app-wide middleware: the LangGraph server merges a custom app's middleware into its own API,
so every check runs inside the console's own handlers.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import ipaddress
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from secrets import token_urlsafe
from typing import Any, Awaitable, Callable
from urllib.parse import quote, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from boundloop.checkpoints import approvals
from boundloop.checkpoints.eval_runs import eval_run, eval_runs
from boundloop.checkpoints.errors import CheckpointsError
from boundloop.graph.console import inbox, timeline
from boundloop.graph.console.forms import decision_from_form
from boundloop.graph.console.tokens import Binding, TokenRefused, Tokens
from boundloop.graph.core.errors import BoundloopError
from boundloop.graph.evals import report as eval_report
from boundloop.graph.models import roles
from boundloop.graph.run.runner import Runner
from boundloop.tools import secrets
from boundloop.tools.errors import ToolsError

PREFIX = "/console"
COOKIE = "boundloop_console"
PACKAGE = resources.files("boundloop.graph.console")
Handler = Callable[[Request], Awaitable[Response]]


@dataclass
class ConsoleSettings:
    database_url: str | None = None
    token: str | None = None
    """Required from every client when set; without it only loopback clients are served."""
    approver: str = field(default_factory=lambda: os.environ.get("USER", "console"))
    """Who the console's decisions are recorded as."""
    server_url: str | None = None
    """The LangGraph server that drives server threads (None: this process, when mounted in it)."""


class Console:
    """The console's state: one runner (opened on first use), the form tokens, the templates."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.tokens = Tokens()
        self.notices: dict[str, str] = {}
        """What a decision did, shown once on the page it redirects to (never text taken from a URL)."""
        self.sent: dict[Binding, str] = {}
        """Decisions handed to a LangGraph server that its run has not taken yet: shown as sent, not as a form."""
        self._runner: Runner | None = None
        self._opening = asyncio.Lock()
        self.templates = Environment(loader=FileSystemLoader(str(PACKAGE / "templates")), autoescape=select_autoescape(default=True))

    async def runner(self) -> Runner:
        async with self._opening:
            if self._runner is None:
                runner = Runner(self.settings.database_url)
                self._runner = await runner.__aenter__()
        return self._runner

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.__aexit__(None, None, None)
            self._runner = None

    def page(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        html = self.templates.get_template(name).render(prefix=PREFIX, approver=self.settings.approver, **values)
        return HTMLResponse(html, status_code=status, headers=HEADERS)


HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


RUNS_PER_PAGE = 200


def create_app(settings: ConsoleSettings) -> Starlette:
    console = Console(settings)

    async def runs(request: Request) -> Response:
        page = request.query_params.get("page", "1")
        if not page.isdigit() or int(page) < 1:
            return console.page("refused.html", status=400, reason=f"page {page!r} is not a page number: use ?page=1, 2, …")
        number = int(page)
        runner = await console.runner()
        rows = await runner.runs(limit=RUNS_PER_PAGE + 1, offset=(number - 1) * RUNS_PER_PAGE)
        waiting = len(await inbox.pending(runner))
        return console.page("runs.html", runs=rows[:RUNS_PER_PAGE], waiting=waiting, page=number, more=len(rows) > RUNS_PER_PAGE)

    async def run(request: Request) -> Response:
        return await _run_page(console, request.path_params["run_id"], notice=console.notices.pop(request.query_params.get("done", ""), None))

    async def inbox_page(request: Request) -> Response:
        return await _inbox_page(console)

    async def decide(request: Request) -> Response:
        if problem := _cross_site(request):
            return console.page("refused.html", status=403, reason=problem)
        form = await request.form()
        claimed = Binding(str(form.get("run_id", "")), str(form.get("call_id", "")), str(form.get("args_hash", "")), str(form.get("interrupt_id", "")))
        try:
            binding = console.tokens.use(str(form.get("token", "")), claimed)
        except TokenRefused as refused:
            return await _inbox_page(console, error=f"refused: {refused}", status=409)
        runner = await console.runner()
        items = {(item.binding.run_id, item.binding.call_id): item for item in await inbox.pending(runner, binding.run_id)}
        item = items.get((binding.run_id, binding.call_id))
        if item is None or item.binding != binding:
            return await _inbox_page(console, error=f"refused: {binding.run_id} {binding.call_id} no longer waits for this decision "
                                                    "(decided elsewhere, or the request changed); reload the inbox", status=409)
        try:
            decision = decision_from_form(form, item.kind, settings.approver)
            done = await inbox.carry_out(runner, item, decision, settings.server_url)
        except (BoundloopError, CheckpointsError, ToolsError) as error:
            return await _inbox_page(console, error=f"refused: {secrets.redact(str(error))}", status=409)
        key = token_urlsafe(8)
        console.notices[key] = f"{decision['decision']} {binding.call_id}: {done}"
        if item.driver == "server":
            console.sent[binding] = f"{decision['decision']} {binding.call_id}: sent to the server, which continues the run"
        return RedirectResponse(f"{PREFIX}/runs/{quote(binding.run_id)}?done={key}", status_code=303)

    async def evals(request: Request) -> Response:
        return await _evals_page(console)

    async def evaluation(request: Request) -> Response:
        return await _evaluation_page(console, request.path_params["eval_id"])

    async def report_css(request: Request) -> Response:
        return Response(eval_report.STYLESHEET, media_type="text/css", headers={"Cache-Control": "no-store"})

    async def home(request: Request) -> Response:
        return RedirectResponse(f"{PREFIX}/", status_code=303)

    routes = [
        Route(f"{PREFIX}/", _guard(console, runs)),
        Route(f"{PREFIX}/inbox", _guard(console, inbox_page)),
        Route(f"{PREFIX}/runs/{{run_id}}", _guard(console, run)),
        Route(f"{PREFIX}/decide", _guard(console, decide), methods=["POST"]),
        Route(f"{PREFIX}/evals", _guard(console, evals)),
        Route(f"{PREFIX}/evals/report.css", _guard(console, report_css)),
        Route(f"{PREFIX}/evals/{{eval_id}}", _guard(console, evaluation)),
        Route(PREFIX, home),
        Mount(f"{PREFIX}/static", StaticFiles(directory=str(PACKAGE / "static")), name="static"),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await console.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.console = console
    return app


async def _run_page(console: Console, run_id: str, notice: str | None = None) -> Response:
    runner = await console.runner()
    try:
        report = await runner.report(run_id)
    except BoundloopError as error:
        return console.page("refused.html", status=404, reason=str(error))
    trace = await runner.trace(run_id)
    history = [vars(row) for row in await approvals.history(runner.pool, run_id)]
    drawn = timeline.build(trace, report.values, history)
    items, sent = _forms(console, await inbox.pending(runner, run_id))
    values = secrets.redact({"ending": report.values.get("ending"), "result": report.values.get("result"), "goal": (report.values.get("task") or {}).get("goal")})
    return console.page("run.html", report=report, values=values, timeline=drawn, items=items, notice=notice, roles=secrets.redact(roles.by_role(report.values)),
                        sent=sent)


EVAL_RUNS_LISTED = 200


async def _evals_page(console: Console) -> Response:
    """The stored suite runs, newest first, and each suite's (and selection's) trend over its latest runs."""
    runner = await console.runner()
    stored = await eval_runs(runner.pool, limit=EVAL_RUNS_LISTED)
    groups: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for row in stored:
        history = groups.setdefault((row.suite, row.quick), [])
        if len(history) < eval_report.TREND_RUNS:
            history.insert(0, row.report)
    trends = [{"suite": suite, "quick": quick, "table": Markup(eval_report.trend_table(suite, history))} for (suite, quick), history in groups.items()]
    return console.page("evals.html", runs=stored, trends=trends)


async def _evaluation_page(console: Console, eval_id: str) -> Response:
    """One stored suite run, rendered as `boundloop eval --html` renders it."""
    runner = await console.runner()
    found = await eval_run(runner.pool, int(eval_id)) if eval_id.isdigit() and int(eval_id) < 2**63 else None
    if found is None:
        return console.page("refused.html", status=404, reason=f"no stored suite run {eval_id!r}: pick one from the Evaluation page")
    history = await eval_runs(runner.pool, suite=found.suite, quick=found.quick, upto=found.id, limit=eval_report.TREND_RUNS)
    body = eval_report.fragment(found.report, [row.report for row in reversed(history)], f"{found.started_at:%Y-%m-%d %H:%M:%S %Z}")
    return console.page("eval_run.html", run=found, body=Markup(body))


async def _inbox_page(console: Console, error: str | None = None, status: int = 200) -> Response:
    runner = await console.runner()
    items, sent = _forms(console, await inbox.pending(runner))
    return console.page("inbox.html", status=status, items=items, error=error, sent=sent)


def _forms(console: Console, pending: list[inbox.Item]) -> tuple[list[dict[str, Any]], list[str]]:
    """The decision forms of the pending requests, and a line for each decision already sent to a
    server that has not taken it yet (its request stays pending until the server's run uses it)."""
    waiting = {item.binding for item in pending}
    for binding in [binding for binding in console.sent if binding not in waiting]:
        del console.sent[binding]  # taken: the request is no longer pending
    return [_form(console, item) for item in pending if item.binding not in console.sent], [console.sent[item.binding] for item in pending if item.binding in console.sent]


def _form(console: Console, item: inbox.Item) -> dict[str, Any]:
    """What one decision form shows (redacted) and the token it posts."""
    request = secrets.redact(item.request)
    arguments = json.dumps(request.get("args"), indent=2, sort_keys=True, default=str)
    return {"item": item, "token": console.tokens.issue(item.binding), "request": request, "args_json": arguments}


def _guard(console: Console, handler: Handler) -> Handler:
    """Serve a request only from loopback, or with the console's token; a `?token=` sets the cookie."""

    async def guarded(request: Request) -> Response:
        token = console.settings.token
        if token is None:
            if not _loopback(request):
                return PlainTextResponse("this console serves loopback clients only; start it with a token (--token or BOUNDLOOP_CONSOLE_TOKEN) "
                                         "to serve others", status_code=403)
            return await handler(request)
        offered = request.query_params.get("token")
        if offered is not None and hmac.compare_digest(offered.encode(), token.encode()):
            response = RedirectResponse(request.url.remove_query_params("token"), status_code=303)
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path=PREFIX)
            return response
        carried = request.cookies.get(COOKIE) or request.headers.get("authorization", "").removeprefix("Bearer ")
        if not hmac.compare_digest(carried.encode(), token.encode()):
            return PlainTextResponse("a token is required: open the console's URL with ?token=TOKEN", status_code=401)
        return await handler(request)

    return guarded


def _loopback(request: Request) -> bool:
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _cross_site(request: Request) -> str | None:
    """Why a POST looks cross-site (a forged form on another origin), or None."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        return "a decision posted from another site is refused"
    origin = request.headers.get("origin")
    if origin and (origin == "null" or urlsplit(origin).netloc != request.headers.get("host")):
        return f"a decision posted from {origin} is refused (not this console's origin)"
    return None

