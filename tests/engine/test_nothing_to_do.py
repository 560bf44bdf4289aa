"""A command with nothing to act on says so in one line and exits 2, the same for each: `bubu
resume` of a completed turn and `bubu stop` of a session nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cli import bubu, only_session
from engine.helpers import write_script


@pytest.mark.heavy
def test_resume_of_a_completed_turn_and_stop_of_an_idle_one_both_exit_2(tmp_path: Path) -> None:
    db, ws = tmp_path / "bubu.db", tmp_path / "ws"
    ws.mkdir()
    script = write_script(tmp_path / "s.jsonl", [{"text": "done"}])
    assert bubu(db, "run", "task", "-w", str(ws), "-m", f"scripted:{script}").returncode == 0
    session = only_session(db)
    resumed = bubu(db, "resume", session)
    stopped = bubu(db, "stop", session)
    assert (resumed.returncode, stopped.returncode) == (2, 2)
    assert resumed.stderr.splitlines() == [
        f"bubu: error: session {session} has no stopped or suspended turn to resume (its last "
        "turn ended completed)"
    ]
    assert stopped.stderr.splitlines() == [
        f"bubu: error: nothing is running session {session}; its turn is completed"
    ]
