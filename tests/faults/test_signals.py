"""Shutdown signals to a real `bubu run`: SIGHUP (the terminal closed) and SIGTERM suspend the
running turn after flushing, whatever it is doing, and the process exits promptly. A suspended
turn is the user's: a later unrelated `bubu run` leaves it alone, `bubu resume` continues it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import subprocess
import termios
import time
from pathlib import Path

import pytest

from bubu.log.sqlite import SQLiteStore
from engine.helpers import process_alive

from .helpers import (
    bubu,
    bubu_cmd,
    bubu_env,
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
        db,
        "run",
        task,
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--allow",
        SLOW,
        "--sandbox",
        "off",
    )


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


def _gone(pid: int) -> None:
    wait_for(lambda: not process_alive(pid), f"process {pid} to die")


def _kinds(db: Path) -> list[str]:
    try:
        return kinds(read(db))
    except Exception:  # not created yet
        return []


def _session(db: Path) -> str:
    (s,) = bubu_json(db, "sessions", "--json")
    return str(s["id"] if isinstance(s, dict) else s)


@pytest.mark.heavy
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


@pytest.mark.heavy
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


@pytest.mark.heavy
def test_sigterm_while_waiting_for_the_provider(tmp_path: Path) -> None:
    db, ws, script = _project(
        tmp_path,
        [{"text": "ok", "error": {"status": 503, "message": "overloaded", "retry_after": 300}}],
    )
    proc = _run(db, ws, script)
    wait_for(
        lambda: (
            bubu_json(db, "status", only_session(db), "--json")["waiting"] is not None
            if "turn_started" in _kinds(db)
            else False
        ),
        "the run to wait for its provider",
    )
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc, timeout=30)
    assert code == 4, out + err
    assert time.monotonic() - sent < 15
    assert bubu_json(db, "status", only_session(db), "--json")["status"] == "suspended"


@pytest.mark.heavy
def test_under_nohup_a_hang_up_is_ignored_and_sigterm_still_suspends(tmp_path: Path) -> None:
    db, ws, script = _project(tmp_path, [{"text": "ok", "delay_s": 120}])
    proc = start_bubu(
        db,
        "run",
        "slow",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--sandbox",
        "off",
        hup_ignored=True,
    )
    wait_for(lambda: db.exists() and "model_request" in _kinds(db), "the model call")
    proc.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert proc.poll() is None, "a hang-up ended a run started under nohup"
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc, timeout=30)
    assert code == 4, out + err
    assert bubu_json(db, "status", only_session(db), "--json")["status"] == "suspended"


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["hup", "term"])
def test_signal_at_start_up_ends_the_process(tmp_path: Path, sig: signal.Signals) -> None:
    db, ws, script = _project(tmp_path, [{"text": "ok", "delay_s": 120}])
    proc = _run(db, ws, script)
    proc.send_signal(sig)  # at once: still importing, opening the log or starting the turn
    code, out, err = finish(proc, timeout=30)
    assert code in (4, -sig, 128 + sig), out + err
    if db.exists() and "turn_started" in _kinds(db):
        assert bubu_json(db, "status", only_session(db), "--json")["status"] == "suspended"


@pytest.mark.heavy
def test_sigterm_during_recover_stops_before_the_next_session(tmp_path: Path) -> None:
    db, ws, script = _project(
        tmp_path,
        [{"tool_calls": [call("run_command", command=SLOW)]}, {"text": "after", "delay_s": 120}],
    )
    pid = ws / "pid.txt"
    for n in range(2):
        proc = _run(db, ws, script, task=f"task {n}")
        wait_for(lambda: pid.exists() and pid.read_text().strip().isdigit(), "the command")
        proc.kill()  # a crash: SIGKILL leaves the turn open
        _, err = proc.communicate(timeout=30)
        with contextlib.suppress(ProcessLookupError):  # it may have died with its runner
            os.kill(int(pid.read_text()), signal.SIGKILL)
        pid.unlink()
        # The second run found the first crash and continues it in the background: crash that too.
        for found in re.findall(r"in the background \(pid (\d+)\)", err):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(found), signal.SIGKILL)
            _gone(int(found))
    with SQLiteStore(db) as store:
        ids = [s.id for s in store.sessions()]
        sizes = {s: len(store.read(s)) for s in ids}
    proc = start_bubu(db, "recover", "--allow", SLOW, "--sandbox", "off")
    wait_for(lambda: any(len(read(db, s)) > sizes[s] for s in ids), "a recovery to write")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc, timeout=30)
    assert time.monotonic() - sent < 15
    assert code == 4, out + err
    states = sorted(bubu_json(db, "status", s, "--json")["status"] for s in ids)
    assert states == ["open turn", "suspended"], states


def _take_terminal() -> None:
    """In the child: make the pseudo-terminal on stdout its controlling terminal, so closing
    the other side hangs it up (SIGHUP from the kernel, as when a terminal window closes)."""
    os.setsid()
    fcntl.ioctl(1, termios.TIOCSCTTY, 0)


@pytest.mark.heavy
def test_closing_the_terminal_suspends(tmp_path: Path) -> None:
    db, ws, script = _project(
        tmp_path, [{"tool_calls": [call("run_command", command=SLOW)]}, {"text": "done"}]
    )
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        bubu_cmd(
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
        ),
        env=bubu_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        preexec_fn=_take_terminal,  # noqa: PLW1509  # only setsid and an ioctl before exec
    )
    os.close(follower)
    pid = ws / "pid.txt"
    try:
        while not (pid.exists() and pid.read_text().strip().isdigit()):
            select.select([leader], [], [], 0.05)
            with contextlib.suppress(OSError):
                os.read(leader, 1 << 16)  # keep the terminal drained, as a terminal window does
    finally:
        os.close(leader)  # the window closes: the kernel hangs the terminal up
    assert proc.wait(timeout=30) == 4
    session = only_session(db)
    assert bubu_json(db, "status", session, "--json")["status"] == "suspended"
    assert bubu_json(db, "verify", session, "--json")["ok"]
