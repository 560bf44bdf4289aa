"""Ctrl-C in the instant a turn's start is committed, before its runner is registered for stops
(the process is held right there with `BUBU_PAUSE`): the turn ends `stopped` exactly once, is not
left open for the next command to continue, and `bubu resume` finishes it."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest

from bubu.events import SystemNote, TurnEnded

from .helpers import bubu, finish, only_session, read, start_bubu, write_script


def _committed_kinds(db: Path) -> list[str]:
    if not db.exists():
        return []
    try:
        raw = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return [str(r[0]) for r in raw.execute("SELECT kind FROM events ORDER BY pos")]
        finally:
            raw.close()
    except sqlite3.Error:
        return []


def _ends(db: Path, session: str) -> list[str]:
    return [
        r.event.content.note.reason
        for r in read(db, session)
        if isinstance(r.event.content, SystemNote) and isinstance(r.event.content.note, TurnEnded)
    ]


@pytest.mark.heavy
def test_ctrl_c_right_after_the_turn_start_is_committed_stops_it_once(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = write_script(tmp_path / "s.jsonl", [{"text": "first answer"}, {"text": "resumed"}])
    db = tmp_path / "bubu.db"
    proc = start_bubu(
        db,
        "run",
        "a task",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        env={"BUBU_PAUSE": "after_turn_start:3"},
    )
    deadline = time.monotonic() + 30
    while "turn_started" not in _committed_kinds(db):
        assert proc.poll() is None, "bubu ended before its turn started"
        assert time.monotonic() < deadline, "the turn never started"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert code == 3, out + err  # stopped
    assert "● turn stopped" in out
    session = only_session(db)
    assert _ends(db, session) == ["stopped"]
    again = bubu(db, "run", "another", "-w", str(ws), "-m", f"scripted:{script}", "--new")
    assert "recovering" not in again.stdout + again.stderr, "the stopped turn is not a crash"
    done = bubu(db, "resume", session)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _ends(db, session) == ["stopped", "completed"]
