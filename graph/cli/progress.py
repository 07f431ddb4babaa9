"""progress: how runs look on a terminal — live phase and budget bars, reports, lists, traces."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from boundloop.graph.core.budget import Budget, add_usage, used_of
from boundloop.graph.core.records import Usage
from boundloop.graph.models import roles
from boundloop.graph.quality import proportion
from boundloop.graph.trace.progress import phase_progress

BARS = {"model_turns": "turns", "tool_calls": "tools", "wall_clock_s": "secs", "repairs": "repairs"}


class Progress:
    """Observer for `Runner`: one line per node with the phase and budget bars."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.usage: Usage = {}
        self.budget: dict[str, Any] | None = None

    def __call__(self, node: str, update: dict[str, Any], state: dict[str, Any]) -> None:
        self.budget = update.get("budget") or self.budget
        self.usage = add_usage(self.usage, update.get("usage"))
        self.console.print(render_progress(phase_progress(node, update, self.usage, self.budget)), highlight=False)

    def custom(self, event: Any) -> None:
        """A `custom` stream event: a tool's progress gets its own line."""
        if isinstance(event, dict) and event.get("kind") == "tool_progress":
            self.console.print(render_tool_progress(event), highlight=False)


def render_progress(progress: dict[str, Any]) -> str:
    """The CLI line of a `phase_progress` record."""
    budget = progress["budget"]
    bars = " ".join(_bar(label, budget[name]["used"], budget[name]["limit"]) for name, label in BARS.items()) if budget else ""
    extra = "  " + ", ".join(f"{call['tool']}→{call['status']}" for call in progress["tools"]) if progress["tools"] else ""
    return f"[cyan]{progress['phase']:>13}[/cyan] {bars}{extra}"


def render_tool_progress(event: dict[str, Any]) -> str:
    """The CLI line of a tool's progress notification, e.g. `  progress workspace__grep 3/10 scanning`."""
    total = f"/{event['total']:g}" if event.get("total") is not None else ""
    return f"[cyan]{'progress':>13}[/cyan] {event['tool']} {event['progress']:g}{total} {event.get('message') or ''}".rstrip()


def _bar(label: str, used: float, limit: float | None, width: int = 4) -> str:
    shown = f"{used:.3g}" if isinstance(used, float) else str(used)
    if limit is None:
        return f"{label} {shown}"
    filled = min(width, int(width * used / limit)) if limit else width
    return f"{label} {'█' * filled}{'░' * (width - filled)} {shown}/{limit:g}"


def render_report(console: Console, report: Any) -> None:
    values = report.values
    halted = values.get("result") if (values.get("result") or {}).get("kind") == "halt" else None
    ending = values.get("ending") or halted or {}  # a halt leaves the ending empty: the run resumes where it stopped
    colour = "green" if report.status == "SUCCESS" else "yellow" if report.waiting else "red"
    console.print(f"[bold {colour}]{report.status}[/bold {colour}]  run {report.thread_id}")
    if ending.get("reason"):
        console.print(f"  why: {ending['reason']}")
    if ending.get("next_safe_action"):
        console.print(f"  next: {ending['next_safe_action']}")
    if ending.get("degraded"):
        console.print(f"  degraded: {ending['degraded']}")
    for row in proportion.phase_reasons(values):
        console.print(f"  {row['phase']}: {'ran' if row['ran'] else 'skipped'} — {row['reason']}")
    if rows := roles.by_role(values):
        table = Table("role", "model", "calls", "input tokens", "output tokens", "cost USD", "fallback calls", box=None, pad_edge=False)
        for row in rows:
            table.add_row(row["role"], row["model"], str(row["calls"]), str(row["input_tokens"]), str(row["output_tokens"]), f"{row['cost_usd']:.6g}",
                          str(row["fallback_calls"]))
        console.print(table)
    for item in report.interrupts:
        value = item["value"]
        console.print(f"  waiting: {value.get('type')} {value.get('name')} {value.get('args')}  (interrupt {item['id']})")
    if values.get("budget"):
        budget = Budget.model_validate(values["budget"])
        table = Table("budget", "used", "limit", box=None, pad_edge=False)
        usage = values.get("usage", {})
        for name in Budget.model_fields:
            if name != "parallel_calls":
                limit = getattr(budget, name)
                table.add_row(name, f"{used_of(usage, name):.6g}", "—" if limit is None else f"{limit:g}")
        console.print(table)
        if estimated := usage.get("estimated_usage_calls"):
            console.print(f"  estimated: the provider sent no usage for {estimated} of {usage.get('model_turns', 0)} model call(s); "
                          "their tokens and cost are counted by estimate (over, not under)")
        if recovered := usage.get("recovered_model_calls"):
            console.print(f"  recovered: {recovered} model call(s) made by steps that never saved their update (a crash, an outage, "
                          "a stop for a question); their turns, tokens and cost are charged from the write-ahead record")
    result = values.get("result") or {}
    if result.get("output") or result.get("partial_output"):
        console.print(f"  result: {result.get('output') or result.get('partial_output')}")
    if result.get("sha256"):
        console.print(f"  sha256: {result['sha256']}")


def render_runs(console: Console, rows: list[dict[str, Any]]) -> None:
    table = Table("run", "status", "profile", "updated", "goal", "waiting for / stopped by", "worker")
    for row in rows:
        table.add_row(row["thread_id"], row["status"], row.get("profile") or "", str(row.get("updated_at", ""))[:19], (row.get("goal") or "")[:60],
                      (row.get("detail") or "")[:80], row.get("worker") or "")
    console.print(table)


def render_trace(console: Console, events: list[dict[str, Any]]) -> None:
    table = Table("at", "node", "ms", "detail", title="phase history")
    for event in events:
        data = event.get("data") or {}
        detail = data.get("ending", {}).get("code", "") or ", ".join(
            [f"{call['tool']}:{call['decision']}" for call in data.get("decisions", [])] + [f"{call['name']}:{call['status']}" for call in data.get("tool_calls", [])])
        if event.get("kind") == "model_retry":
            detail = f"model retry {data.get('retry')} ({data.get('role')}): {data.get('error')}"
        elif event.get("kind") == "model_calls_recovered":
            detail = (f"{len(data.get('calls', []))} model call(s) of an unsaved step charged: "
                      f"{data.get('input_tokens')} input, {data.get('output_tokens')} output tokens")
        table.add_row(str(event.get("at", ""))[11:23], event.get("node") or event.get("kind", ""), f"{data.get('elapsed_ms', '')}", detail)
    console.print(table)


def render_pending(console: Console, rows: list[dict[str, Any]]) -> None:
    table = Table("run", "call", "tool", "asked by", "since", "expires", "arguments")
    for row in rows:
        payload = row.get("payload") or {}
        table.add_row(row["thread_id"], row["call_id"], row["tool"], payload.get("rule") or "", str(row["created_at"])[:19],
                      str(row.get("expires_at") or "—")[:19], str(payload.get("args"))[:60])
    console.print(table)
    if rows:
        console.print("decide with: boundloop approve RUN CALL  |  boundloop reject RUN CALL --message TEXT")
