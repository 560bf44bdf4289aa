"""The PostgreSQL server the tests run against, and the database they create on it.

`PG_URL` names the database: `BUBU_TEST_PG` when set, else `bubu_test` on 127.0.0.1:5432 (trust
auth). `ensure_database` creates that database when it is missing, connecting to the server's
`postgres` database to do so; the root conftest calls it once per process before the first test
marked `postgres`, so a fresh server needs nothing made by hand. Parallel test processes may race
to create it: an advisory lock orders them, and a database another process created first is
taken as it is.
"""

from __future__ import annotations

import contextlib
import os
from urllib.parse import urlsplit, urlunsplit

DEFAULT_DB = "bubu_test"
"""The database the tests use unless `BUBU_TEST_PG` names another."""

PG_URL = os.environ.get("BUBU_TEST_PG") or f"postgresql://postgres@127.0.0.1:5432/{DEFAULT_DB}"
"""The PostgreSQL database under test (every test works in a fresh schema of its own)."""

_LOCK_KEY = 0x6275_6275_7465_7374  # "bubutest": the advisory lock that orders the creators
_ensured: set[str] = set()


def database_of(url: str) -> str:
    """The database a postgresql:// URL names (its path), or `postgres` when it names none."""
    return urlsplit(url).path.lstrip("/") or "postgres"


def maintenance_url(url: str) -> str:
    """`url` with its database replaced by the server's `postgres` database."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, parts.fragment))


def ensure_database(url: str = PG_URL) -> None:
    """Create the database `url` names if the server lacks it (once per process)."""
    if url in _ensured:
        return
    import psycopg
    from psycopg import errors, sql

    name = database_of(url)
    with psycopg.connect(maintenance_url(url), autocommit=True) as db:
        db.execute("SELECT pg_advisory_lock(%s)", [_LOCK_KEY])
        try:
            found = db.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if found is None:
                # A process that does not take the lock may have created it meanwhile.
                with contextlib.suppress(errors.DuplicateDatabase, errors.UniqueViolation):
                    db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        finally:
            db.execute("SELECT pg_advisory_unlock(%s)", [_LOCK_KEY])
    _ensured.add(url)
