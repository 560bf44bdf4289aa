"""What a step costs the log: two transactions (the model response with its calls' dispatches, then
the outcomes with the next request's note), the dispatch of a write still fully synced, and no read
of what the runner itself just wrote."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bubu.engine.session import new_session, start_turn
from bubu.events import (
    EffectClass,
    Event,
    NoticeDismissed,
    Record,
    SystemNote,
    kind_of,
    make,
)
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Appended
from bubu.tools.base import ToolContext, ToolResult, WriteIntent

from .helpers import call, make_host, scripted, write_script


class Counting(SQLiteStore):
    """A real SQLite store that notes every append (one transaction each) and every read."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.appends: list[tuple[list[str], bool]] = []
        self.reads = 0

    def append(self, session: str, events: Sequence[Event], **kw: Any) -> Appended:
        done = super().append(session, events, **kw)
        self.appends.append(([kind_of(e) for e in events], bool(kw.get("durable"))))
        return done

    def read(self, session: str, **kw: Any) -> list[Record]:
        self.reads += 1
        return super().read(session, **kw)


def _turn(tmp_path: Path, ws: Path, steps: Iterable[dict[str, object]]) -> Counting:
    lines = [{"tool_calls": [c]} for c in steps] + [{"text": "done"}]
    script = write_script(tmp_path / "s.jsonl", lines)
    provider = scripted(script)
    store = Counting(tmp_path / "count.db")
    info = new_session(store, task="t", workspace=ws, model=provider.spec)
    store.appends.clear()
    assert start_turn(make_host(store, provider), info, "t") == "completed"
    return store


def test_a_step_is_two_transactions_and_a_write_dispatch_is_synced(
    tmp_path: Path, ws: Path
) -> None:
    store = _turn(
        tmp_path,
        ws,
        [call("read_file", path="a.txt"), call("write_file", path="new.txt", content="new\n")],
    )
    try:
        assert store.appends == [
            (["text", "turn_started", "run_started"], True),
            (["model_request"], False),
            # Step 1, a read: its response and dispatch together, then its outcome and the next
            # note.
            (["function_call", "tool_dispatch"], False),
            (["function_response", "model_request"], False),
            # Step 2, a write: the same two, the dispatch fully synced before the tool starts.
            (["function_call", "tool_dispatch"], True),
            (["function_response", "model_request"], False),
            # The final answer and the turn's end.
            (["text", "turn_ended"], True),
        ]
        assert (ws / "new.txt").read_text() == "new\n"
        records = store.read(store.sessions()[0].id)
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
    finally:
        store.close()


def test_the_runner_does_not_read_back_what_it_wrote(tmp_path: Path, ws: Path) -> None:
    """The reads of a turn do not grow with its steps: each append hands back its records."""
    reads = []
    for n in (1, 6):
        d = tmp_path / str(n)
        d.mkdir()
        store = _turn(d, ws, [call("read_file", path="a.txt")] * n)
        try:
            assert len(store.appends) == 3 + 2 * n
            reads.append(store.reads)
        finally:
            store.close()
    assert reads[0] == reads[1]


class Dismisser:
    """A read-only tool that, while it runs, has another handle on the database dismiss a notice
    (what another process may append to a running session): the step's staged outcome then meets
    a head that moved."""

    def __init__(self, db: Path) -> None:
        self.name = "dismiss_elsewhere"
        self.description = "appends a dismissal from another handle"
        self.parameters: dict[str, Any] = {"type": "object"}
        self.effect: EffectClass = "read_only"
        self.db = db

    def permission(self, args: dict[str, Any], ctx: ToolContext) -> str | None:
        return None

    def prepare(self, args: dict[str, Any], ctx: ToolContext) -> WriteIntent | None:
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext, intent: WriteIntent | None) -> ToolResult:
        with SQLiteStore(self.db) as other:
            (info,) = other.sessions()
            note = make(
                session=info.id,
                turn=None,
                run=None,
                role="user",
                author="user",
                ts=1,
                content=SystemNote(note=NoticeDismissed(notice_seq=1)),
                visibility="hidden",
            )
            other.append(info.id, [note], expect=other.head(info.id).high_water)
        return ToolResult(output="dismissed elsewhere")


def test_a_foreign_append_meeting_staged_events_is_folded_in_and_nothing_is_lost(
    tmp_path: Path, ws: Path
) -> None:
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [call("dismiss_elsewhere")]},
            {"tool_calls": [call("read_file", path="a.txt")]},
            {"text": "done"},
        ],
    )
    provider = scripted(script)
    store = Counting(tmp_path / "count.db")
    try:
        info = new_session(store, task="t", workspace=ws, model=provider.spec)
        host = make_host(store, provider)
        host.tools = {**host.tools, "dismiss_elsewhere": Dismisser(tmp_path / "count.db")}
        assert start_turn(host, info, "t") == "completed"
        records = store.read(info.id)
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        assert store.verify(info.id).ok
        kinds = [kind_of(r.event) for r in records]
        assert kinds.count("notice_dismissed") == 1
        assert kinds.count("function_response") == 2
        # The dismissal landed between the dispatch and the outcome; the outcome and the next
        # note were then committed together after it.
        at = kinds.index("notice_dismissed")
        assert kinds[at - 1 : at + 3] == [
            "tool_dispatch",
            "notice_dismissed",
            "function_response",
            "model_request",
        ]
        # The second request carried the first result: the folds were rebuilt right.
        assert "dismissed elsewhere" in str(provider.requests[1].messages[-1])
    finally:
        store.close()
