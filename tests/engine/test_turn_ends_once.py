"""A turn ends exactly once: a stop that races the turn's own end adds no second `turn_ended`,
and `verify` reports a log that holds two."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from bubu.engine.session import new_session, start_turn
from bubu.events import Record, SystemNote, TurnEnded, TurnStarted, make
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store

from .helpers import make_host, scripted, write_script

ITERATIONS = 40


class _StopAtTheEnd:
    """An observer that wakes a stopper thread the moment the turn's end is committed."""

    def __init__(self, hold: bool) -> None:
        self.ended, self.requested, self.hold = threading.Event(), threading.Event(), hold

    def on_delta(self, delta: object) -> None:
        """Deltas do not matter here."""

    def on_activity(self, text: str | None) -> None:
        """Activity does not matter here."""

    def on_records(self, records: Sequence[Record]) -> None:
        """Signal when a `turn_ended` was committed."""
        if any(_is_end(r) for r in records):
            self.ended.set()
            if self.hold:  # let the stop land right after the end commits, before the loop looks
                self.requested.wait(5)


def _is_end(r: Record) -> bool:
    c = r.event.content
    return isinstance(c, SystemNote) and isinstance(c.note, TurnEnded)


def test_a_stop_racing_the_turn_end_does_not_end_it_twice(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.jsonl", [{"text": "done"}] * ITERATIONS)
    ws = tmp_path / "ws"
    ws.mkdir()
    store = SQLiteStore(tmp_path / "bubu.db")
    try:
        for i in range(ITERATIONS):
            observer = _StopAtTheEnd(hold=i % 2 == 0)
            host = make_host(store, scripted(script))
            host.observer = observer
            info = new_session(store, task="t", workspace=ws, model=host.provider.spec)

            def stopper(h: object = host, o: _StopAtTheEnd = observer) -> None:
                # Half the time the stop lands just as the end commits, half just before it.
                if o.hold:
                    o.ended.wait(10)
                runner = getattr(h, "runner", None)
                while runner is None and not o.ended.is_set():
                    runner = getattr(h, "runner", None)
                if runner is not None:
                    runner.request_stop("stopped")
                o.requested.set()

            t = threading.Thread(target=stopper)
            t.start()
            reason = start_turn(host, info, "t")
            t.join(10)
            records = store.read(info.id)
            ends = [r for r in records if _is_end(r)]
            assert len(ends) == 1, f"iteration {i}: {len(ends)} turn ends"
            assert reason in ("completed", "stopped")
            assert store.verify(info.id).ok
    finally:
        store.close()


def _note(session: str, turn: str, note: object) -> object:
    return make(
        session=session,
        turn=turn,
        run="r1",
        role="system",
        author="system",
        ts=1,
        content=SystemNote(note=note),  # type: ignore[arg-type]
        visibility="hidden",
    )


def _append_end_twice(store: Store, session: str, turn: str) -> None:
    head = store.head(session).high_water
    started = TurnStarted(model="scripted:x")
    events = [
        _note(session, turn, started),
        _note(session, turn, TurnEnded(reason="completed")),
        _note(session, turn, TurnEnded(reason="stopped")),
    ]
    store.append(session, events, expect=head)  # type: ignore[arg-type]


def test_verify_reports_a_turn_that_ended_twice(store: Store, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    info = new_session(store, task="t", workspace=ws, model="scripted:x")
    _append_end_twice(store, info.id, "t1")
    report = store.verify(info.id)
    assert not report.ok
    assert report.problem is not None
    assert "ended twice" in report.problem
    assert report.first_bad_seq == store.head(info.id).high_water


def test_verify_accepts_a_turn_resumed_after_its_end(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    info = new_session(sqlite_store, task="t", workspace=ws, model="scripted:x")
    head = sqlite_store.head(info.id).high_water
    started = TurnStarted(model="scripted:x")
    events = [
        _note(info.id, "t1", started),
        _note(info.id, "t1", TurnEnded(reason="stopped")),
        _note(info.id, "t1", started),
        _note(info.id, "t1", TurnEnded(reason="completed")),
    ]
    sqlite_store.append(info.id, events, expect=head)  # type: ignore[arg-type]
    assert sqlite_store.verify(info.id).ok
