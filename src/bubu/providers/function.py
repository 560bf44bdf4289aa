"""`FunctionProvider`: a model whose answers come from a Python function of the request.

For tests and experiments that need a model which reacts to what it is sent (follow a paging
hint, answer the Nth request differently, fail once), where a scripted JSONL file cannot say it::

    def model(request: ModelRequest) -> Reply:
        if request.ordinal == 0:
            return ToolCallPart(call_id="c0", name="read_file", arguments={"path": "a.txt"})
        return "done"

    provider = FunctionProvider(model)

The function gets the complete `ModelRequest` (system prompt, tool definitions, messages, the
request's `ordinal` and `purpose`) and returns one of:

- a `str`: a text answer, streamed as one delta;
- a part (`TextPart`, `ThinkingPart`, `ToolCallPart`) or a sequence of parts;
- a whole `ModelResponse`, used as it is;
- an iterator (a generator function): streamed chunk by chunk. A `str` chunk is a text delta,
  a `Delta` a text or thinking delta, and a part is added whole; consecutive deltas of one kind
  make one part. A provider error raised mid-stream fails the call after the deltas so far, as a
  connection that drops mid-answer does.

Raising `ProviderError` fails the attempt (the engine records it and retries when it is
`retryable`). Summary requests of compaction (`purpose == "summary"`) go to `summarize` when given,
else they are answered by the same deterministic summary the scripted model writes. Every request
is kept in `requests`, in order, so a test can check what the model was sent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from bubu.providers.base import (
    AssistantPart,
    Delta,
    DeltaSink,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    Usage,
)

Chunk: TypeAlias = str | Delta | AssistantPart
"""One item a streaming function yields."""

Reply: TypeAlias = str | AssistantPart | Sequence[AssistantPart] | ModelResponse | Iterator[Chunk]
"""What the function returns (see the module docstring)."""

ModelFunction: TypeAlias = Callable[[ModelRequest], Reply]
"""The function behind a `FunctionProvider`."""


@dataclass
class FunctionProvider:
    """A provider answering each request with `function(request)` (see the module docstring)."""

    function: ModelFunction
    spec: str = "function:test"
    context_window: int = 200_000
    summarize: ModelFunction | None = None
    requests: list[ModelRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Record the request, call the function and turn what it returns into a response."""
        with self._lock:
            self.requests.append(request)
        if request.purpose == "summary":
            if self.summarize is None:
                from bubu.providers.scripted import summary_response

                return summary_response(request)
            return self._response(self.summarize(request), on_delta)
        return self._response(self.function(request), on_delta)

    def turns(self) -> list[ModelRequest]:
        """The turn requests it was sent (not summaries), in order."""
        with self._lock:
            return [r for r in self.requests if r.purpose == "turn"]

    def _response(self, reply: Reply, on_delta: DeltaSink) -> ModelResponse:
        if isinstance(reply, ModelResponse):
            response = reply
        else:
            parts = _stream(reply, on_delta) if isinstance(reply, Iterator) else _parts(reply)
            if isinstance(reply, str):
                on_delta(Delta(kind="text", text=reply))
            response = _built(parts)
        if response.model:
            return response
        return ModelResponse(
            parts=response.parts,
            usage=response.usage,
            stop_reason=response.stop_reason,
            model=self.spec,
        )


def _parts(reply: str | AssistantPart | Sequence[AssistantPart]) -> tuple[AssistantPart, ...]:
    if isinstance(reply, str):
        return (TextPart(text=reply),)
    if isinstance(reply, TextPart | ThinkingPart | ToolCallPart):
        return (reply,)
    parts = tuple(reply)
    for p in parts:
        if not isinstance(p, TextPart | ThinkingPart | ToolCallPart):
            raise TypeError(f"a FunctionProvider function returned {type(p).__name__} as a part")
    return parts


def _stream(chunks: Iterator[Chunk], on_delta: DeltaSink) -> tuple[AssistantPart, ...]:
    """Send each delta on as it comes and join consecutive deltas of one kind into a part."""
    parts: list[AssistantPart] = []
    for chunk in chunks:
        delta = Delta(kind="text", text=chunk) if isinstance(chunk, str) else chunk
        if not isinstance(delta, Delta):
            parts.extend(_parts(delta))
            continue
        on_delta(delta)
        last = parts[-1] if parts else None
        if delta.kind == "text":
            if isinstance(last, TextPart):
                parts[-1] = TextPart(text=last.text + delta.text)
            else:
                parts.append(TextPart(text=delta.text))
        elif isinstance(last, ThinkingPart):
            parts[-1] = ThinkingPart(text=last.text + delta.text)
        else:
            parts.append(ThinkingPart(text=delta.text))
    return tuple(parts)


def _built(parts: tuple[AssistantPart, ...]) -> ModelResponse:
    calls = sum(isinstance(p, ToolCallPart) for p in parts)
    text = sum(len(p.text) for p in parts if isinstance(p, TextPart | ThinkingPart))
    return ModelResponse(
        parts=parts,
        usage=Usage(input_tokens=0, output_tokens=max(1, text // 4 + 10 * calls)),
        stop_reason="tool_use" if calls else "end_turn",
    )


__all__ = ["Chunk", "FunctionProvider", "ModelFunction", "Reply"]
