"""Shutdown signals to a real `bubu run`: SIGHUP (the terminal closed) and SIGTERM suspend the
running turn after flushing, whatever it is doing, and the process exits promptly. A suspended
turn is the user's: a later unrelated `bubu run` leaves it alone, `bubu resume` continues it.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from .helpers import (
    bubu,
    bubu_json,
    call,
    finish,
    kinds,
    only_session,
    read,
    start_bubu,
    wait_for,
    write_script,
)

SLOW = "echo $$ > pid.txt; sleep 60; echo late > late.txt"


def _project(tmp_path: Path, lines: list[dict[str, object]]) -> tuple[Path, Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    return tmp_path / "bubu.db", ws, write_script(tmp_path / "s.jsonl", lines)


def _run(db: Path, ws: Path, script: Path, task: str = "slow") -> subprocess.Popen[str]:
    return start_bubu(
        db, "run", task, "-w", str(ws), "-m", f"scripted:{script}", "--allow", SLOW,
        "--sandbox", "off",
    )  # fmt: skip


def _mid_command(tmp_path: Path) -> tuple[Path, Path, subprocess.Popen[str]]:
    db, ws, script = _project(
        tmp_path, [{"tool_calls": [call("run_command", command=SLOW)]}, {"text": "done"}]
    )
    proc = _run(db, ws, script)
    pid = ws / "pid.txt"
    wait_for(lambda: pid.exists() and pid.read_text().strip().isdigit(), "the command to start")
    return db, ws, proc


def _mid_model_call(tmp_path: Path) -> tuple[Path, Path, subprocess.Popen[str]]:
    db, ws, script = _project(tmp_path, [{"text": "a slow answer", "delay_s": 120}])
    proc = _run(db, ws, script)
    wait_for(lambda: db.exists() and "turn_started" in _kinds(db), "the turn to start")
    return db, ws, proc


def _kinds(db: Path) -> list[str]:
    try:
        return kinds(read(db))
    except Exception:  # not created yet
        return []


def _session(db: Path) -> str:
    (s,) = bubu_json(db, "sessions", "--json")
    return str(s["id"] if isinstance(s, dict) else s)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["hup", "term"])
@pytest.mark.parametrize("where", [_mid_command, _mid_model_call], ids=["command", "model"])
def test_shutdown_signal_suspends_promptly(
    tmp_path: Path, sig: signal.Signals, where: object
) -> None:
    db, ws, proc = where(tmp_path)  # type: ignore[operator]
    sent = time.monotonic()
    proc.send_signal(sig)
    code, out, err = finish(proc, timeout=30)
    took = time.monotonic() - sent
    assert code == 4, out + err
    assert took < 15, f"the process took {took:.1f}s to end"
    assert not (ws / "late.txt").exists()
    session = only_session(db)
    assert bubu_json(db, "status", session, "--json")["status"] == "suspended"
    assert bubu_json(db, "verify", session, "--json")["ok"]


def test_hangup_is_not_a_crash_and_resume_continues(tmp_path: Path) -> None:
    db, ws, proc = _mid_command(tmp_path)
    proc.send_signal(signal.SIGHUP)
    assert finish(proc)[0] == 4
    session = only_session(db)
    before = len(read(db, session))

    other = write_script(tmp_path / "other.jsonl", [{"text": "unrelated"}])
    done = bubu(db, "run", "something else", "-w", str(ws), "-m", f"scripted:{other}")
    assert done.returncode == 0, done.stderr
    assert "recovering" not in done.stderr
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").iterdir())
    assert len(read(db, session)) == before, "the unrelated run touched the suspended session"
    assert bubu_json(db, "status", session, "--json")["status"] == "suspended"

    resumed = bubu(db, "resume", session)
    assert resumed.returncode == 0, resumed.stderr
    assert bubu_json(db, "status", session, "--json")["status"] == "completed"
