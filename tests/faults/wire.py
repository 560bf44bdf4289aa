"""A real HTTP server on a local socket that answers model calls with hand-written wire replies.

Each `Reply` is what one request gets: a status, headers and body pieces written one by one over a
chunked response, so a reply can also stall (hold the connection open, sending nothing) or reset
the connection (RST) part way through a stream. The OpenAI and Anthropic adapters talk to it
through their real SDKs and HTTP stack, exactly as they talk to a vendor.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OPENAI_KEY = "sk-fault-openai-0123456789abcdefSECRET"
ANTHROPIC_KEY = "sk-ant-fault-0123456789abcdefSECRET"


@dataclass(frozen=True, slots=True)
class Stall:
    """Send nothing more for `seconds` (or until the server closes), then drop the connection."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Reset:
    """Reset the connection (TCP RST) at this point of the body."""


Piece = bytes | Stall | Reset


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """One HTTP response, written piece by piece."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = (("content-type", "text/event-stream"),)
    body: tuple[Piece, ...] = ()


@dataclass
class Server:
    """The replies still to give and the JSON bodies of the requests received so far."""

    url: str
    replies: list[Reply]
    requests: list[dict[str, Any]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    """The raw bytes of each request body, as sent."""
    headers: list[dict[str, str]] = field(default_factory=list)
    closing: threading.Event = field(default_factory=threading.Event)


@contextmanager
def serve(replies: Sequence[Reply]) -> Iterator[Server]:
    """A local HTTP server answering each POST with the next reply; yields it with its URL."""
    state: list[Server] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            srv = state[0]
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            srv.bodies.append(body)
            srv.requests.append(json.loads(body or b"{}"))
            srv.headers.append({k.lower(): v for k, v in self.headers.items()})
            reply = srv.replies.pop(0) if srv.replies else _NO_MORE
            self._write(reply, srv.closing)

        def _write(self, reply: Reply, closing: threading.Event) -> None:
            head = f"HTTP/1.1 {reply.status} X\r\n".encode()
            for name, value in reply.headers:
                head += f"{name}: {value}\r\n".encode()
            pieces = list(reply.body)
            whole = all(isinstance(p, bytes) for p in pieces)
            if whole:
                data = b"".join(p for p in pieces if isinstance(p, bytes))
                self.wfile.write(head + f"content-length: {len(data)}\r\n\r\n".encode() + data)
                return
            self.wfile.write(head + b"transfer-encoding: chunked\r\n\r\n")
            self.close_connection = True
            for piece in pieces:
                if isinstance(piece, Stall):
                    self.wfile.flush()
                    closing.wait(piece.seconds)
                    return
                if isinstance(piece, Reset):
                    self.wfile.flush()
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.connection.close()
                    return
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.append(Server(url=f"http://127.0.0.1:{httpd.server_address[1]}", replies=list(replies)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield state[0]
    finally:
        state[0].closing.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join()


_NO_MORE = Reply(
    status=599,
    headers=(("content-type", "application/json"),),
    body=(b'{"error": {"message": "the test server has no more replies"}}',),
)


def json_reply(status: int, body: object, *headers: tuple[str, str]) -> Reply:
    """An error (or any) status with a JSON body."""
    return Reply(
        status=status,
        headers=(("content-type", "application/json"), *headers),
        body=(json.dumps(body).encode(),),
    )


def _event(data: object, name: str | None = None) -> bytes:
    prefix = f"event: {name}\n" if name else ""
    return f"{prefix}data: {json.dumps(data)}\n\n".encode()


# ---- OpenAI Chat Completions -------------------------------------------------------------------


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    return _event(
        {
            "id": "chatcmpl-fault",
            "object": "chat.completion.chunk",
            "created": 1741569952,
            "model": "gpt-fault",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
    )


def _usage(prompt: int = 120, completion: int = 8) -> bytes:
    return _event(
        {
            "id": "chatcmpl-fault",
            "object": "chat.completion.chunk",
            "created": 1741569952,
            "model": "gpt-fault",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
    )


DONE = b"data: [DONE]\n\n"


def openai_text_events(text: str, finish: str = "stop") -> list[bytes]:
    """The events of a streamed text answer, one per word."""
    words = text.split(" ")
    events = [_chunk({"role": "assistant", "content": ""})]
    events += [_chunk({"content": w if i == 0 else " " + w}) for i, w in enumerate(words) if text]
    return [*events, _chunk({}, finish), _usage(), DONE]


def openai_text(text: str, finish: str = "stop") -> Reply:
    """A streamed text answer that ends with `finish` ("stop", or "length" when cut off)."""
    return Reply(body=tuple(openai_text_events(text, finish)))


def openai_tool_call(name: str, arguments: str, call_id: str = "call_fault_1") -> Reply:
    """A streamed tool call whose raw argument text is `arguments`, in two fragments."""
    half = len(arguments) // 2
    return Reply(
        body=(
            _chunk(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": arguments[:half]},
                        }
                    ],
                }
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}),
            _chunk({}, "tool_calls"),
            _usage(),
            DONE,
        )
    )


def openai_error(status: int, message: str, code: str, *headers: tuple[str, str]) -> Reply:
    """An OpenAI error body with `status`."""
    return json_reply(
        status,
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": code,
            }
        },
        *headers,
    )


# ---- Anthropic Messages ------------------------------------------------------------------------


def anthropic_events(blocks: Sequence[tuple[str, str]], stop_reason: str) -> list[bytes]:
    """A streamed message: `blocks` are ("text", text) or ("tool:NAME", partial json)."""
    events = [
        _event(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fault",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-fault",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 90, "output_tokens": 1},
                },
            },
            "message_start",
        )
    ]
    for i, (kind, payload) in enumerate(blocks):
        if kind == "text":
            start: dict[str, object] = {"type": "text", "text": ""}
            delta: dict[str, object] = {"type": "text_delta", "text": payload}
        else:
            start = {"type": "tool_use", "id": f"toolu_fault_{i}", "name": kind[5:], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": payload}
        events.append(
            _event(
                {"type": "content_block_start", "index": i, "content_block": start},
                "content_block_start",
            )
        )
        events.append(
            _event(
                {"type": "content_block_delta", "index": i, "delta": delta}, "content_block_delta"
            )
        )
        events.append(_event({"type": "content_block_stop", "index": i}, "content_block_stop"))
    events.append(
        _event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 16},
            },
            "message_delta",
        )
    )
    events.append(_event({"type": "message_stop"}, "message_stop"))
    return events


def anthropic_reply(blocks: Sequence[tuple[str, str]], stop_reason: str = "end_turn") -> Reply:
    """A streamed Anthropic message (see `anthropic_events`)."""
    return Reply(body=tuple(anthropic_events(blocks, stop_reason)))


def anthropic_error(status: int, kind: str, message: str, *headers: tuple[str, str]) -> Reply:
    """An Anthropic error body with `status`."""
    return json_reply(
        status, {"type": "error", "error": {"type": kind, "message": message}}, *headers
    )
