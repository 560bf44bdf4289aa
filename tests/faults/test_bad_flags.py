"""Flag values that cannot work are refused in one line (exit 2) before anything is written, and
`sessions --status` speaks the vocabulary of `bubu status`."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from .helpers import bubu, bubu_json, call, error_line, finish, start_bubu, wait_for, write_script

SLOW = "echo $$ > pid.txt; sleep 60"


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--max-steps", "0", "above zero"),
        ("--max-steps", "-1", "above zero"),
        ("--tool-timeout", "0", "seconds above 0"),
        ("--tool-timeout", "-3", "seconds above 0"),
        ("--tool-timeout", "nan", "got nan"),
        ("--tool-timeout", "inf", "at most a year"),
        ("--context-window", "0", "at least 4,096"),
        ("--context-window", "-5", "at least 4,096"),
        ("--context-window", "10", "got 10"),
        ("--thinking", "-1", "at least 1024"),
    ],
)
def test_run_refuses_before_writing(tmp_path: Path, flag: str, value: str, says: str) -> None:
    script = write_script(tmp_path / "s.jsonl", [{"text": "ok"}])
    db = tmp_path / "bubu.db"
    done = bubu(db, "run", "task", "-m", f"scripted:{script}", f"{flag}={value}")
    assert done.returncode == 2, done.stdout + done.stderr
    line = error_line(done.stderr)
    assert flag in line, line
    assert says in line, line
    assert not db.exists(), "a refused run wrote the log"


def test_sessions_status_is_one_of_the_states(tmp_path: Path) -> None:
    db = tmp_path / "bubu.db"
    done = bubu(db, "sessions", "--status", "bogus")
    assert done.returncode == 2
    line = error_line(done.stderr)
    assert "running, open turn" in line
    assert "'bogus'" in line
    assert not db.exists()


@pytest.mark.heavy
def test_sessions_status_running_matches_bubu_status(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = write_script(
        tmp_path / "s.jsonl", [{"tool_calls": [call("run_command", command=SLOW)]}]
    )
    db = tmp_path / "bubu.db"
    proc = start_bubu(
        db,
        "run",
        "slow",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--allow",
        SLOW,
        "--sandbox",
        "off",
    )
    try:
        wait_for((ws / "pid.txt").exists, "the command to start")
        (row,) = bubu_json(db, "sessions", "--status", "running", "--json")
        assert bubu_json(db, "status", str(row["id"]), "--json")["status"] == "running"
        assert bubu_json(db, "sessions", "--status", "open turn", "--json") == []
    finally:
        proc.send_signal(signal.SIGTERM)
        finish(proc)
    (row,) = bubu_json(db, "sessions", "--status", "suspended", "--json")
    assert row["status"] == "suspended"
