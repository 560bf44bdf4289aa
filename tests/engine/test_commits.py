"""What a step costs the log: two transactions (the model response with its calls' dispatches, then
the outcomes with the next request's note), the dispatch of a write still fully synced, and no read
of what the runner itself just wrote."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bubu.engine.session import new_session, start_turn
from bubu.events import Event, Record, kind_of
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Appended

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
            # Step 1, a read: its response and dispatch together, then its outcome and the next note.
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
