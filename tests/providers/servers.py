"""A real HTTP server on a local socket speaking what a local model server sends, byte for byte.

`serve(routes)` answers each (method, path) from its queue of `Answer`s (the last one repeats),
anything else with the server's own 404 body, and records every request. The fixtures are the
documented (and observed) bodies of llama.cpp's `llama-server`, llama-cpp-python's server,
Ollama, vLLM and LM Studio.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .wire import fixture


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: a status, a content type and the exact body bytes."""

    status: int
    body: bytes
    content_type: str = "application/json"


def json_file(name: str, status: int = 200) -> Answer:
    """A JSON fixture as the body."""
    return Answer(status, fixture(name))


def stream_file(name: str) -> Answer:
    """An event-stream fixture as a 200."""
    return Answer(200, fixture(name), "text/event-stream")


EMPTY_STREAM = Answer(200, b"", "text/event-stream")
"""llama-cpp-python's answer to a streamed request that overflows its window: a 200, then
nothing (no chunk, no [DONE])."""


@dataclass
class LocalServer:
    """What the server was asked, and its base URL."""

    url: str
    requests: list[tuple[str, str, bytes]] = field(default_factory=list)

    def paths(self) -> list[str]:
        """The method and path of each request, in order."""
        return [f"{m} {p}" for m, p, _ in self.requests]

    def bodies(self, path: str) -> list[Any]:
        """The JSON bodies of the requests to `path`."""
        return [json.loads(b) for _, p, b in self.requests if p == path]


@contextmanager
def serve(
    routes: Mapping[tuple[str, str], Answer | Sequence[Answer]],
    *,
    not_found: Answer = Answer(404, b'{"detail":"Not Found"}'),
) -> Iterator[LocalServer]:
    """Serve `routes` on 127.0.0.1 until the block ends; yields the server (`url` has no /v1)."""
    queues = {k: [v] if isinstance(v, Answer) else list(v) for k, v in routes.items()}
    lock = threading.Lock()
    state = LocalServer(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
            path = self.path.split("?")[0]
            with lock:
                state.requests.append((method, path, body))
                queue = queues.get((method, path))
                answer = (queue.pop(0) if len(queue) > 1 else queue[0]) if queue else not_found
            self.send_response(answer.status)
            self.send_header("content-type", answer.content_type)
            self.send_header("content-length", str(len(answer.body)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(answer.body)
            self.wfile.flush()
            self.close_connection = True

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
