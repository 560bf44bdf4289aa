"""A real HTTP model server on a local socket that has outages: for a while it refuses every call
(503 with `Retry-After`, or any status), then answers in the OpenAI Chat Completions or Anthropic
Messages wire format, whichever the request's path asks for.

The outage is timed by the server's own clock, so a test says "down for 3 seconds" and the engine
has to ride it out in real time, through the real SDKs and HTTP stack.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from faults.wire import (
    anthropic_error,
    anthropic_events,
    json_reply,
    openai_error,
    openai_text_events,
)

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"


@dataclass
class Hit:
    """One request the server received, and the status it answered with."""

    at: float
    path: str
    status: int
    model: str


@dataclass
class OutageServer:
    """What the server does now; change it from the test while the server runs."""

    url: str
    down_until: float = 0.0
    pending: float | None = None
    status: int = 503
    retry_after: str | None = "1"
    message: str = "The service is temporarily unavailable."
    answer: str = "Done."
    down_models: frozenset[str] = frozenset()
    """Models refused for good (a primary that keeps failing), whatever the outage clock says."""
    hits: list[Hit] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def outage(self, seconds: float, *, status: int = 503, retry_after: str | None = "1") -> None:
        """Refuse every call with `status` (and `Retry-After`) for `seconds`, counted from the
        next call (so a slow process start does not eat into the outage)."""
        with self.lock:
            self.pending, self.down_until = seconds, 0.0
            self.status, self.retry_after = status, retry_after

    def recover(self) -> None:
        """End the outage now."""
        with self.lock:
            self.pending, self.down_until = None, 0.0

    def refused(self) -> int:
        """How many calls were refused so far."""
        with self.lock:
            return sum(1 for h in self.hits if h.status != 200)

    def answered(self) -> int:
        """How many calls were answered so far."""
        with self.lock:
            return sum(1 for h in self.hits if h.status == 200)

    def openai(self) -> str:
        """The base URL an OpenAI adapter is given."""
        return f"{self.url}/v1"


def _refusal(path: str, status: int, message: str, headers: tuple[tuple[str, str], ...]) -> bytes:
    if path == ANTHROPIC_PATH:
        kind = {401: "authentication_error", 529: "overloaded_error"}.get(status, "api_error")
        reply = anthropic_error(status, kind, message, *headers)
    elif path == OPENAI_PATH:
        code = {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(status, "server_error")
        reply = openai_error(status, message, code, *headers)
    else:
        reply = json_reply(404, {"error": {"message": f"no such path {path}"}})
    return _bytes(
        reply.status, reply.headers, b"".join(p for p in reply.body if isinstance(p, bytes))
    )


def _bytes(status: int, headers: tuple[tuple[str, str], ...], body: bytes) -> bytes:
    head = f"HTTP/1.1 {status} X\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers)
    return (head + f"content-length: {len(body)}\r\n\r\n").encode() + body


@contextmanager
def serve_outages() -> Iterator[OutageServer]:
    """A local model server that is up until a test calls `outage`; yields it with its URL."""
    state: list[OutageServer] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            srv = state[0]
            body = json.loads(
                self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}"
            )
            model = str(body.get("model", ""))
            with srv.lock:
                if srv.pending is not None:
                    srv.down_until, srv.pending = time.monotonic() + srv.pending, None
                down = time.monotonic() < srv.down_until or model in srv.down_models
                status = srv.status if down else 200
                retry_after = srv.retry_after
                srv.hits.append(
                    Hit(at=time.monotonic(), path=self.path, status=status, model=model)
                )
            if down:
                headers = (("retry-after", retry_after),) if retry_after is not None else ()
                self.wfile.write(_refusal(self.path, status, srv.message, headers))
                return
            if self.path == ANTHROPIC_PATH:
                events = anthropic_events([("text", srv.answer)], "end_turn")
            else:
                events = openai_text_events(srv.answer)
            data = b"".join(events)
            self.wfile.write(_bytes(200, (("content-type", "text/event-stream"),), data))

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.append(OutageServer(url=f"http://127.0.0.1:{httpd.server_address[1]}"))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield state[0]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
