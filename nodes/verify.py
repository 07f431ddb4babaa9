"""verify: check the final answer — that there is one and the output schema (hard gates), then
the task's tests and artifact checks through tools, then the acceptance criteria through the judge
model (tests → artifacts → an LLM judge as the fallback: deterministic evidence first). Each stage runs only
if the one before it passed: a failing test is reason enough to repair, without paying for a judge. The judge
checks only the criteria the run's decision leaves to it (graph/quality/proportion.py: those no check covers),
and verify then decides, from its verdict and the run so far, whether the critic runs (unless it
runs already, beside the judge in this step: graph/quality/proportion.py).

Each failure a check finds carries its root cause (graph/quality/diagnosis.py) where the check tells it: a
schema violation, a failing test (a logic error), an artifact missing its text (incompleteness), a
tool that erred; the judge's unmet criteria are classified later, with the critic's defects. A
check's failure also names the plan step that wrote the file it points at, where one did
(graph/quality/fault_trace.py), so a re-plan can replace that step alone.

A judge that gives no usable verdict, even asked again, fails nothing: an attended run records the
verdict as undecided (the critic still scores, and a human reviews); an unattended run ends
UNAVAILABLE_DEP naming the judge, its work kept.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

from jsonschema import validators
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from boundloop.checkpoints.store import get_payload
from boundloop.graph.quality import fault_trace, proportion
from boundloop.graph.context import fitting, memory
from boundloop.graph.core import escalations
from boundloop.graph.core.budget import Budget, add_usage, result_chars_share
from boundloop.graph.quality.diagnosis import RootCause
from boundloop.graph.models.catalog import MAX_ASKS, NoReply, ask_for, unusable_reply_ending
from boundloop.graph.models.prompts import JUDGE, task_brief
from boundloop.graph.services import Services, current_run_id
from boundloop.graph.state import LoopUpdate, applied
from boundloop.graph.quality.test_results import add_tests, test_failures, test_report
from boundloop.graph.state import LoopState
from boundloop.nodes.calls import run_call
from boundloop.tools import gateway


class Failure(BaseModel):
    criterion: str
    reason: str


class Conflict(BaseModel):
    claim: str
    sources: list[str] = Field(default_factory=list)
    """Evidence ids (observation call ids) that disagree on the claim."""


class JudgeReply(BaseModel):
    passed: bool
    failures: list[Failure] = Field(default_factory=list)
    conflicts: list[Conflict] = Field(default_factory=list)


async def verify(state: LoopState, services: Services) -> LoopUpdate:
    answer = final_answer(state)
    task = state["task"]
    failures = answer_failures(answer, task.get("output_schema"))
    update: LoopUpdate = {"status": {"phase": "verify"}}
    tests = None
    if not failures and task.get("checks"):
        failures, checked, tests = await run_checks(state, services)
        update.update(checked)
    judged, undecided, conflicts, consistency = False, None, [], None
    beside = proportion.beside_judge(state)  # the critic asks in this step too: the judge keeps to its share
    judging = {**state, "budget": proportion.model_shares(state)[0].model_dump(mode="json")} if beside else state
    if not failures and (criteria := proportion.judged_criteria(state)) is not None:
        brief = task_brief({**task, "acceptance_criteria": criteria})
        request = fitting.fitted(state, "judge", answer, state.get("observations", []), lambda output, evidence: [
            SystemMessage(JUDGE), HumanMessage(f"{brief}\n\nOutput:\n{output}\n\nEvidence:\n{evidence}")])
        try:
            verdict, problem, spent, consistency = await judge(judging, services, request)
        except NoReply as stopped:  # the run ends here; the trace still gets the (undecided) validation result
            update.update({**stopped.update, "usage": add_usage(update.get("usage"), stopped.update["usage"])})
            verdict, problem = None, stopped.ending["reason"]
        else:
            update.update({**spent, "usage": add_usage(update.get("usage"), spent["usage"])})
            judged = True
            if verdict is None and not escalations.can_ask_a_human(state):
                update["ending"] = unusable_reply_ending("judge", problem)
        if verdict is None:
            undecided = "judge"
            failures = [{"criterion": "judge", "reason": f"the judge gave no usable verdict in {MAX_ASKS} asks ({problem})" if judged
                         else f"the judge was not heard: {problem}"}]
        elif not verdict.passed:
            failures = [failure.model_dump() for failure in verdict.failures] or [{"criterion": "judge", "reason": "judge failed the output without reasons"}]
        conflicts = [] if verdict is None else [conflict.model_dump() for conflict in verdict.conflicts]
    verification = {"passed": not failures, "failures": failures, "judged": judged, "undecided": undecided, "output": answer,
                    "conflicts": conflicts, "tests": tests, "consistency": consistency}
    update["quality"] = {"verification": verification}  # its own part: the critic may write its part in this step
    if control := state.get("control"):
        critic = proportion.critique_decision(applied(state, {key: value for key, value in update.items() if key != "status"}))
        update["control"] = {**control, "critique": proportion.critic_beside(critic, beside)}
    return update


async def judge(state: LoopState, services: Services, request: list[Any]) -> tuple[JudgeReply | None, str | None, LoopUpdate, float | None]:
    """The judge's verdict; with `judge_samples` > 1, the majority's (a tie fails), and the share of
    usable verdicts that agree with it (a confidence signal), else None. Every sample is a counted call."""
    samples = state["settings"].get("judge_samples", 1)
    spent: LoopUpdate = {"usage": {}}
    verdicts: list[JudgeReply] = []
    problem = None
    for _ in range(samples):
        try:
            verdict, problem, cost = await ask_for({**state, "usage": add_usage(state.get("usage"), spent["usage"])}, services, "judge", request, JudgeReply)
        except NoReply as stopped:
            raise NoReply({**stopped.update, "usage": add_usage(spent["usage"], stopped.update["usage"])}) from stopped
        spent = {**spent, **cost, "usage": add_usage(spent["usage"], cost["usage"])}
        verdicts += [verdict] if verdict is not None else []
    if not verdicts:
        return None, problem, spent, None
    passing = [verdict for verdict in verdicts if verdict.passed]
    failing = [verdict for verdict in verdicts if not verdict.passed]
    majority = passing if len(passing) > len(failing) else failing
    return majority[0], None, spent, (round(len(majority) / len(verdicts), 4) if samples > 1 else None)


async def run_checks(state: LoopState, services: Services) -> tuple[list[dict[str, Any]], LoopUpdate, dict[str, int] | None]:
    """Run the task's checks, tests first, through the gate and the executor; return the failures,
    the state update (observations and usage) the calls produced, and the test counts (None: no
    check reported structured test results)."""
    checks = sorted(state["task"]["checks"], key=lambda check: check["kind"] != "test")
    proposed = [gateway.ProposedCall(f"v{state['usage'].get('calls_by_role', {}).get('actor', 0)}.{n}", f"check:{n}", check["tool"], check["args"])
                for n, check in enumerate(checks)]
    registry = await services.registry(current_run_id(), state["settings"], state.get("tools"))
    admissions = await gateway.admit_all(
        proposed, registry=registry,
        rules=gateway.run_policy(state["settings"], state["task"]["profile"]), budget=Budget.model_validate(state["budget"]),
        usage=state["usage"], breaker_state=state.get("breakers") or {}, now=time.time(),
    )
    failed_checks: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    """(failure, the check that found it), for tracing each failure to the plan step behind it."""
    tests: dict[str, int] | None = None
    update: LoopUpdate = {"observations": [], "usage": {}}
    for check, admission in zip(checks, admissions):
        if admission.verdict != "admit":
            failed_checks.append(({"criterion": check["name"], "reason": f"the check could not run: {admission.message}",
                                   "cause": RootCause.TOOL_FAILURE.value}, None))  # it never looked at anything: no trace
            continue
        payload = {"settings": state["settings"], "profile": state["task"]["profile"], "tools": state.get("tools"), "retries_left": 0,
                   "result_chars_left": result_chars_share(add_usage(state["usage"], update["usage"]), Budget.model_validate(state["budget"]), 1)}
        ran = await run_call(admission.call, payload, services, phase="verify")
        update["observations"] += ran["observations"]
        update["usage"] = add_usage(add_usage(update["usage"], ran["usage"]), admission.reservation)
        output = await tool_output(ran, services)
        if check["kind"] == "test" and (report := test_report(output)) is not None:
            tests = add_tests(tests, report)
            if located := test_failures(check, report):
                failed_checks += [({**failure, "cause": RootCause.LOGIC_ERROR.value}, check) for failure in located]
                continue
        if failed := check_failure(check, ran["observations"][0]["status"], output):
            reason, cause = failed
            failed_checks.append(({"criterion": check["name"], "reason": reason, "cause": cause.value}, check))
    if all(check is None for _, check in failed_checks):
        return [failure for failure, _ in failed_checks], update, tests
    writers = await fault_trace.run_writers(state.get("observations", []), registry, services)
    return await asyncio.to_thread(_traced, failed_checks, writers, registry), update, tests


def _traced(failed_checks: list[tuple[dict[str, Any], dict[str, Any] | None]], writers: fault_trace.Writers, registry: Any) -> list[dict[str, Any]]:
    """Each failure with the plan step that wrote the file it points at, where one did (graph/quality/fault_trace.py)."""
    traced = []
    for failure, check in failed_checks:
        if check is not None:
            location = failure.get("location") if failure.get("test") else None
            files, shown = fault_trace.check_files(registry.get(check["tool"]), check["args"], location)
            failure = {**failure, **(writers.trace(files, shown) or {})}
        traced.append(failure)
    return traced


async def tool_output(ran: Mapping[str, Any], services: Services) -> str:
    """The check's whole tool output: the stored payload when the model's copy was cut."""
    observation = ran["observations"][0]
    if observation.get("pointer") and (stored := await get_payload(await services.pool(), observation["pointer"])):
        return stored.body
    return gateway.unwrap_data(str(ran["messages"][0].content))


def check_failure(check: dict[str, Any], status: str, output: str) -> tuple[str, RootCause] | None:
    """Why a check's tool result fails it, and the root cause that tells (None: it passes). A tool
    that errs is a TOOL_FAILURE; an artifact missing its text is INCOMPLETENESS; a wrong exit code
    is a LOGIC_ERROR in what the command checks."""
    if status != "ok":
        return f"{check['tool']} ended {status}: {output[:300]}", RootCause.TOOL_FAILURE
    if check.get("expect_contains") is not None and check["expect_contains"] not in output:
        return f"output of {check['tool']} does not contain {check['expect_contains']!r}", RootCause.INCOMPLETENESS
    if check.get("expect_exit_code") is not None:
        try:
            exit_code = json.loads(output).get("exit_code")
        except (json.JSONDecodeError, AttributeError):
            return f"output of {check['tool']} reports no exit_code", RootCause.TOOL_FAILURE
        if exit_code != check["expect_exit_code"]:
            return f"{check['tool']} exited {exit_code}, expected {check['expect_exit_code']}: {output[:300]}", RootCause.LOGIC_ERROR
    return None


def final_answer(state: Mapping[str, Any]) -> str:
    for message in reversed(state.get("messages", [])):
        if isinstance(message, AIMessage) and not message.tool_calls and not message.invalid_tool_calls:
            return memory.split_answer(str(message.text))[0]
    return ""


def answer_failures(answer: str, schema: dict[str, Any] | None) -> list[dict[str, str]]:
    """The deterministic gates: an answer exists, and it conforms to the output schema."""
    if not answer.strip():
        return [{"criterion": "final answer", "reason": "the final answer is empty; give the result itself, not only tool calls", "cause": RootCause.INCOMPLETENESS.value}]
    return schema_failures(answer, schema)


def schema_failures(answer: str, schema: dict[str, Any] | None) -> list[dict[str, str]]:
    """Every way the answer breaks the output schema (empty: it conforms, or there is no schema)."""
    if not schema:
        return []
    try:
        document = json.loads(answer)
    except json.JSONDecodeError as error:
        return [{"criterion": "output_schema", "reason": f"output is not JSON ({error.msg} at line {error.lineno})", "cause": RootCause.SCHEMA_VIOLATION.value}]
    validator = validators.validator_for(schema)(schema)
    return [
        {"criterion": "output_schema", "reason": f"at {_path(error)}: {error.message}", "cause": RootCause.SCHEMA_VIOLATION.value, "location": _path(error)}
        for error in sorted(validator.iter_errors(document), key=lambda error: list(error.absolute_path))
    ]


def _path(error: Any) -> str:
    return "/".join(map(str, error.absolute_path)) or "(root)"
