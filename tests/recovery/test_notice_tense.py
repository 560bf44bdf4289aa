"""`bubu status` speaks of the recovery notice in the right tense: once the recovered turn has
ended, it says the task was recovered, not that it is being recovered."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cli import bubu, only_session
from engine.helpers import call, write_script


@pytest.mark.heavy
def test_status_after_the_recovered_turn_ended_says_recovered(tmp_path: Path) -> None:
    db, ws = tmp_path / "bubu.db", tmp_path / "ws"
    ws.mkdir()
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [call("read_file", path="a.txt")]},
            {"text": "All done."},
        ],
    )
    (ws / "a.txt").write_text("hello\n")
    crashed = bubu(
        db, "run", "read a.txt", "-w", str(ws), "-m", f"scripted:{script}", failpoint="mid_tool"
    )
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr
    session = only_session(db)
    recovered = bubu(db, "recover", session)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    status = bubu(db, "status", session)
    assert status.returncode == 0, status.stderr
    assert "recovery notice:" in status.stdout
    assert "unfinished task detected, recovered" in status.stdout
    assert "auto-recovering" not in status.stdout
