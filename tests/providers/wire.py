"""Wire-level test doubles: hand-written fixtures served through the adapters' HTTP stack.

`Wire` is an `httpx2.MockTransport` (the transport the adapters and the SDKs are built on)
answering with queued responses and recording each request it was sent. `serve_cut_stream`
is a real HTTP server on a local socket that drops the connection in the middle of a stream.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2

from bubu.errors import ProviderError
from bubu.providers.base import Delta

FIXTURES = Path(__file__).parent / "fixtures"
OPENAI_KEY = "sk-test-bubu-0123456789abcdefSECRET"
ANTHROPIC_KEY = "sk-ant-test-bubu-0123456789abcdefSECRET"

Responder = Callable[[httpx2.Request], httpx2.Response]


def fixture(name: str) -> bytes:
    """The bytes of a wire fixture."""
    return (FIXTURES / name).read_bytes()


def sse(name: str, *, headers: dict[str, str] | None = None) -> Responder:
    """A 200 event stream with the fixture's bytes."""
    body = fixture(name)
    all_headers = {"content-type": "text/event-stream", **(headers or {})}
    return lambda request: httpx2.Response(200, headers=all_headers, content=body)


def status(code: int, name: str, *, headers: dict[str, str] | None = None) -> Responder:
    """An error status with a JSON fixture body."""
    body = fixture(name)
    all_headers = {"content-type": "application/json", **(headers or {})}
    return lambda request: httpx2.Response(code, headers=all_headers, content=body)


class _CutStream(httpx2.SyncByteStream):
    def __init__(self, head: bytes, error: Exception) -> None:
        self._head, self._error = head, error

    def __iter__(self) -> Iterator[bytes]:
        yield self._head
        raise self._error


def cut(name: str, *, after: int, error: Exception) -> Responder:
    """A 200 event stream that sends the first `after` events of a fixture, then raises."""
    events = fixture(name).split(b"\n\n")
    head = b"\n\n".join(events[:after]) + b"\n\n"
    return lambda request: httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, stream=_CutStream(head, error)
    )


def raises(error: Callable[[httpx2.Request], Exception]) -> Responder:
    """The transport fails before any response (connect error, timeout …)."""

    def respond(request: httpx2.Request) -> httpx2.Response:
        raise error(request)

    return respond


@dataclass
class Wire:
    """A mock transport answering with `responders` in order and recording every request."""

    responders: list[Responder]
    requests: list[httpx2.Request] = field(default_factory=list)

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return self.responders.pop(0)(request)

    def client(self) -> httpx2.Client:
        """An httpx2 client whose transport is this wire."""
        return httpx2.Client(transport=httpx2.MockTransport(self._handle))

    def body(self, n: int = -1) -> Any:
        """The JSON body of the n-th request (the last by default)."""
        return json.loads(self.requests[n].content)


@dataclass
class Deltas:
    """An `on_delta` sink that keeps what it was sent."""

    seen: list[Delta] = field(default_factory=list)

    def __call__(self, delta: Delta) -> None:
        self.seen.append(delta)

    def of(self, kind: str) -> list[str]:
        """The fragments of one kind, in order."""
        return [d.text for d in self.seen if d.kind == kind]


def assert_secret_free(error: ProviderError, secret: str) -> None:
    """The secret appears nowhere in the error, its message, body or chained exceptions."""
    texts = [str(error), repr(error), error.body or "", *map(str, error.args)]
    assert all(secret not in text for text in texts), texts
    assert error.__cause__ is None
    assert error.__context__ is None


@contextmanager
def serve_cut_stream(head: bytes) -> Iterator[str]:
    """A local HTTP server that answers any POST with a chunked event stream holding `head` and
    then closes the connection without the terminating chunk; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            chunk = f"{len(head):x}\r\n".encode() + head + b"\r\n"
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n" + chunk
            )
            self.wfile.flush()
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
