"""What SQLite file `--db` names, decided before Bubu writes a byte to it.

A file that is not a Bubu log (another program's SQLite database, or not SQLite at all) is refused
untouched: no WAL switch, no tables. A read-only command opens an existing log without migrating
it, and on a read-only mount falls back to SQLite's read-only and immutable opens. The log holds
every message and tool output, so a new one is created readable by its owner only (SQLite gives
its -wal and -shm files the main file's mode), and an existing one that others may read is named
in one warning line.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
from pathlib import Path
from urllib.parse import quote

from bubu.errors import CorruptLog, StorageError

SQLITE_MAGIC = b"SQLite format 3\x00"
MARKER_TABLE = "bubu_migrations"
PRIVATE = 0o600
"""The mode of a new log database (and so of its -wal and -shm files)."""

_warned: set[str] = set()
"""The databases already named as readable by others in this process: one line each."""


def _uri(path: str, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"file:{quote(str(Path(path).expanduser().absolute()))}?{query}"


def exists_nonempty(path: str) -> bool:
    """Whether `path` holds a database already (a zero-byte file is as good as none)."""
    try:
        return os.stat(path).st_size > 0
    except OSError:
        return False


def create_private(path: str) -> None:
    """Create the database file `path`, empty and mode 0600, unless it exists; SQLite then fills
    it and gives its -wal and -shm files the same mode."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    except FileExistsError:
        return
    except OSError:
        return  # SQLite's own open says what is wrong, in its words
    try:
        os.fchmod(fd, PRIVATE)  # whatever the umask
    finally:
        os.close(fd)


def warn_if_readable(path: str) -> None:
    """One warning line (once per process) when others than its owner may read the log."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        return
    if mode & 0o077 == 0 or path in _warned:
        return
    _warned.add(path)
    import shlex  # only for this warning

    sys.stderr.write(
        f"bubu: warning: the log {path} is readable by others (mode {mode:04o}), and it holds "
        f"every message and tool output; `chmod 600 {shlex.quote(path)}` makes it yours alone\n"
    )


def tables_of(path: str) -> list[str]:
    """The tables of the SQLite file at `path`, read without writing anything: refuses a file
    that is not SQLite at all."""
    try:
        with open(path, "rb") as f:
            magic = f.read(len(SQLITE_MAGIC))
    except OSError as e:
        raise StorageError(f"cannot read the database {path} ({e.strerror})") from e
    if magic != SQLITE_MAGIC:
        raise CorruptLog(
            f"{path} is not a readable Bubu database (file is not a database); restore it from "
            "a backup or point --db elsewhere"
        )
    last: sqlite3.Error | None = None
    for params in ({"mode": "ro"}, {"immutable": "1"}):
        try:
            db = sqlite3.connect(_uri(path, **params), uri=True, isolation_level=None)
        except sqlite3.Error as e:
            last = e
            continue
        try:
            rows = db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
            return [str(r[0]) for r in rows]
        except sqlite3.Error as e:
            last = e
        finally:
            db.close()
    msg = str(last)
    raise CorruptLog(
        f"{path} is not a readable Bubu database ({msg}); restore it from a backup or point "
        "--db elsewhere"
    )


def refuse_foreign(path: str) -> None:
    """Raise unless the file at `path` (which exists) is a Bubu log or an empty SQLite file."""
    tables = tables_of(path)
    if tables and MARKER_TABLE not in tables:
        shown = ", ".join(sorted(tables)[:5]) + (", …" if len(tables) > 5 else "")
        raise StorageError(
            f"{path} is a SQLite database but not a Bubu log (its tables: {shown}; no "
            f"{MARKER_TABLE} table); Bubu left it untouched: point --db at a Bubu log or a new path"
        )


def _wal_holds_commits(path: str) -> bool:
    try:
        return os.stat(f"{path}-wal").st_size > 0
    except OSError:
        return False


def connect_readonly(path: str, timeout: float) -> sqlite3.Connection:
    """A connection for reading an existing Bubu log: the ordinary open where it works (a log on a
    writable disk shares the writers' WAL), else read-only, else immutable (a read-only mount
    where SQLite cannot create the `-shm` file; the log is read as the main file holds it)."""
    last: sqlite3.Error | None = None
    for target, uri in (
        (path, False),
        (_uri(path, mode="ro"), True),
        (_uri(path, immutable="1"), True),
    ):
        db: sqlite3.Connection | None = None
        try:
            db = sqlite3.connect(
                target, uri=uri, isolation_level=None, check_same_thread=False, timeout=timeout
            )
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if "immutable" in target and _wal_holds_commits(path):
                sys.stderr.write(
                    f"bubu: warning: {path} is read as its main file holds it: its -wal file has "
                    "commits SQLite cannot read on this read-only disk (open it once where it "
                    "can be written to see them)\n"
                )
            return db
        except sqlite3.Error as e:
            last = e
            if db is not None:
                with contextlib.suppress(sqlite3.Error):
                    db.close()
    assert last is not None
    raise last
