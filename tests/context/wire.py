"""A real OpenAI-compatible server on a local socket that records every request it is sent.

`serve(answer)` answers each POST to /v1/chat/completions with what `answer(body, n)` returns: a
streamed text, a streamed tool call, or a stall (the connection held open, nothing sent). Usage
is reported as the request's bytes / 4, as a real tokenizer would count about, so the engine's
calibration stays near 1. Summary requests are told apart by their system prompt.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bubu.context.compaction import SECTIONS, SUMMARY_SYSTEM

KEY = "sk-compact-test-0123456789abcdef"


@dataclass(frozen=True, slots=True)
class Text:
    """A streamed text answer."""

    text: str


@dataclass(frozen=True, slots=True)
class Call:
    """A streamed tool call."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Hold:
    """Send the headers, then nothing, until the server closes."""


Answer = Text | Call | Hold
Answerer = Callable[[dict[str, Any], int], Answer]
"""(request body, index of this request among those of its purpose) -> the answer."""


@dataclass
class Server:
    """The server's address and every request body it received, in order."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    closing: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def summaries(self) -> list[dict[str, Any]]:
        """The summary requests, in order."""
        return [r for r in self.requests if is_summary(r)]

    def turns(self) -> list[dict[str, Any]]:
        """The turn requests, in order."""
        return [r for r in self.requests if not is_summary(r)]


def is_summary(body: dict[str, Any]) -> bool:
    """True for a compaction request (its system prompt is the summarizer's)."""
    msgs = body.get("messages") or [{}]
    return bool(msgs[0].get("role") == "system" and msgs[0].get("content") == SUMMARY_SYSTEM)


def user_text(body: dict[str, Any]) -> str:
    """Every user and tool message of a request, joined."""
    return "\n".join(
        str(m.get("content") or "") for m in body["messages"] if m.get("role") in ("user", "tool")
    )


def good_summary(body: dict[str, Any]) -> str:
    """A summary that passes validation: the goal from the fact sheet, and words of its own."""
    text = user_text(body)
    goal = next((ln[6:] for ln in text.splitlines() if ln.startswith("Goal: ")), "the task")
    reads = text.count("CALL read_file")
    return (
        f"## Goal\n{goal}\n\n## Progress\nOpened {reads} inventory listings in this span; each "
        "sits offloaded in storage.\n\n## Next steps\nKeep opening listings until the audit "
        "failure shows up.\n\n## Critical context\nListings are deterministic; nothing on disk "
        "was modified so far.\n"
    )


def headings_only(body: dict[str, Any]) -> str:
    """What a small model once sent: the headings and invented timestamps."""
    return "\n".join(f"{s}\n2025-03-14 09:26:53" for s in SECTIONS) + "\n" * 400


def _sse(data: object) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return _sse(
        {
            "id": "chatcmpl-compact",
            "object": "chat.completion.chunk",
            "created": 1741569952,
            "model": "gpt-compact",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
    )


def _events(answer: Text | Call, prompt_tokens: int) -> list[bytes]:
    if isinstance(answer, Text):
        words = answer.text.split(" ")
        events = [_chunk({"role": "assistant", "content": ""})]
        events += [_chunk({"content": w if i == 0 else " " + w}) for i, w in enumerate(words)]
        events.append(_chunk({}, "stop"))
    else:
        call = {
            "index": 0,
            "id": "call_" + str(abs(hash(json.dumps(answer.arguments))) % 10**9),
            "type": "function",
            "function": {"name": answer.name, "arguments": json.dumps(answer.arguments)},
        }
        events = [
            _chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
            _chunk({}, "tool_calls"),
        ]
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 20,
        "total_tokens": prompt_tokens + 20,
    }
    events.append(
        _sse(
            {
                "id": "chatcmpl-compact",
                "object": "chat.completion.chunk",
                "created": 1741569952,
                "model": "gpt-compact",
                "choices": [],
                "usage": usage,
            }
        )
    )
    return [*events, b"data: [DONE]\n\n"]


@contextmanager
def serve(answer: Answerer) -> Iterator[Server]:
    """A local OpenAI-compatible server answering with `answer`; yields it with its URL."""
    state: list[Server] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            srv = state[0]
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            body = json.loads(raw or b"{}")
            with srv.lock:
                srv.requests.append(body)
                same = [r for r in srv.requests if is_summary(r) == is_summary(body)]
                reply = answer(body, len(same) - 1)
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            self.wfile.flush()
            self.close_connection = True
            if isinstance(reply, Hold):
                srv.closing.wait(120)
                return
            for piece in _events(reply, len(raw) // 4):
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.append(Server(url=f"http://127.0.0.1:{httpd.server_address[1]}/v1"))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield state[0]
    finally:
        state[0].closing.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join()
