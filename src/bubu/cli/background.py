"""Start-up recovery for `bubu run`: crashed sessions of this host continue in the background.

The user's own command comes first: its task is committed before anything else looks at other
sessions (in a thread beside the user's turn), and nothing found there runs in its process. Each
session whose runner died on this host is continued by a detached `bubu recover SESSION` (its own
process group, so a Ctrl-C in the terminal does not reach it), writing to a log file under
``$BUBU_HOME/logs/``; the command says so in one line on stderr. A session that is not continued by
itself (imported, forked, its workspace gone, its server unrecorded) gets one line saying how to
continue it. Nothing here can fail the user's command.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Container
from pathlib import Path

import click

from bubu.engine.scope import scan
from bubu.log import make_home
from bubu.log.store import Store

FAILPOINT_ENV = "BUBU_FAILPOINT"


def logs_dir() -> Path:
    """``$BUBU_HOME/logs`` (BUBU_HOME defaults to ~/.bubu)."""
    home = Path(os.environ.get("BUBU_HOME") or Path.home() / ".bubu").expanduser()
    return home / "logs"


def spawn_recovery(db: str | None, session: str) -> tuple[int, Path]:
    """Start `bubu recover SESSION` detached, its output appended to a log file; (pid, log)."""
    logs = logs_dir()
    make_home(logs.parent)
    logs.mkdir(mode=0o700, exist_ok=True)
    path = logs / f"recover-{session}.log"
    env = dict(os.environ)
    # A failpoint is meant for the command it was given to, not for the sessions it finds.
    env.pop(FAILPOINT_ENV, None)
    if db:
        if "://" not in db:
            db = os.path.abspath(db)
        env["BUBU_DB"] = db  # in the environment, not the command line: a URL may hold a password
    with path.open("ab") as out:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        out.write(f"--- {stamp} bubu recover {session} (found by pid {os.getpid()})\n".encode())
        out.flush()
        child = subprocess.Popen(
            [sys.executable, "-m", "bubu", "recover", session],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    return child.pid, path


def say(text: str) -> None:
    """One line on stderr (never stdout, which may be `--jsonl` events)."""
    click.echo(f"bubu: {text}", err=True)


def continue_crashed(store: Store, db: str | None, *, skip: Container[str] = ()) -> None:
    """Continue every session whose runner died on this host in the background, and say what
    was found, one line each; never raises."""
    try:
        found = scan(store, skip=skip)
    except Exception as e:  # the database itself: the user's command goes on regardless
        say(f"could not look for crashed sessions: {e}")
        return
    for f in found:
        sid = f.session.id
        if f.verdict != "recover":
            say(f.advice())
            continue
        try:
            pid, log = spawn_recovery(db, sid)
        except Exception as e:  # said: one recovery must not stop the others
            say(f"could not start the recovery of session {sid}: {e}")
            continue
        say(
            f"recovering crashed session {sid} in the background (pid {pid}); "
            f"follow it in {log} or with `bubu status {sid}`"
        )


class Finder:
    """`continue_crashed` in a thread of its own, so that looking through many sessions does not
    hold up the user's first step; `join` before exiting lets it finish what it started."""

    def __init__(self, store: Store, db: str | None, *, skip: Container[str] = ()) -> None:
        self._thread = threading.Thread(
            target=continue_crashed,
            args=(store, db),
            kwargs={"skip": skip},
            name="bubu-find-crashed",
            daemon=True,
        )

    def start(self) -> None:
        """Start looking (call once the user's own task is durable)."""
        self._thread.start()

    def join(self, timeout_s: float = 60.0) -> None:
        """Wait for the look to end, if it started (bounded: the user's command is done)."""
        if self._thread.ident is not None:
            self._thread.join(timeout_s)


__all__ = ["Finder", "continue_crashed", "logs_dir", "spawn_recovery"]
