"""write_ahead: every model call is recorded before it is sent, so no lost step makes it free.

A call's usage reaches the budget through its node's update, which LangGraph saves only when the
node ends. A step that never saves its update — its process killed, its database connection cut,
or the step stopped to wait for an answer to a server's question — would lose the usage, and the
step that runs again would make its calls again without counting the first: a crash loop could
spend past any budget. So each call leaves a row (checkpoints/model_calls.py): INTENT with its
reservation (one turn, the measured input tokens and their price) before the request, ANSWERED
with the reply's usage after it.

When a LangGraph task runs again from its checkpoint, its first model call in that execution (or
the answer to the question it stopped for, graph/calls/elicitation.py, or the end of a tool call
to a server that may sample, nodes/calls.py) charges every row its earlier executions left: an
ANSWERED row at the reply's usage, an INTENT one at its reservation (it may have been sent; no
reply came back, so its output tokens are unknown and counted as none). The
charge is part of the node's update, so it is saved with the node or found again by the next
execution. It counts in `usage.recovered_model_calls` and the turn, token and cost totals, not in
`calls_by_role` (the replies the run's saved steps received), and leaves a
`model_calls_recovered` trace event. A call made outside a run (no LangGraph task) is not recorded:
there is no step to lose.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from langgraph.config import get_config
from psycopg_pool import AsyncConnectionPool

from boundloop.checkpoints import model_calls, store
from boundloop.graph.core.budget import add_usage, summed_usage


@dataclass
class _Execution:
    """One run of one LangGraph task; shared by every model call it makes, its tools' sampling too."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    looked_back: bool = False
    """Whether the earlier executions' rows were already asked for in this one."""

    def look_back(self) -> bool:
        """True the first time only: the earlier executions are charged once per execution."""
        first, self.looked_back = not self.looked_back, True
        return first


_EXECUTION: ContextVar[_Execution | None] = ContextVar("boundloop_model_execution", default=None)


def begin_execution() -> None:
    """Mark the start of a task's execution: the model calls from here on are this execution's."""
    _EXECUTION.set(_Execution())


@dataclass(frozen=True)
class _Task:
    thread_id: str
    task: str
    execution: _Execution


def _task() -> _Task | None:
    """The run, the LangGraph task and the execution the caller is in; None outside a run."""
    try:
        configurable = get_config()["configurable"]
    except RuntimeError:  # not inside a graph step
        return None
    execution = _EXECUTION.get()
    if execution is None:
        execution = _Execution()
        _EXECUTION.set(execution)
    return _Task(configurable["thread_id"], configurable.get("checkpoint_ns", ""), execution)


@dataclass(frozen=True)
class Call:
    """One recorded call: its row (None: not recorded, outside a run), and what earlier executions of its task left."""

    pool: AsyncConnectionPool | None
    row_id: int | None
    recovered: dict[str, Any] | None
    """The usage of the earlier executions' calls (None: nothing to charge)."""


async def open_call(pool_of: Callable[[], Awaitable[AsyncConnectionPool]], role: str, model: str, reserved: Mapping[str, Any]) -> Call:
    """Record the call as INTENT with its `reserved` usage delta, before it is sent. `pool_of` opens
    the run's pool; a call outside a run opens none."""
    where = _task()
    if where is None:
        return Call(None, None, None)
    pool = await pool_of()
    row_id, earlier = await model_calls.open_call(
        pool, thread_id=where.thread_id, task=where.task, execution=where.execution.id,
        role=role, model=model, reserved=_charged_part(reserved), earlier=where.execution.look_back(),
    )
    return Call(pool, row_id, await _recovered(pool, where.thread_id, earlier))


async def charge_earlier(pool: AsyncConnectionPool) -> dict[str, Any] | None:
    """The usage of the calls earlier executions of this task made, unless this execution already
    charged it; None when there is nothing to charge."""
    where = _task()
    if where is None or not where.execution.look_back():
        return None
    earlier = await model_calls.earlier_calls(pool, thread_id=where.thread_id, task=where.task, execution=where.execution.id)
    return await _recovered(pool, where.thread_id, earlier)


async def answer_call(call: Call, usage: Mapping[str, Any]) -> None:
    """Record what the reply cost."""
    if call.pool is not None and call.row_id is not None:
        await model_calls.answer_call(call.pool, call.row_id, _charged_part(usage))


async def withdraw_call(call: Call) -> None:
    """Remove the record of a call that will not be sent (what it found to charge stops it)."""
    if call.pool is not None and call.row_id is not None:
        await model_calls.withdraw_call(call.pool, call.row_id)


async def _recovered(pool: AsyncConnectionPool, thread_id: str, earlier: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The usage of `earlier` rows, traced; None when there are none."""
    if not earlier:
        return None
    usage = add_usage(summed_usage(None, [row["usage"] for row in earlier]), {"recovered_model_calls": len(earlier)})
    await store.append_trace(pool, thread_id, "model_calls_recovered", data={
        "calls": [{"role": row["role"], "model": row["model"], "answered": row["status"] == "ANSWERED"} for row in earlier],
        "model_turns": usage["model_turns"], "input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"],
        "cost_usd": usage["cost_usd"],
    })
    return dict(usage)


def _charged_part(usage: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a call's usage a recovered call is charged: all but the count of replies received."""
    return {key: value for key, value in usage.items() if key != "calls_by_role"}
