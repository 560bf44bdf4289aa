"""What SQLite file `--db` names, decided before Bubu writes a byte to it.

A file that is not a Bubu log (another program's SQLite database, or not SQLite at all) is refused
untouched: no WAL switch, no tables. A read-only command opens an existing log without migrating
it, and on a read-only mount falls back to SQLite's read-only and immutable opens.
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


def _uri(path: str, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"file:{quote(str(Path(path).expanduser().absolute()))}?{query}"


def exists_nonempty(path: str) -> bool:
    """Whether `path` holds a database already (a zero-byte file is as good as none)."""
    try:
        return os.stat(path).st_size > 0
    except OSError:
        return False


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
