"""Real sessions for the web tests: scripted runs in-process, and a session crashed by a real
SIGKILL (`bubu run` with a failpoint, as a subprocess) then recovered by `bubu recover`."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette

import hermetic
from bubu.engine.driver import RunConfig
from bubu.engine.permissions import Policy
from bubu.engine.session import Host, new_session, start_turn
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store
from bubu.providers import resolve
from bubu.tools import builtin_tools

TOKEN = "test-token-0123456789"

CRASH_TASK = "Fix the greeting in app.py and write the release notes"
APP_BEFORE = 'def greet(name):\n    return "Helo, " + name\n'
APP_AFTER = 'def greet(name):\n    return "Hello, " + name\n'
NOTES = "# Release notes\n\n- Fix the greeting typo.\n"
HAND_EDIT = "# Release notes\n\nwritten by hand while Bubu was down\n"
SLOW = "sleep 2"


def write_script(path: Path, lines: list[dict[str, Any]]) -> str:
    """Write a scripted model file and return its model spec."""
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return f"scripted:{path}"


def bubu(db: Path, *args: str) -> list[str]:
    """The command line of the real `bubu` CLI on `db`."""
    return [sys.executable, "-m", "bubu", "--db", str(db), *args]


def clean_env() -> dict[str, str]:
    """The environment for a child `bubu` without failpoints or model keys."""
    env = hermetic.environ("BUBU_", "OPENAI", "ANTHROPIC")
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass(frozen=True, slots=True, kw_only=True)
class Crashed:
    """A session killed mid-tool: the DB right after the crash and after `bubu recover`."""

    crashed_db: Path
    recovered_db: Path
    session: str
    workspace: Path


def crash_and_recover(root: Path) -> Crashed:
    """Run a task that edits app.py, writes NOTES.md and runs a slow command; SIGKILL it while
    the command runs; edit NOTES.md by hand; recover with `bubu recover`."""
    ws = root / "greeter"
    ws.mkdir(parents=True)
    (ws / "app.py").write_text(APP_BEFORE)
    spec = write_script(
        root / "crash.jsonl",
        [
            {
                "text": "Let me read the code.",
                "tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}],
            },
            {
                "thinking": "The greeting says Helo. Fix it, write notes, run the slow check.",
                "text": "Fixing the typo and writing the notes while the slow check runs.",
                "tool_calls": [
                    {
                        "name": "edit_file",
                        "arguments": {"path": "app.py", "old": "Helo", "new": "Hello"},
                    },
                    {"name": "write_file", "arguments": {"path": "NOTES.md", "content": NOTES}},
                    {"name": "run_command", "arguments": {"command": SLOW}},
                ],
            },
            {"text": "The check was cut off by the crash; the edit is in place. Done."},
        ],
    )
    db = root / "crash.db"
    env = clean_env()
    log = (root / "run.log").open("wb")
    with log:
        code = subprocess.call(
            bubu(db, "run", CRASH_TASK, "-w", str(ws), "-m", spec, "--allow", SLOW, "--jsonl"),
            env={**env, "BUBU_FAILPOINT": "mid_tool@2"},
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=60,
        )
    assert code == -signal.SIGKILL, (root / "run.log").read_text()
    crashed = root / "crashed.db"
    backup(db, crashed)
    (ws / "NOTES.md").write_text(HAND_EDIT)
    done = subprocess.run(
        bubu(db, "recover"), check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with SQLiteStore(db) as store:
        session = store.sessions()[0].id
    recovered = root / "recovered.db"
    backup(db, recovered)
    return Crashed(crashed_db=crashed, recovered_db=recovered, session=session, workspace=ws)


def backup(src: Path, dst: Path) -> None:
    """Copy a SQLite database consistently (WAL included)."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    a.close()
    b.close()


def host_for(store: Store, model: str, *, yes: bool = True) -> Host:
    """An in-process host with the built-in tools; `yes` approves commands without asking."""
    return Host(
        store=store,
        provider=resolve(model),
        tools=builtin_tools(),
        policy=Policy(yes=yes),
        config=RunConfig(),
    )


def run_scripted(
    store: Store, root: Path, name: str, task: str, lines: list[dict[str, Any]]
) -> str:
    """Run `task` to its end in a new workspace under `root` with a scripted model; the session
    id."""
    ws = root / name
    ws.mkdir(parents=True, exist_ok=True)
    spec = write_script(root / f"{name}.jsonl", lines)
    info = new_session(store, task=task, workspace=ws, model=spec)
    start_turn(host_for(store, spec), info, task)
    return info.id


def wait_for(check: Callable[[], bool], timeout_s: float = 20.0, what: str = "condition") -> None:
    """Poll `check` until it holds (a liveness wait, not a timed assertion)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Server:
    """A real uvicorn server on a free 127.0.0.1 port, in a thread."""

    def __init__(self, app: Starlette) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            ws="none",
            lifespan="on",
            timeout_graceful_shutdown=1,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> Server:
        self.thread.start()
        wait_for(lambda: self.server.started, what="the server to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.sock.close()
