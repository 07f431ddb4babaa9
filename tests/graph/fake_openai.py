"""A local OpenAI-compatible chat-completions server for tests of the provider path.

It answers by role, recognised from the system prompt, the way a well-behaved model would:
the planner gets a one-step plan (no tool promised), the actor reads notes.md and then answers, the judge and the
critic pass, the goal check finds the objective valid. Every request is kept (with its role) so a test can check what boundloop sent.

A test can make a role misbehave: `FakeOpenAI(faults={"actor": [FAULT, ...]})` answers that
role's next requests with the faults in order, then behaves again. A FAULT is a dict:

    {"hang_s": 45}                   answer only after 45 s (or when the server stops)
    {"status": 503}                  an HTTP error with an OpenAI-style error body
    {"close": True}                  drop the connection without answering
    {"content": "not json"}          this content (None: no content), no tool calls
    {"tool_calls": [{"name": "workspace__read_file", "arguments": "{not json"}]}
                                     these tool calls, `arguments` sent verbatim
    {"usage": False}                 the normal answer, without the usage field

`usage=False` drops the usage field from every answer; `port=N` serves on a chosen port (to bring
a provider back where a run expects it); `delay_s` makes every answer wait that long (a model's
latency). `arrived` keeps each request's arrival time (`time.time()`).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PLAN = {"steps": [{"id": "s1", "description": "answer from the notes"}], "blocked": None}
"""A step that promises no tool call: a fault test may replace the actor's read by any call."""
VERDICT = {"passed": True, "failures": []}
SCORES = {"scores": {"correctness": 1, "completeness": 1, "coherence": 1, "safety": 1}, "defects": []}
ANSWER = "Ana publishes the notes."
GOAL_VALID = {"objective_valid": True, "reason": "the notes are being read", "evidence": []}
ROLES = {"You plan work": "planner", "You carry out a plan": "actor", "You check a result": "judge", "You are an independent reviewer": "critic",
         "You check whether a long agent run": "goal_check"}


class FakeOpenAI:
    """`with FakeOpenAI() as fake:` serves http://127.0.0.1:<port>/v1 until the block ends."""

    def __init__(self, *, faults: dict[str, list[dict[str, Any]]] | None = None, usage: bool = True, port: int = 0,
                 delay_s: float = 0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.arrived: list[float] = []
        self.headers: list[dict[str, str]] = []
        self.roles: list[str] = []
        self.faults = {role: list(items) for role, items in (faults or {}).items()}
        self.usage = usage
        self._stopping = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                fake.arrived.append(time.time())
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                role = _role(body)
                fake.requests.append(body)
                fake.headers.append({key.lower(): value for key, value in self.headers.items()})
                fake.roles.append(role)
                fault = fake.faults[role].pop(0) if fake.faults.get(role) else {}
                if fault.get("hang_s") or delay_s:
                    fake._stopping.wait(fault.get("hang_s") or delay_s)
                if fault.get("close"):
                    self.close_connection = True
                    return
                status = fault.get("status", 200)
                answer = _error(status) if status != 200 else _completion(body, role, fault, fake.usage)
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that gave up on a hung answer closed its socket: expected here

        self._server = Server(("127.0.0.1", port), Handler)
        self.port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def count(self, role: str) -> int:
        return self.roles.count(role)

    def __enter__(self) -> "FakeOpenAI":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()


def _role(body: dict[str, Any]) -> str:
    system = body["messages"][0]["content"]
    return next((role for prefix, role in ROLES.items() if system.startswith(prefix)), "unknown")


def _completion(body: dict[str, Any], role: str, fault: dict[str, Any], usage: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if "content" in fault or "tool_calls" in fault:
        message["content"] = fault.get("content")
        if fault.get("tool_calls"):
            message["tool_calls"] = [
                {"id": f"call_{len(body['messages'])}_{n}", "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}
                for n, call in enumerate(fault["tool_calls"])
            ]
    elif role == "planner":
        message["content"] = json.dumps(PLAN)
    elif role == "judge":
        message["content"] = json.dumps(VERDICT)
    elif role == "critic":
        message["content"] = json.dumps(SCORES)
    elif role == "goal_check":
        message["content"] = json.dumps(GOAL_VALID)
    elif any(item["role"] == "tool" for item in body["messages"]):
        message["content"] = ANSWER
    else:
        arguments = json.dumps({"path": "notes.md"})
        message["tool_calls"] = [{"id": "call_1", "type": "function", "function": {"name": "workspace__read_file", "arguments": arguments}}]
    completion_tokens = min(100, body.get("max_completion_tokens") or 100)  # a provider stops at the request's cap
    completion = {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if "tool_calls" in message else "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": completion_tokens, "total_tokens": 1000 + completion_tokens},
    }
    if not usage or fault.get("usage") is False:
        del completion["usage"]
    return completion


def _error(status: int) -> dict[str, Any]:
    return {"error": {"message": f"fake provider error {status}", "type": "server_error" if status >= 500 else "invalid_request_error", "code": None}}
