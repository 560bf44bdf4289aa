"""Running `bubu` as a real subprocess, the way a person or a script does."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import hermetic
from bubu.log.sqlite import SQLiteStore


def bubu_cmd(db: Path, *args: str) -> list[str]:
    """The command line of `bubu --db DB ARGS…`."""
    return [sys.executable, "-m", "bubu", "--db", str(db), *args]


def bubu_env(home: Path, failpoint: str | None = None) -> dict[str, str]:
    """A clean environment: no inherited database, model or failpoint."""
    env = hermetic.environ("BUBU_")
    env["BUBU_HOME"] = str(home)
    if failpoint is not None:
        env["BUBU_FAILPOINT"] = failpoint
    return env


def bubu(
    db: Path, *args: str, failpoint: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `bubu` to its end and capture its output."""
    return subprocess.run(
        bubu_cmd(db, *args),
        env=bubu_env(db.parent, failpoint),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def bubu_json(db: Path, *args: str) -> Any:
    """Run an inspecting command with JSON output and parse it; it must succeed."""
    done = bubu(db, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def only_session(db: Path) -> str:
    """The id of the one session in the database."""
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        return info.id


def on_a_terminal(db: Path, *args: str) -> bytes:
    """What `bubu ARGS` writes to a terminal (a pseudo-terminal), byte for byte."""
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            bubu_cmd(db, *args),
            env=bubu_env(db.parent),
            stdout=follower,
            stderr=follower,
            stdin=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
        os.close(follower)
        follower = -1
        out = b""
        while True:
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # EIO: the other side is closed and drained
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    assert done.returncode == 0, out
    assert b"Traceback" not in out
    return out
