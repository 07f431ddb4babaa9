"""A local OpenAI Responses endpoint (POST /v1/responses) for tests of the Responses path and hosted tools.

It answers by role, recognised from the system message the way tests/graph/fake_openai.py does:
the planner gets a one-step plan, the judge and the critic pass, and the actor answers ANSWER
unless the test scripts its turns. `FakeResponses(actor=[TURN, ...])` answers the actor's requests
with the turns in order, then with ANSWER. A TURN is:

    [item, ...]                  these output items (hosted calls, approval requests, reasoning, text)
    callable(body) -> [item, ...] items computed from the request (e.g. after reading an approval response)
    {"status": 500}              an HTTP error with an OpenAI-style error body (429, 500, ...)
    {"malformed": True}          HTTP 200 whose body is not JSON
    {"hang_s": 45}               read the request, answer nothing for 45 s (or until the server stops), then drop it
    {"stall_s": 45}              send the status, the headers and the first part of the answer (the first event
                                 when streaming), then nothing more for 45 s (or until the server stops)

Requests with `"stream": true` are answered as server-sent events (response.created, each item's
output_item.added/done with text deltas, response.completed). Every request body is kept in
`requests` with its role in `roles`.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from tests.graph.fake_openai import ANSWER, PLAN, ROLES, SCORES, VERDICT, _error

Turn = list[dict[str, Any]] | Callable[[dict[str, Any]], list[dict[str, Any]]] | dict[str, Any]
USAGE = {"input_tokens": 1000, "output_tokens": 100, "total_tokens": 1100,
         "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 20}}


def text(content: str, item_id: str = "msg_1") -> dict[str, Any]:
    """A message output item carrying `content`."""
    return {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": content, "annotations": []}]}


def reasoning(item_id: str = "rs_1") -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id, "summary": [{"type": "summary_text", "text": "Search first, then answer."}]}


class FakeResponses:
    """`with FakeResponses(actor=[...]) as fake:` serves http://127.0.0.1:<port>/v1 until the block ends."""

    def __init__(self, *, actor: list[Turn] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.roles: list[str] = []
        self.paths: list[str] = []
        self.turns = list(actor or [])
        self._stopping = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                role = _role(body)
                fake.requests.append(body)
                fake.roles.append(role)
                fake.paths.append(self.path)
                turn: Turn = fake.turns.pop(0) if role == "actor" and fake.turns else []
                if isinstance(turn, dict) and "status" in turn:
                    return self._send(turn["status"], json.dumps(_error(turn["status"])).encode(), "application/json")
                if isinstance(turn, dict) and turn.get("malformed"):
                    return self._send(200, b"{not json", "application/json")
                if isinstance(turn, dict) and turn.get("hang_s"):
                    fake._stopping.wait(turn["hang_s"])
                    self.close_connection = True
                    return None
                stall_s = turn.get("stall_s") if isinstance(turn, dict) else None
                items = [text(_content(role))] if isinstance(turn, dict) else turn(body) if callable(turn) else list(turn) or [text(_content(role))]
                response = _response(body, items, len(fake.requests))
                if body.get("stream"):
                    return self._send(200, _events(response), "text/event-stream", stall_s=stall_s)
                return self._send(200, json.dumps(response).encode(), "application/json", stall_s=stall_s)

            def _send(self, status: int, payload: bytes, kind: str, *, stall_s: float | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if stall_s:  # part of the answer, then silence: the connection stays open, the answer never completes
                    self.wfile.write(payload[: payload.find(b"\n\n") + 2 if kind == "text/event-stream" else len(payload) // 2])
                    self.wfile.flush()
                    fake._stopping.wait(stall_s)
                    self.close_connection = True
                    return
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that gave up on a hung answer closed its socket: expected here

        self._server = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def actor_requests(self) -> list[dict[str, Any]]:
        return [body for body, role in zip(self.requests, self.roles) if role == "actor"]

    def __enter__(self) -> "FakeResponses":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()


def input_items(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The request's input items of type `kind`."""
    return [item for item in body.get("input", []) if isinstance(item, dict) and item.get("type") == kind]


def _role(body: dict[str, Any]) -> str:
    first = (body.get("input") or [{}])[0]
    system = first.get("content") if isinstance(first.get("content"), str) else json.dumps(first.get("content"))
    return next((role for prefix, role in ROLES.items() if str(system).startswith(prefix)), "unknown")


def _content(role: str) -> str:
    return {"planner": json.dumps(PLAN), "judge": json.dumps(VERDICT), "critic": json.dumps(SCORES)}.get(role, ANSWER)


def _response(body: dict[str, Any], items: list[dict[str, Any]], number: int) -> dict[str, Any]:
    return {"id": f"resp_{number}", "object": "response", "created_at": 0, "model": body["model"], "status": "completed",
            "output": items, "usage": USAGE, "error": None, "incomplete_details": None, "instructions": None, "metadata": {},
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": body.get("tools", []), "temperature": None, "top_p": None}


def _events(response: dict[str, Any]) -> bytes:
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {**response, "status": "in_progress", "output": []}}]
    for index, item in enumerate(response["output"]):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        for part, content in enumerate(item.get("content") or [] if item["type"] == "message" else []):
            events.append({"type": "response.output_text.delta", "item_id": item["id"], "output_index": index, "content_index": part,
                           "delta": content["text"]})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response})
    return b"".join(f"event: {event['type']}\ndata: {json.dumps({**event, 'sequence_number': n})}\n\n".encode()
                    for n, event in enumerate(events))

