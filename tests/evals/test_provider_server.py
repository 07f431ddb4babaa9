"""The script server (graph/evals/provider_server.py) answers each role its script's steps over
OpenAI's chat-completions protocol, and its transport faults before them, spoken to by the openai client."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import ValidationError

from boundloop.graph.evals.provider_server import HttpFault, ScriptServer
from boundloop.graph.models import prompts
from boundloop.graph.models.scripted import Script

SCRIPT = Script.model_validate({"model_id": "m", "roles": {
    "planner": [{"content": {"steps": [], "blocked": None}, "usage": {"input_tokens": 100, "output_tokens": 20}}],
    "actor": [{"content": "", "tool_calls": [{"name": "workspace__read_file", "args": {"path": "notes.md"}}]},
              {"content": "Ana publishes the notes."}],
    "sampler": [{"content": "a summary"}]}})


def ask(client: openai.OpenAI, system: str, **options: object) -> openai.types.chat.ChatCompletion:
    return client.chat.completions.create(model="m", messages=[{"role": "system", "content": system}, {"role": "user", "content": "go"}],
                                          **options)  # type: ignore[call-overload]


def test_each_role_gets_its_steps_in_order_and_a_role_past_its_steps_an_error_naming_it() -> None:
    with ScriptServer(SCRIPT) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        first = ask(client, prompts.ACTOR)
        plan = ask(client, prompts.PLANNER)
        answer = ask(client, prompts.ACTOR, max_completion_tokens=2)
        sampled = ask(client, "You summarise files for a tool.")  # a tool server's sampling request
        with pytest.raises(openai.BadRequestError, match="actor step 3 requested; script has 2 actor steps"):
            ask(client, prompts.ACTOR)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert (call.function.name, json.loads(call.function.arguments), call.id) == ("workspace__read_file", {"path": "notes.md"}, "call_actor_0_0")  # type: ignore[union-attr]
    assert json.loads(plan.choices[0].message.content or "") == {"steps": [], "blocked": None}
    assert (plan.usage.prompt_tokens, plan.usage.completion_tokens) == (100, 20)  # type: ignore[union-attr]
    assert sampled.choices[0].message.content == "a summary"
    assert (answer.choices[0].message.content, answer.usage.completion_tokens) == ("Ana publ", 2)  # type: ignore[union-attr]  # cut at the cap, 4 characters a token


def test_faults_come_before_the_roles_steps_and_answer_none_of_them() -> None:
    faults = {"actor": [HttpFault(status=503), HttpFault(close=True), HttpFault(body="{\"choices\": ["), HttpFault(hang_s=30)]}
    with ScriptServer(SCRIPT, faults=faults) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=0.5)
        with pytest.raises(openai.InternalServerError):
            ask(client, prompts.ACTOR)
        with pytest.raises(openai.APIConnectionError):
            ask(client, prompts.ACTOR)
        with pytest.raises(json.JSONDecodeError):
            ask(client, prompts.ACTOR)
        with pytest.raises(openai.APITimeoutError):
            ask(client, prompts.ACTOR)
        first = ask(client, prompts.ACTOR)
    assert first.choices[0].message.tool_calls[0].function.name == "workspace__read_file"  # type: ignore[index, union-attr]
    assert server.faulted == ["actor"] * 4


def test_a_fault_is_exactly_one_kind() -> None:
    with pytest.raises(ValidationError, match="exactly one of 'status', 'hang_s', 'close' or 'body'"):
        HttpFault(status=503, close=True)
    with pytest.raises(ValidationError):
        HttpFault()
