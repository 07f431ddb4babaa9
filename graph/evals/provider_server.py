"""provider_server: a local OpenAI-compatible chat-completions server that replays a boundloop script.

It lets a scenario's scripted replies reach the loop through the provider path (the OpenAI client,
its timeouts, retries and circuit breaker) instead of the in-process scripted model. The role of
each request is recognised from its system prompt (graph/models/prompts.py; any other is a tool
server's sampling request, role `sampler`); the role's next
unanswered step of the script (graph/models/scripted.py `Script`) is its answer: content, tool calls
(arguments sent as their JSON text) and usage (`prompt_tokens`, `completion_tokens`; a step without
`usage` reports the scripted model's estimate). A reply is cut at the request's
`max_completion_tokens` as the scripted model cuts it. Content that is not what the role asked for
(malformed JSON, an unknown tool, invalid arguments, an empty answer) is served as the model's
content, as a provider would serve it. A role asking past its steps gets HTTP 400 naming the role.

HTTP faults come before a role's answers, one per request, in order (`HttpFault`): a status code, a
hang, a dropped connection, a body that is not JSON. A faulted request answers no step, as a failed
call advances no role's step in the scripted model.

`python -m boundloop.graph.evals.provider_server --script FILE [--port N]` serves a script file at
http://127.0.0.1:N/v1 until interrupted.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from boundloop.graph.calls.scope import SAMPLER
from boundloop.graph.core.errors import ScriptError
from boundloop.graph.models import prompts
from boundloop.graph.models.scripted import CHARS_PER_TOKEN, Script, ScriptedUsage, load_script

PROMPT_ROLES = {"planner": prompts.PLANNER, "actor": prompts.ACTOR, "judge": prompts.JUDGE, "critic": prompts.CRITIC,
                "goal_check": prompts.GOAL_CHECK}
"""Each role's system prompt: a request's role is the one whose prompt its system message starts with."""
PREFIX_CHARS = 40


class HttpFault(BaseModel):
    """One request answered with a transport fault instead of a step (exactly one kind)."""

    model_config = ConfigDict(extra="forbid")
    status: int | None = Field(default=None, ge=400, le=599)
    """An HTTP error with an OpenAI-style error body."""
    hang_s: float | None = Field(default=None, gt=0)
    """No answer for this long (or until the server stops): the client's timeout ends the attempt."""
    close: bool = False
    """The connection dropped without an answer."""
    body: str | None = None
    """HTTP 200 with this body sent verbatim as `application/json` (e.g. `{"choices": [` : not JSON)."""

    @model_validator(mode="after")
    def _one_kind(self) -> "HttpFault":
        kinds = [self.status is not None, self.hang_s is not None, self.close, self.body is not None]
        if sum(kinds) != 1:
            raise ValueError("give exactly one of 'status', 'hang_s', 'close' or 'body'")
        return self


def role_of(body: dict[str, Any]) -> str:
    """The role whose system prompt opens the request; `sampler` when none does: a tool server's
    sampling request (graph/calls/scope.py) brings its own system prompt, or none."""
    messages = body.get("messages") or [{}]
    system = str(messages[0].get("content") or "") if messages[0].get("role") in ("system", "developer") else ""
    return next((role for role, prompt in PROMPT_ROLES.items() if system.startswith(prompt[:PREFIX_CHARS])), SAMPLER)


class ScriptServer:
    """`with ScriptServer(script) as server:` serves `script` at `server.base_url` until the block ends."""

    def __init__(self, script: Script, *, faults: dict[str, list[HttpFault]] | None = None, port: int = 0) -> None:
        self.script = script
        self.faults = {role: list(items) for role, items in (faults or {}).items()}
        self.answered: dict[str, int] = {}
        """Steps answered per role: the next request of a role gets its step at this index."""
        self.faulted: list[str] = []
        """The role of each request answered with a fault, in order."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "ScriptServer":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def answer(self, body: dict[str, Any]) -> tuple[HttpFault | None, int, dict[str, Any]]:
        """What to send for one request: a fault, or (status, JSON document)."""
        role = role_of(body)
        with self._lock:
            if self.faults.get(role):
                self.faulted.append(role)
                return self.faults[role].pop(0), 0, {}
            steps = self.script.roles.get(role, [])
            index = self.answered.get(role, 0)
            if index >= len(steps):
                message = f"{role} step {index + 1} requested; script has {len(steps)} {role} steps. Add steps for role {role!r} to the script."
                return None, 400, {"error": {"message": message, "type": "invalid_request_error", "code": None}}
            self.answered[role] = index + 1
        return None, 200, self._completion(body, role, index)

    def _completion(self, body: dict[str, Any], role: str, index: int) -> dict[str, Any]:
        step = self.script.roles[role][index]
        content = step.content if isinstance(step.content, str) else json.dumps(step.content)
        usage = step.usage or ScriptedUsage(
            input_tokens=sum(len(str(message.get("content") or "")) for message in body["messages"]) // CHARS_PER_TOKEN,
            output_tokens=len(content) // CHARS_PER_TOKEN + 1,
        )
        cap = body.get("max_completion_tokens") or body.get("max_tokens")
        if cap is not None and usage.output_tokens > cap:  # a provider stops at the cap
            content = content[: cap * CHARS_PER_TOKEN]
            usage = ScriptedUsage(input_tokens=usage.input_tokens, output_tokens=cap)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if step.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{role}_{index}_{position}", "type": "function",
                 "function": {"name": call.name, "arguments": json.dumps(call.args)}}
                for position, call in enumerate(step.tool_calls)
            ]
        return {
            "id": f"chatcmpl-{role}-{index}", "object": "chat.completion", "created": 0, "model": body.get("model") or self.script.model_id,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if step.tool_calls else "stop"}],
            "usage": {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
                      "total_tokens": usage.input_tokens + usage.output_tokens},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                fault, status, document = server.answer(body)
                if fault is not None and fault.hang_s:
                    server._stopping.wait(fault.hang_s)
                    self.close_connection = True
                    return
                if fault is not None and fault.close:
                    self.close_connection = True
                    return
                if fault is not None:
                    status = fault.status or 200
                    document = {"error": {"message": f"injected HTTP {status}", "type": "server_error", "code": None}}
                payload = fault.body.encode() if fault is not None and fault.body is not None else json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", required=True, help="a boundloop script file (graph/models/README.md, Scripted model)")
    parser.add_argument("--port", type=int, default=8791)
    arguments = parser.parse_args()
    try:
        script = load_script(arguments.script)
    except ScriptError as error:
        parser.exit(2, f"error: {error}\n")
    with ScriptServer(script, port=arguments.port) as running:
        print(f"serving {arguments.script} at {running.base_url}", flush=True)
        threading.Event().wait()
