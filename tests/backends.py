"""The log backends the tests run against, and how to open a fresh, empty store of each."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from bubu.log.memory import MemoryStore
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store
from pgserver import PG_URL

DISK_BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]
"""The backends with a database behind them (one a test can tamper with or migrate)."""

BACKENDS = [*DISK_BACKENDS, pytest.param("memory", id="memory")]
"""Every backend: the contract holds for each."""

on_disk = pytest.mark.parametrize("store", DISK_BACKENDS, indirect=True)
"""Run a test taking `store` on the backends with a database only (it reaches past the store)."""


def open_backend(backend: str, tmp_path: Path) -> tuple[Store, Callable[[], None]]:
    """A fresh, empty store of `backend` and the function that disposes of it."""
    if backend == "sqlite":
        sqlite = SQLiteStore(tmp_path / "bubu.db")
        return sqlite, sqlite.close
    if backend == "memory":
        memory = MemoryStore()
        return memory, memory.close
    # Imported here so the SQLite runs never depend on the PostgreSQL backend.
    from bubu.log.postgres import PostgresStore

    pg = PostgresStore(PG_URL, schema=f"bubu_test_{uuid.uuid4().hex[:12]}")

    def dispose() -> None:
        try:
            pg.drop_schema()
        finally:
            pg.close()

    return pg, dispose


def tamper_payload(store: Store, session: str, seq: int, old: bytes, new: bytes) -> None:
    """Rewrite one stored event behind the store's back, with its immutability trigger off."""
    if isinstance(store, MemoryStore):
        rows = store.db.sessions[session].rows
        at, kind, payload, digest = rows[seq - 1]
        rows[seq - 1] = (at, kind, payload.replace(old, new), digest)
        return
    if isinstance(store, SQLiteStore):
        raw = sqlite3.connect(store.path, isolation_level=None)
        try:
            raw.execute("DROP TRIGGER events_no_update")
            (payload,) = raw.execute("SELECT payload FROM events WHERE seq = ?", (seq,)).fetchone()
            raw.execute(
                "UPDATE events SET payload = ? WHERE seq = ?", (payload.replace(old, new), seq)
            )
        finally:
            raw.close()
        return
    import psycopg
    from psycopg import sql

    from bubu.log.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.target.conninfo, autocommit=True) as pg:
        pg.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(store.schema)))
        pg.execute("ALTER TABLE events DISABLE TRIGGER events_immutable")
        pg.execute(
            "UPDATE events SET payload = "
            "convert_to(replace(convert_from(payload, 'UTF8'), %s, %s), 'UTF8') "
            "WHERE seq = %s AND sid = (SELECT sid FROM sessions WHERE id = %s)",
            [old.decode(), new.decode(), seq, session],
        )
        pg.execute("ALTER TABLE events ENABLE TRIGGER events_immutable")
