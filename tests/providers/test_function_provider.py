"""`FunctionProvider` drives the real engine on a real SQLite file: text, tool calls decided from
what the model was sent, streamed chunks, a failed attempt the engine retries, and summaries."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bubu.engine.driver import RunConfig
from bubu.engine.session import Host, new_session, start_turn
from bubu.errors import ProviderError
from bubu.events import FunctionCall, FunctionResponse, Record, Text, Thinking
from bubu.log.sqlite import SQLiteStore
from bubu.providers.base import (
    Delta,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultsMessage,
    Usage,
)
from bubu.providers.function import Chunk, FunctionProvider, Reply
from bubu.tools import builtin_tools

FAST = RunConfig(backoff_s=0.001, backoff_max_s=0.01)


@dataclass
class Seen:
    """An observer keeping the streamed deltas."""

    deltas: list[Delta] = field(default_factory=list)

    def on_delta(self, delta: Delta) -> None:
        """Keep it."""
        self.deltas.append(delta)

    def on_records(self, records: Sequence[Record]) -> None:
        """Ignore."""

    def on_activity(self, text: str | None) -> None:
        """Ignore."""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace holding `a.txt`."""
    path = tmp_path / "ws"
    path.mkdir()
    (path / "a.txt").write_text("alpha\n")
    return path.resolve()


def _run(store: SQLiteStore, ws: Path, provider: FunctionProvider, seen: Seen | None = None) -> str:
    info = new_session(store, task="go", workspace=ws, model=provider.spec)
    host = Host(
        store=store, provider=provider, tools=builtin_tools(), config=FAST, observer=seen or Seen()
    )
    assert start_turn(host, info, "go") == "completed"
    return info.id


def _contents(store: SQLiteStore, sid: str) -> list[object]:
    return [r.event.content for r in store.read(sid) if r.event.role in ("model", "tool")]


def test_a_function_reads_the_tool_result_it_was_sent_and_answers_from_it(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    def model(request: ModelRequest) -> Reply:
        if request.ordinal == 0:
            assert "read_file" in {t.name for t in request.tools}
            return ToolCallPart(call_id="c0", name="read_file", arguments={"path": "a.txt"})
        (results,) = [m for m in request.messages if isinstance(m, ToolResultsMessage)]
        return f"the file says {results.results[0].content.split()[-1]}"

    provider = FunctionProvider(model)
    seen = Seen()
    sid = _run(sqlite_store, ws, provider, seen)

    contents = _contents(sqlite_store, sid)
    assert isinstance(contents[0], FunctionCall)
    assert contents[0].arguments == {"path": "a.txt"}
    assert isinstance(contents[1], FunctionResponse)
    assert not contents[1].is_error
    assert contents[-1] == Text(text="the file says alpha")
    assert [r.ordinal for r in provider.turns()] == [0, 1]
    assert seen.deltas == [Delta(kind="text", text="the file says alpha")]


def test_streamed_chunks_reach_the_observer_in_order_and_join_into_parts(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    def model(request: ModelRequest) -> Iterator[Chunk]:
        if request.ordinal == 0:
            yield Delta(kind="thinking", text="look ")
            yield Delta(kind="thinking", text="first")
            yield "Reading "
            yield "it."
            yield ToolCallPart(call_id="c0", name="read_file", arguments={"path": "a.txt"})
        else:
            yield from ("do", "ne")

    seen = Seen()
    sid = _run(sqlite_store, ws, FunctionProvider(model), seen)

    assert [d.text for d in seen.deltas] == ["look ", "first", "Reading ", "it.", "do", "ne"]
    contents = _contents(sqlite_store, sid)
    assert contents[0] == Thinking(text="look first")
    assert contents[1] == Text(text="Reading it.")
    assert isinstance(contents[2], FunctionCall)
    assert contents[-1] == Text(text="done")


def test_a_retryable_failure_is_retried_and_the_function_sees_the_same_request(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    failures = [ProviderError("overloaded (529)", status=529, retryable=True)]

    def model(request: ModelRequest) -> Reply:
        if failures:
            raise failures.pop()
        return "fine now"

    provider = FunctionProvider(model)
    sid = _run(sqlite_store, ws, provider)

    assert _contents(sqlite_store, sid)[-1] == Text(text="fine now")
    first, second = provider.turns()
    assert first.ordinal == second.ordinal == 0
    assert first.messages == second.messages


def test_a_whole_response_is_kept_and_parts_make_one() -> None:
    usage = Usage(input_tokens=7, output_tokens=3)
    whole = ModelResponse(parts=(TextPart(text="x"),), usage=usage, stop_reason="max_tokens")
    replies: list[Reply] = [whole, [ThinkingPart(text="t"), TextPart(text="a")]]
    provider = FunctionProvider(lambda request: replies[request.ordinal], spec="function:unit")
    request = ModelRequest(system="s", tools=(), messages=())

    got = provider.complete(request, lambda d: None)
    assert (got.parts, got.usage, got.stop_reason, got.model) == (
        whole.parts,
        usage,
        "max_tokens",
        "function:unit",
    )
    got = provider.complete(
        ModelRequest(system="s", tools=(), messages=(), ordinal=1), lambda d: None
    )
    assert got.parts == (ThinkingPart(text="t"), TextPart(text="a"))
    assert got.stop_reason == "end_turn"


def test_a_summary_request_gets_the_deterministic_summary_unless_told_otherwise() -> None:
    request = ModelRequest(system="s", tools=(), messages=(), purpose="summary")

    def never(request: ModelRequest) -> Reply:
        raise AssertionError("a summary is not a turn")

    (part,) = FunctionProvider(never).complete(request, lambda d: None).parts
    assert isinstance(part, TextPart)
    assert part.text.startswith("## Goal")
    told = FunctionProvider(never, summarize=lambda r: "## Goal\nshort")
    assert told.complete(request, lambda d: None).parts == (TextPart(text="## Goal\nshort"),)
    assert told.turns() == []
    assert told.requests == [request]


def test_a_part_of_the_wrong_type_is_a_clear_error() -> None:
    provider = FunctionProvider(lambda request: [TextPart(text="a"), 42])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="returned int as a part"):
        provider.complete(ModelRequest(system="s", tools=(), messages=()), lambda d: None)
