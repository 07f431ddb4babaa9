"""A local OpenAI-compatible chat-completions server for tests of the provider path.

It answers by role, recognised from the system prompt, the way a well-behaved model would:
the planner gets a one-step plan, the actor reads notes.md and then answers, the critic passes.
Every request is kept so a test can check what boundloop sent.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PLAN = {"steps": [{"id": "s1", "description": "read the notes", "tools": ["workspace__read_file"]}], "blocked": None}
SCORES = {"scores": {"correctness": 1, "completeness": 1, "coherence": 1, "safety": 1}, "defects": []}


class FakeOpenAI:
    """`with FakeOpenAI() as fake:` serves http://127.0.0.1:<port>/v1 until the block ends.

    `hang_first_actor_call`: the first actor request gets no answer while the block lasts (a hung provider).
    """

    def __init__(self, *, hang_first_actor_call: bool = False) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._released = threading.Event()
        self._hang = hang_first_actor_call
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                fake.headers.append({key.lower(): value for key, value in self.headers.items()})
                if fake._hang and _is_actor(body) and sum(map(_is_actor, fake.requests)) == 1:
                    fake._released.wait()
                    return
                payload = json.dumps(_completion(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "FakeOpenAI":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()


def _is_actor(body: dict[str, Any]) -> bool:
    return not body["messages"][0]["content"].startswith(("You plan work", "You are an independent reviewer"))


def _completion(body: dict[str, Any]) -> dict[str, Any]:
    system = body["messages"][0]["content"]
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if system.startswith("You plan work"):
        message["content"] = json.dumps(PLAN)
    elif system.startswith("You are an independent reviewer"):
        message["content"] = json.dumps(SCORES)
    elif any(item["role"] == "tool" for item in body["messages"]):
        message["content"] = "Ana publishes the notes."
    else:
        arguments = json.dumps({"path": "notes.md"})
        message["tool_calls"] = [{"id": "call_1", "type": "function", "function": {"name": "workspace__read_file", "arguments": arguments}}]
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if "tool_calls" in message else "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100},
    }
