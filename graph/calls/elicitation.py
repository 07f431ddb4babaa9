"""elicitation: an MCP server's question during a tool call, asked as a LangGraph interrupt.

The same interrupt mechanism as every other escalation (nodes/escalate.py), so the question
survives a restart and is answered from anywhere a run is continued: the terminal, `boundloop
approve RUN CALL --answer JSON` / `reject`, the console, or `Command(resume=...)` on the server API.

How one call goes (nodes/calls.py): the call is sent; when the server asks something the run has
no answer for (tools/client_features.py), the call is cancelled, the question recorded (the
approvals table: `boundloop pending` lists it, under call id `<call>.q<n>`), and the run is
interrupted with it. Resumed — in this process or a new one — the execute node runs again: it
gives each recorded question to `interrupt()`, which now returns its answer without asking, and
sends the call again with those answers, so the server's same question (same message and schema)
is answered from them. Servers are assumed to ask before they act; for a side-effecting call that
is not safe to repeat the question says so, and the ledger lets only an answered question re-send
it (tools/ledger.py).
"""

from __future__ import annotations

from typing import Any, Callable, Literal

from langgraph.types import interrupt
from pydantic import BaseModel, ConfigDict, ValidationError

from boundloop.checkpoints import approvals, store
from boundloop.checkpoints.errors import ApprovalRefused
from boundloop.graph.core.budget import add_usage
from boundloop.graph.core.faults import crash_point
from boundloop.graph.models import write_ahead
from boundloop.tools import secrets
from boundloop.tools.client_features import CallScope, invalid, with_defaults

MAX_ANSWERS = 3
"""Answers a human may give to one question before an invalid one is taken as cancel."""
RESENT = ("{name} has side effects and is not marked idempotent. It was stopped while the server waited "
          "for this answer and any answer sends it again: if the server acted before asking, it acts twice.")


class ElicitationAnswer(BaseModel):
    """A human's answer to an MCP server's question."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    action: Literal["accept", "decline", "cancel"]
    """accept: answer with `content`; decline: refuse to answer; cancel: dismiss the question."""
    content: dict[str, Any] | None = None
    """The answer's fields (accept), checked against the question's `schema`; omitted fields take its defaults."""
    approver: str | None = None
    """Who answered; recorded."""


class Questions:
    """The questions one call's server asked, asked in turn at interrupts, and their answers."""

    def __init__(self, call: dict[str, Any], scope: CallScope, pool: Any, run_id: str, *, user: str | None, repeats_blindly: bool,
                 may_be_recorded: Callable[[], bool] = lambda: True) -> None:
        self.call, self.scope, self.pool, self.run_id, self.user = call, scope, pool, run_id, user
        self.repeats_blindly = repeats_blindly
        """A re-send could repeat an effect (side effects, not safe to repeat): the question warns."""
        self.may_be_recorded = may_be_recorded
        """Whether a question of the run may be recorded (Services.questions_may_be_recorded): when
        not, there is nothing to look up."""
        self.count = 0

    def ask_id(self, number: int) -> str:
        return f"{self.call['call_id']}.q{number}"

    async def answer_recorded(self) -> None:
        """Put the answer of every recorded question not yet answered here into the scope; the
        first one without an answer interrupts the run (`GraphInterrupt`)."""
        if not self.may_be_recorded():
            return
        while (recorded := await approvals.get_approval(self.pool, self.run_id, self.ask_id(self.count))) is not None:
            question = recorded.payload
            if self.count == 0 and (recovered := await write_ahead.charge_earlier(self.pool)):  # the stopped sends' sampling
                self.scope.spent["usage"] = add_usage(self.scope.spent.get("usage"), recovered)
            self.scope.answers[question["key"]] = await self._ask(question)
            self.count += 1
            self.scope.count_asked(1)

    async def record(self, phase: str) -> None:
        """Record the scope's question (the call was stopped for it); `answer_recorded` then asks it."""
        asked = self.scope.question
        assert asked is not None
        request = {"type": "elicitation", "call_id": self.ask_id(self.count), "name": self.call["name"], "server": asked["server"],
                   "tool": asked["tool"], "message": asked["message"], "schema": asked["schema"], "key": asked["key"],
                   "resend_warning": RESENT.format(name=self.call["name"]) if self.repeats_blindly else None}
        await approvals.request_approval(self.pool, thread_id=self.run_id, call_id=request["call_id"], tool=approvals.QUESTION_TOOL,
                                         args_hash="", expires_at=None, payload=request)
        for event in self.scope.events:  # what the stopped send's server asked before the question
            await store.append_trace(self.pool, self.run_id, "mcp_request", node=phase, data=secrets.redact(event))
        self.scope.events.clear()
        await store.append_trace(self.pool, self.run_id, "mcp_request", node=phase, data=secrets.redact(
            {"kind": "elicitation", "tool": asked["tool"], "server": asked["server"], "message": asked["message"],
             "schema": asked["schema"], "action": "asked", "why": f"the call was stopped; the run waits at {request['call_id']}"}))
        crash_point("question:recorded")

    async def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Interrupt until an answer fits the question's schema (at most MAX_ANSWERS times)."""
        problem = None
        for asked_before in range(MAX_ANSWERS):
            asked = request if problem is None else {**request, "refused": problem, "asks_left": MAX_ANSWERS - asked_before}
            raw = interrupt(asked, response_schema=ElicitationAnswer)
            try:
                answer = ElicitationAnswer.model_validate(raw)
            except ValidationError as error:
                first = error.errors()[0]
                problem = f"{'.'.join(str(part) for part in first['loc']) or 'answer'}: {first['msg']}"
                continue
            if answer.action != "accept":
                return await self._decided(request, {"action": answer.action}, answer.approver)
            content = with_defaults(request["schema"], answer.content or {})
            problem = invalid(request["schema"], content)
            if problem is None:
                return await self._decided(request, {"action": "accept", "content": content}, answer.approver)
        return await self._decided(request, {"action": "cancel"}, None)

    async def _decided(self, request: dict[str, Any], answer: dict[str, Any], approver: str | None) -> dict[str, Any]:
        decision = "approve" if answer["action"] == "accept" else "reject"
        try:
            await approvals.decide(self.pool, thread_id=self.run_id, call_id=request["call_id"], args_hash="", decision=decision,
                                   approver=approver or self.user, interrupt_id=None)
        except ApprovalRefused:
            pass  # the node ran again (a later question, or a crash): this answer is already on record
        return answer
