"""Appends announced with LISTEN/NOTIFY, so that a follower waits for the log instead of polling.

Every append transaction notifies the schema's channel with each session it appended to (the
notification is delivered at commit, and only then). `Listener` holds one connection that
LISTENs on the channel, in a daemon thread, and counts the notifications per session; a follower
(the web UI's stream) waits on the count of its session. If the listening connection fails, the
count turns to -1 and followers fall back to polling.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter

import psycopg
from psycopg import sql

from bubu.errors import BubuError
from bubu.log.postgres._connect import Target

FAILED = -1


def channel(schema: str) -> str:
    """The channel a schema's appends are announced on (at most 63 bytes, as PostgreSQL keeps)."""
    return f"{schema}.appended"[:63]


class Listener:
    """Counts the appends announced for each session of one schema."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._cond = threading.Condition()
        self._counts: Counter[str] = Counter()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection | None = None
        self._failed = False
        self._closed = False

    def _start(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, name="bubu-listen", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            conn = self._conn = self.target.connect()
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(self.target.schema))))
            with self._cond:
                self._cond.notify_all()
            for n in conn.notifies():
                with self._cond:
                    self._counts[n.payload] += 1
                    self._cond.notify_all()
        except (psycopg.Error, BubuError):
            pass
        with self._cond:
            self._failed = True
            self._cond.notify_all()

    def wait(self, session: str, seen: int, timeout: float) -> int:
        """The session's count of announced appends once it differs from `seen`, or after
        `timeout` seconds; FAILED when nothing is listening (poll instead)."""
        with self._cond:
            self._start()
            self._cond.wait_for(
                lambda: self._failed or self._counts[session] != seen, timeout=timeout
            )
            return FAILED if self._failed else self._counts[session]

    def close(self) -> None:
        """Stop listening (the thread ends with its connection)."""
        self._closed = True
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()


__all__ = ["FAILED", "Listener", "channel"]
