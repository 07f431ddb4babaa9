"""A loopback stand-in for the LangSmith API: answers GET /info with {} and records every run the
client posts or patches (multipart batch, JSON batch, single run), merged by run id, and how often
each run was posted. Set `capture.fault` to make it misbehave from then on: "error" answers every
POST and PATCH with HTTP 500 and records nothing, "hang" reads them and never answers (until the
stand-in stops); `None` behaves again."""

from __future__ import annotations

import json
import threading
from collections import Counter
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator
from contextlib import contextmanager


class Capture:
    def __init__(self) -> None:
        self.requests: list[str] = []
        self.runs: dict[str, dict[str, Any]] = {}
        self.posts: Counter[str] = Counter()
        """How many times each run id was created (posted)."""
        self.lock = threading.Lock()
        self.fault: str | None = None
        """None, "error" (HTTP 500) or "hang" (no answer) for every POST and PATCH from now on."""
        self.refused = 0
        """POSTs and PATCHes answered with the fault instead of being recorded."""
        self.stopping = threading.Event()

    def merge(self, run: dict[str, Any]) -> None:
        with self.lock:
            current = self.runs.setdefault(str(run["id"]), {})
            for key, value in run.items():
                if key == "extra" and isinstance(value, dict):
                    extra = current.setdefault("extra", {})
                    extra["metadata"] = {**extra.get("metadata", {}), **value.get("metadata", {})}
                elif value is not None:
                    current[key] = value

    def by_name(self, name: str) -> list[dict[str, Any]]:
        return [run for run in self.runs.values() if run.get("name") == name]


def _multipart(content_type: str, body: bytes, posts: Counter[str]) -> dict[str, dict[str, Any]]:
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    runs: dict[str, dict[str, Any]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        operation, run_id, *field = name.split(".")
        if operation == "post" and not field:
            posts[run_id] += 1
        value = json.loads(part.get_payload(decode=True) or b"null")
        run = runs.setdefault(run_id, {"id": run_id})
        if field:
            run[field[0]] = value
        else:
            run.update(value)
    return runs


@contextmanager
def langsmith_stand_in() -> Iterator[tuple[str, Capture]]:
    capture = Capture()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, body: Any = None) -> None:
            data = json.dumps({} if body is None else body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            capture.requests.append(f"GET {self.path}")
            self._answer({})

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _faulted(self) -> bool:
            """Answer with the current fault, if any (True: nothing to record)."""
            if capture.fault is None:
                return False
            with capture.lock:
                capture.refused += 1
            if capture.fault == "hang":
                capture.stopping.wait()
                self.close_connection = True
                return True
            data = json.dumps({"detail": "internal server error"}).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return True

        def do_POST(self) -> None:
            capture.requests.append(f"POST {self.path}")
            body = self._body()
            if self._faulted():
                return
            if self.path.startswith("/runs/multipart"):
                for run in _multipart(self.headers["Content-Type"], body, capture.posts).values():
                    capture.merge(run)
            elif self.path.startswith("/runs/batch"):
                batch = json.loads(body)
                capture.posts.update(str(run["id"]) for run in batch.get("post", []))
                for run in batch.get("post", []) + batch.get("patch", []):
                    capture.merge(run)
            elif self.path.rstrip("/") == "/runs":
                run = json.loads(body)
                capture.posts[str(run["id"])] += 1
                capture.merge(run)
            self._answer()

        def do_PATCH(self) -> None:
            capture.requests.append(f"PATCH {self.path}")
            body = self._body()
            if self._faulted():
                return
            capture.merge({"id": self.path.rstrip("/").rsplit("/", 1)[-1], **json.loads(body)})
            self._answer()

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that gave up on a hung answer closed its socket: expected here

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", capture
    finally:
        capture.stopping.set()
        server.shutdown()
        server.server_close()
