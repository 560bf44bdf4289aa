"""The real `bubu` CLI with two test hooks, for fault rows that need a real process.

Run as ``python tests/faults/child.py [bubu arguments…]``. The hooks come from the environment:

- ``FAULT_LEASE_TTL=SECONDS`` gives every run a short lease, so a stopped process loses it quickly;
- ``FAULT_DISK_FULL=PATH``: once the file PATH exists, the database may not grow by a single page
  (SQLite's ``max_page_count`` on the store's own connection), as if the disk had just filled up.

Everything else is the unmodified CLI: its commands, output, exit codes and SQLite store.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from bubu.engine.driver import RunConfig
from bubu.events import Event
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Appended, Lease


def page_limit(db: sqlite3.Connection, pages: int) -> None:
    """Let the database on connection `db` hold at most `pages` pages."""
    db.execute(f"PRAGMA max_page_count={pages}")


class FillableStore(SQLiteStore):
    """A SQLite store whose disk fills up once the file `flag` exists: from then on the database
    may grow by at most `room` pages (none by default)."""

    def __init__(self, path: str | os.PathLike[str], *, flag: str, room: int = 0) -> None:
        super().__init__(path)
        self.flag, self.room = flag, room
        self.full = False

    def append(
        self,
        session: str,
        events: Sequence[Event],
        *,
        expect: int,
        durable: bool = False,
        lease: Lease | None = None,
        blobs: Sequence[bytes] = (),
    ) -> Appended:
        """Append as SQLite does, after capping the database if the disk has just filled up."""
        if not self.full and os.path.exists(self.flag):
            self.full = True
            with self._lock:
                pages = int(self._db.execute("PRAGMA page_count").fetchone()[0])
                page_limit(self._db, pages + self.room)
        return super().append(
            session, events, expect=expect, durable=durable, lease=lease, blobs=blobs
        )

    def free_space(self) -> None:
        """Lift the cap again (what freeing disk space does)."""
        self.full = True  # the flag no longer matters
        with self._lock:
            page_limit(self._db, 1 << 30)


def install_disk_full(flag: str) -> None:
    """Make every SQLite store the CLI opens a `FillableStore` watching `flag`."""
    import bubu.log.sqlite

    class _Store(FillableStore):
        def __init__(self, path: str | os.PathLike[str], **kw: object) -> None:
            super().__init__(path, flag=flag)

    setattr(bubu.log.sqlite, "SQLiteStore", _Store)  # noqa: B010


def install_short_lease(ttl_s: float) -> None:
    """Give every run the CLI starts a lease of `ttl_s` seconds (renewed every third of it)."""
    from bubu.cli import agentcmds
    from bubu.engine import driver

    @dataclass(frozen=True, slots=True, kw_only=True)
    class _ShortLease(RunConfig):
        lease_ttl_s: float = ttl_s

    # The commands import RunConfig where they build one, so the driver module's name is the
    # one they find (and agentcmds' own, for any that took it at import).
    setattr(driver, "RunConfig", _ShortLease)  # noqa: B010
    setattr(agentcmds, "RunConfig", _ShortLease)  # noqa: B010


def main() -> None:
    """Install the hooks named by the environment, then run the CLI."""
    if ttl := os.environ.get("FAULT_LEASE_TTL"):
        install_short_lease(float(ttl))
    if flag := os.environ.get("FAULT_DISK_FULL"):
        install_disk_full(flag)
    from bubu.cli import main as bubu_main

    sys.argv[0] = "bubu"
    bubu_main()


if __name__ == "__main__":
    main()
