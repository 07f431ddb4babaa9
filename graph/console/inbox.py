"""inbox: what waits for a human across runs, and carrying out a decision made in the console.

Pending requests come from the approval records (tool approvals and escalations alike), each
joined to the live interrupt of its run. A decision continues the run wherever it is driven:
a run of the worker pool gets its continuation queued for a worker (as `boundloop approve`
does), a thread a LangGraph server drives is resumed through that server's API, and any other
run is continued here by the runner, exactly as `boundloop approve` continues it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig

from boundloop.checkpoints import approvals
from boundloop.checkpoints.errors import ApprovalRefused
from boundloop.checkpoints.queue import driven_by_workers
from boundloop.graph.console.tokens import Binding
from boundloop.graph.core.errors import ConfigError
from boundloop.graph.run.runner import Runner, as_resume_value

Driver = Literal["here", "workers", "server"]
RISK = {"irreversible": "high", "compensable": "medium", "reversible": "low"}
DRIVERS: dict[str, str] = {"here": "this console", "workers": "the worker pool", "server": "a LangGraph server"}


@dataclass
class Item:
    """One request waiting for a human."""

    binding: Binding
    kind: str
    """tool_approval, ask_user, elicitation, budget_extension, review or plan_approval."""
    request: dict[str, Any]
    asked_at: datetime
    driver: Driver
    assistant_id: str | None = None

    @property
    def driven_by(self) -> str:
        return DRIVERS[self.driver]

    @property
    def risk(self) -> str:
        if not self.request.get("side_effect"):
            return "none (read-only)"
        reversibility = self.request.get("reversibility") or "unknown"
        return f"{RISK.get(reversibility, 'high')} ({reversibility} side effect)"


async def pending(runner: Runner, run_id: str | None = None) -> list[Item]:
    """Every request without a decision, oldest first, with the interrupt it is answered through."""
    rows = await approvals.pending_approvals(runner.pool, run_id)
    snapshots = {thread: await runner.graph.aget_state(_config(thread)) for thread in {row.thread_id for row in rows}}
    items = []
    for row in rows:
        snapshot = snapshots[row.thread_id]
        live = {item.value.get("call_id"): item for item in snapshot.interrupts if isinstance(item.value, dict)}
        interrupt = live.get(row.call_id)
        request = interrupt.value if interrupt is not None else (row.payload or {})
        assistant = _assistant(snapshot.metadata)
        binding = Binding(row.thread_id, row.call_id, row.args_hash, interrupt.id if interrupt is not None else "")
        items.append(Item(binding, str(request.get("type") or row.tool), request, row.created_at,
                          await _driver(runner, row.thread_id, assistant), assistant))
    return items


async def carry_out(runner: Runner, item: Item, decision: dict[str, Any], server_url: str | None) -> str:
    """Apply `decision` to the request where its run is driven; a one-line account of what happened."""
    binding = item.binding
    if item.driver == "workers":
        from boundloop.graph.run import workers

        async with workers.opened_queue(runner.pool) as queue:
            job = await workers.enqueue_decision(queue, runner, binding.run_id, binding.call_id, {**decision, "args_hash": binding.args_hash or None})
        return f"queued for a worker (job {job})"
    if item.driver == "server":
        return await _resume_on_server(item, decision, server_url)
    report = await runner.decide(binding.run_id, binding.call_id, {**decision, "args_hash": binding.args_hash or None})
    return f"the run continued here: {report.status}"


async def _resume_on_server(item: Item, decision: dict[str, Any], server_url: str | None) -> str:
    from langgraph_sdk import get_client

    binding = item.binding
    if not binding.interrupt_id:
        raise ApprovalRefused(binding.run_id, binding.call_id, "the server's thread is not waiting at this request yet; reload the inbox")
    if item.kind == "tool_approval":
        answer = {**decision, "call_id": binding.call_id, "args_hash": binding.args_hash}
    else:
        answer = as_resume_value(item.request, binding.run_id, binding.call_id, decision)
    try:
        client = get_client(url=server_url)  # None: in-process, when the console is a route of that server
    except Exception as error:  # the SDK finds no server in this process
        raise ConfigError("this run is driven by a LangGraph server: decide it in that server's console (/console) "
                          f"or start this console with --server URL ({error})") from None
    try:  # a server that does not hold the thread (another worker's, or one restarted) adopts it: its state is in the database
        await client.threads.create(thread_id=binding.run_id, if_exists="do_nothing")
        await client.runs.create(binding.run_id, item.assistant_id or "boundloop", command={"resume": {binding.interrupt_id: answer}})
    except Exception as error:  # noqa: BLE001 (the SDK's HTTP and connection errors: one line, the run still waits)
        where = server_url or "this server"
        raise ConfigError(f"the LangGraph server at {where} did not take the decision ({type(error).__name__}: {str(error)[:200]}); "
                          "the run still waits: decide it again once that server is up, or from the CLI with `boundloop approve`") from None
    finally:
        await client.aclose()
    return "the server continues the run"


async def _driver(runner: Runner, run_id: str, assistant: str | None) -> Driver:
    if assistant:
        return "server"
    return "workers" if await driven_by_workers(runner.pool, run_id) else "here"


def _assistant(metadata: Any) -> str | None:
    """The server assistant that drives a thread; the server stamps its runs' checkpoints."""
    metadata = metadata or {}
    if not metadata.get("langgraph_api_version") and not metadata.get("assistant_id"):
        return None
    return str(metadata.get("assistant_id") or metadata.get("graph_id") or "boundloop")


def _config(run_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": run_id}}
