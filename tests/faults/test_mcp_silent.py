"""An MCP server that never answers `initialize` (and a child it started) is gone when Bubu
exits: killed by process group after the startup timeout, and after a run that used a working
server too; and when Bubu itself is SIGKILLed, which no exit handler sees, by the keeper the
server runs under. A real stub server script, real `bubu` processes."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from .helpers import bubu, error_line, start_bubu, write_script

SILENT = """
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "300"])
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {child.pid}\\n")
while True:  # reads nothing, answers nothing
    time.sleep(1)
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def _silent_server(tmp_path: Path) -> tuple[Path, Path]:
    """An MCP config naming the silent stub, and the file where the stub writes its pids."""
    stub = tmp_path / "silent.py"
    stub.write_text(SILENT)
    pids = tmp_path / "pids"
    mcp = tmp_path / "mcp.json"
    mcp.write_text(
        json.dumps({"servers": {"silent": {"command": [sys.executable, str(stub), str(pids)]}}})
    )
    return mcp, pids


@pytest.mark.heavy
def test_a_server_that_never_answers_is_killed_with_its_children(tmp_path: Path) -> None:
    mcp, pids = _silent_server(tmp_path)
    script = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    db = tmp_path / "bubu.db"
    done = bubu(
        db,
        "run",
        "task",
        "-w",
        str(tmp_path),
        "-m",
        f"scripted:{script}",
        "--mcp",
        str(mcp),
        env={"BUBU_MCP_STARTUP_TIMEOUT": "1"},
    )
    assert done.returncode == 2, done.stderr
    assert error_line(done.stderr) == (
        f"bubu: error: the MCP server 'silent' did not answer within 1 s; check it in {mcp}"
    )
    server, child = (int(p) for p in pids.read_text().split())
    leftover = [p for p in (server, child) if _alive(p)]
    for p in leftover:  # never leave them behind, even when the test fails
        os.kill(p, 9)
    assert leftover == [], "the server and its child outlived bubu"


@pytest.mark.heavy
def test_a_server_and_its_child_die_with_a_sigkilled_bubu(tmp_path: Path) -> None:
    mcp, pids = _silent_server(tmp_path)
    script = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    proc = start_bubu(
        tmp_path / "bubu.db",
        "run",
        "task",
        "-w",
        str(tmp_path),
        "-m",
        f"scripted:{script}",
        "--mcp",
        str(mcp),
        env={"BUBU_MCP_STARTUP_TIMEOUT": "120"},
    )
    server = child = 0
    try:
        deadline = time.monotonic() + 60
        while not (pids.exists() and pids.read_text().endswith("\n")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the server never started"
            time.sleep(0.05)
        server, child = (int(p) for p in pids.read_text().split())
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in (server, child)) and time.monotonic() < deadline:
            time.sleep(0.05)
        leftover = [p for p in (server, child) if _alive(p)]
    finally:
        proc.kill()
        for p in (server, child):
            if p and _alive(p):  # never leave them behind, even when the test fails
                os.kill(p, signal.SIGKILL)
    assert leftover == [], "the server and its child outlived a SIGKILLed bubu"


def test_a_bad_startup_timeout_is_refused(tmp_path: Path) -> None:
    mcp = tmp_path / "mcp.json"
    mcp.write_text(json.dumps({"servers": {"x": {"command": ["true"]}}}))
    script = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    done = bubu(
        tmp_path / "bubu.db",
        "run",
        "task",
        "-w",
        str(tmp_path),
        "-m",
        f"scripted:{script}",
        "--mcp",
        str(mcp),
        env={"BUBU_MCP_STARTUP_TIMEOUT": "0"},
    )
    assert done.returncode == 2
    assert error_line(done.stderr) == (
        "bubu: error: BUBU_MCP_STARTUP_TIMEOUT takes a number of seconds from 0 to 3600, got '0'"
    )
