"""verify: check the final answer — the output schema first (a hard gate), then the acceptance
criteria through the judge model (seed 002's order: tests → artifacts → LLM judge as the fallback).
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import validators
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from graph.models import call_model
from graph.prompts import JUDGE, evidence_brief, task_brief
from graph.replies import parse_reply
from graph.services import Services


class Failure(BaseModel):
    criterion: str
    reason: str


class JudgeReply(BaseModel):
    passed: bool
    failures: list[Failure] = Field(default_factory=list)


async def verify(state: dict[str, Any], services: Services) -> dict[str, Any]:
    answer = final_answer(state)
    task = state["task"]
    failures = schema_failures(answer, task.get("output_schema"))
    update: dict[str, Any] = {"status": {"phase": "verify"}}
    judged = False
    if not failures and task.get("acceptance_criteria"):
        request = [
            SystemMessage(JUDGE),
            HumanMessage(f"{task_brief(task)}\n\nOutput:\n{answer}\n\nEvidence:\n{evidence_brief(state.get('observations', []))}"),
        ]
        reply, update["usage"] = await call_model(state, "judge", request)
        judged = True
        verdict, problem = parse_reply(str(reply.content), JudgeReply)
        if verdict is None:
            failures = [{"criterion": "judge", "reason": f"judge {problem}"}]
        elif not verdict.passed:
            failures = [failure.model_dump() for failure in verdict.failures] or [{"criterion": "judge", "reason": "judge failed the output without reasons"}]
    quality = dict(state.get("quality") or {})
    quality["verification"] = {"passed": not failures, "failures": failures, "judged": judged, "output": answer}
    update["quality"] = quality
    return update


def final_answer(state: dict[str, Any]) -> str:
    for message in reversed(state.get("messages", [])):
        if isinstance(message, AIMessage) and not message.tool_calls:
            return str(message.content)
    return ""


def schema_failures(answer: str, schema: dict[str, Any] | None) -> list[dict[str, str]]:
    """Every way the answer breaks the output schema (empty: it conforms, or there is no schema)."""
    if not schema:
        return []
    try:
        document = json.loads(answer)
    except json.JSONDecodeError as error:
        return [{"criterion": "output_schema", "reason": f"output is not JSON ({error.msg} at line {error.lineno})"}]
    validator = validators.validator_for(schema)(schema)
    return [
        {"criterion": "output_schema", "reason": f"at {'/'.join(map(str, error.absolute_path)) or '(root)'}: {error.message}"}
        for error in sorted(validator.iter_errors(document), key=lambda error: list(error.absolute_path))
    ]
