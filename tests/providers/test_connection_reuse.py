"""Each adapter keeps its connection to the server from one model call to the next, as the SDKs
do: a streamed answer is read to its end, so the HTTP client can hand the connection on instead
of opening (and, against a hosted API, handshaking) a new one per call.

A real keep-alive HTTP server on a local socket answers with the byte-exact wire fixtures and
counts the connections it accepts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bubu.providers.anthropic import AnthropicProvider
from bubu.providers.base import ModelRequest, UserMessage
from bubu.providers.openai import OpenAIProvider

from .wire import Deltas, fixture

REQUEST = ModelRequest(system="sys", tools=(), messages=(UserMessage(text="hi"),), max_tokens=64)
STREAMS = {"/v1/chat/completions": "openai_text.sse", "/v1/messages": "anthropic_text.sse"}


class _Counting(ThreadingHTTPServer):
    daemon_threads = True
    connections = 0

    def process_request(self, request: object, client_address: object) -> None:
        self.connections += 1
        super().process_request(request, client_address)  # type: ignore[arg-type]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless a side closes

    def do_POST(self) -> None:  # the name http.server calls
        self.rfile.read(int(self.headers.get("content-length") or 0))
        name = STREAMS.get(self.path.split("?")[0])
        body = fixture(name) if name else b'{"error": "not found"}'
        self.send_response(200 if name else 404)
        self.send_header("content-type", "text/event-stream" if name else "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _server() -> Iterator[_Counting]:
    server = _Counting(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_three_streamed_calls_share_one_connection(vendor: str) -> None:
    with _server() as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        if vendor == "openai":
            provider: OpenAIProvider | AnthropicProvider = OpenAIProvider(
                "gpt-4.1-mini", base_url=f"{url}/v1", context_window=8192, api_key="sk-test"
            )
        else:
            provider = AnthropicProvider(
                "claude-haiku-4-5", base_url=url, context_window=8192, api_key="sk-ant-test"
            )
        try:
            parts = [provider.complete(REQUEST, Deltas()).parts for _ in range(3)]
        finally:
            provider.close()
        assert parts[0], "the answer was read"
        assert parts[0] == parts[1] == parts[2]
        assert server.connections == 1
