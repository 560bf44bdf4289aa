"""Helpers for the bounded-context tests: an in-process noisy tool, model wrappers, hosts, log
queries.

The engine runs in-process against a real SQLite file with the real built-in tools plus `Emit`, a
read-only tool that returns bytes the test chose (so a test knows each result's sha-256 before the
run). Models are the scripted provider, wrapped by `Model` to record every request, to answer
summary requests differently, or to report token usage as a multiple of what it was sent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from bubu.context.policy import ContextPolicy
from bubu.engine.driver import RunConfig
from bubu.engine.session import Host, new_session, start_turn
from bubu.events import (
    Compaction,
    EffectClass,
    FunctionResponse,
    ModelRequestNote,
    Record,
    SystemNote,
)
from bubu.log.store import SessionInfo, Store
from bubu.messages import canonical
from bubu.providers.base import (
    DeltaSink,
    Message,
    ModelRequest,
    ModelResponse,
    Provider,
    TextPart,
    ToolResultPart,
    ToolResultsMessage,
    Usage,
    UserMessage,
)
from bubu.providers.scripted import ScriptedProvider
from bubu.tools import builtin_tools
from bubu.tools.base import Tool, ToolContext, ToolResult, WriteIntent

WINDOW = 12_000
"""A small window (tokens): a handful of 10 KB results fill it, so compaction comes quickly."""

_encoder = msgspec.json.Encoder(order="sorted")

T = TypeVar("T")


def noise(size: int, tag: str = "out") -> bytes:
    """Exactly `size` bytes of numbered ASCII lines (`{tag} line 00001 xxx…`),
    newline-terminated."""
    lines = (f"{tag} line {i:05d} " + "x" * 48 + "\n" for i in range(1, size // 40 + 2))
    data = "".join(lines).encode()[:size]
    return data[:-1] + b"\n" if data else data


def sha(data: bytes) -> str:
    """The sha-256 of `data` in hex (an offloaded result's handle)."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class Emit:
    """emit{key}: a read-only tool printing the bytes registered under `key`.

    With `capped`, it returns a short `output` and the whole bytes as `full`, as a tool that cuts
    its own output does.
    """

    payloads: dict[str, bytes]
    capped: bool = False
    name: str = "emit"
    description: str = "Print a registered payload."
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {"key": {"type": "string"}}}
    )
    effect: EffectClass = "read_only"

    def permission(self, args: dict[str, Any], ctx: ToolContext) -> str | None:
        """Never asks."""
        return None

    def prepare(self, args: dict[str, Any], ctx: ToolContext) -> WriteIntent | None:
        """Not a write."""
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext, intent: WriteIntent | None) -> ToolResult:
        """The payload under `args["key"]`."""
        data = self.payloads[str(args["key"])]
        if self.capped:
            return ToolResult(output=f"[{len(data)} bytes, cut]", full=data)
        return ToolResult(output=data.decode())


Summarizer = Callable[[ModelRequest], ModelResponse]


@dataclass
class Model:
    """A provider wrapper: records every request; optionally replaces summaries or scales usage.

    `summarize` answers summary requests instead of the wrapped provider. `usage_factor` makes each
    turn response report `factor × (request bytes / 4)` input tokens, like a provider whose
    tokenizer counts more than the engine's estimate (0 reports nothing, leaving calibration at 1).
    """

    inner: Provider
    summarize: Summarizer | None = None
    usage_factor: float = 0.0
    window: int | None = None
    requests: list[ModelRequest] = field(default_factory=list)

    @property
    def spec(self) -> str:
        """The wrapped provider's spec."""
        return self.inner.spec

    @property
    def context_window(self) -> int:
        """The window given here, or the wrapped provider's."""
        return self.window if self.window is not None else self.inner.context_window

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Record the request, then answer."""
        self.requests.append(request)
        if request.purpose == "summary" and self.summarize is not None:
            return self.summarize(request)
        response = self.inner.complete(request, on_delta)
        if request.purpose == "summary":
            return response
        reported = int(self.usage_factor * request_bytes(request) / 4)
        return ModelResponse(
            parts=response.parts,
            usage=Usage(input_tokens=reported, output_tokens=response.usage.output_tokens),
            stop_reason=response.stop_reason,
            model=response.model,
        )

    def turns(self) -> list[ModelRequest]:
        """The turn requests (not summaries), in order."""
        return [r for r in self.requests if r.purpose == "turn"]

    def summaries(self) -> list[ModelRequest]:
        """The summary requests, in order."""
        return [r for r in self.requests if r.purpose == "summary"]


def summary_text(text: str) -> Summarizer:
    """A summarizer that always answers `text`."""

    def answer(request: ModelRequest) -> ModelResponse:
        return ModelResponse(parts=(TextPart(text=text),), usage=Usage(output_tokens=10))

    return answer


def request_bytes(request: ModelRequest) -> int:
    """The canonical size of a request: system, tools and messages."""
    messages = [msgspec.json.decode(canonical(m)) for m in request.messages]
    return len(_encoder.encode([request.system, request.tools, messages]))


def encode(value: object) -> bytes:
    """Canonical JSON bytes of any request part."""
    return _encoder.encode(value)


def write_script(path: Path, lines: Iterable[dict[str, object]]) -> Path:
    """Write a scripted model file, one JSON object per line."""
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def emit_line(key: str, text: str | None = None) -> dict[str, object]:
    """A script line that calls emit{key}."""
    line: dict[str, object] = {"tool_calls": [{"name": "emit", "arguments": {"key": key}}]}
    if text is not None:
        line["text"] = text
    return line


def model(script: Path, **kw: Any) -> Model:
    """The scripted provider over `script`, wrapped."""
    return Model(ScriptedProvider(str(script)), **kw)


def config(window: int | None = WINDOW, **policy: Any) -> RunConfig:
    """A run configuration with a small window, quick retries and the given context policy."""
    return RunConfig(
        context_window=window,
        context=ContextPolicy(**policy),
        backoff_s=0.001,
        backoff_max_s=0.01,
        tool_timeout_s=60.0,
    )


CONTEXT_TOOLS = frozenset(
    {
        "edit_file",
        "grep",
        "inspect_result",
        "list_files",
        "query_result",
        "read_file",
        "read_result",
        "recall",
        "remember",
        "run_command",
        "search_result",
        "update_plan",
        "write_file",
    }
)
"""The built-in tools these tests offer: a fixed set, so that the window arithmetic of a test
(how many steps fit before a compaction) does not move when a new tool joins the built-ins."""


def context_tools() -> dict[str, Tool]:
    """The `CONTEXT_TOOLS` of the built-ins."""
    return {name: t for name, t in builtin_tools().items() if name in CONTEXT_TOOLS}


def host(store: Store, provider: Provider, payloads: dict[str, bytes], **kw: Any) -> Host:
    """A host with the `CONTEXT_TOOLS` of the built-ins and `emit` over `payloads`."""
    capped = bool(kw.pop("capped", False))
    tools: dict[str, Tool] = {**context_tools(), "emit": Emit(payloads, capped=capped)}
    return Host(
        store=store, provider=provider, tools=tools, config=kw.pop("config", config()), **kw
    )


def responses(records: Iterable[Record]) -> list[tuple[int, FunctionResponse]]:
    """Every function_response with its seq."""
    return [(r.seq, c) for r in records if isinstance(c := r.event.content, FunctionResponse)]


def notes(records: Iterable[Record], kind: type[T]) -> list[tuple[int, T]]:
    """Every system note of `kind` with its seq."""
    out: list[tuple[int, T]] = []
    for r in records:
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, kind):
            out.append((r.seq, c.note))
    return out


def compactions(records: Iterable[Record]) -> list[tuple[int, Compaction]]:
    """Every compaction note with its seq."""
    return notes(records, Compaction)


def model_requests(records: Iterable[Record]) -> list[tuple[int, ModelRequestNote]]:
    """Every model_request note with its seq."""
    return notes(records, ModelRequestNote)


def results(request: ModelRequest) -> list[ToolResultPart]:
    """Every tool result part of a request, in order."""
    return [r for m in request.messages if isinstance(m, ToolResultsMessage) for r in m.results]


def texts(messages: Sequence[Message]) -> list[str]:
    """The text of every user message."""
    return [m.text for m in messages if isinstance(m, UserMessage)]


def noisy_lines(steps: int) -> list[dict[str, object]]:
    """A script of `steps` steps, each emitting its own payload `k{i}`, then a closing text."""
    return [*(emit_line(f"k{i}", f"step {i}") for i in range(steps)), {"text": "done"}]


def noisy_payloads(steps: int, size: int = 10_000) -> dict[str, bytes]:
    """A distinct payload of `size` bytes for each step of `noisy_lines`."""
    return {f"k{i}": noise(size, f"k{i}") for i in range(steps)}


def noisy_turn(
    tmp_path: Path,
    store: Store,
    *,
    steps: int = 16,
    task: str = "make noise",
    model_kw: dict[str, Any] | None = None,
    host_kw: dict[str, Any] | None = None,
) -> tuple[SessionInfo, Model]:
    """Run one turn of `steps` noisy steps in a fresh session (script `s.jsonl`, workspace `ws`)."""
    script = write_script(tmp_path / "s.jsonl", noisy_lines(steps))
    provider = model(script, **(model_kw or {}))
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    info = new_session(store, task=task, workspace=ws, model=provider.spec)
    h = host(store, provider, noisy_payloads(steps), **(host_kw or {}))
    assert start_turn(h, info, task) == "completed"
    return info, provider


def digest_at(store: Store, session: str, seq: int) -> str:
    """The chain digest of the session's prefix 1..seq."""
    (row,) = store.read(session, after=seq - 1, upto=seq)
    return row.hash
