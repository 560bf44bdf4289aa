"""The store contract (`bubu.testing.store_contract`, the suite a third-party store runs too),
run against every backend: SQLite, PostgreSQL and the in-memory store; and what only a database
can promise: it refuses to update or delete an event behind the store's back."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends import BACKENDS, on_disk, open_backend
from bubu.events import Event
from bubu.log import codec
from bubu.log.memory import MemoryStore
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store
from bubu.testing.store_contract import StoreContract

from .samples import BLOB, session_events


class TestStoreContract(StoreContract):
    """The packaged contract, once per backend (ids `sqlite`, `postgres`, `memory`), appending
    the sample session that touches every kind of the vocabulary."""

    @pytest.fixture(params=BACKENDS)
    def store(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
        opened, dispose = open_backend(str(request.param), tmp_path)
        try:
            yield opened
        finally:
            dispose()

    def other_handle(self, store: Store) -> Store:
        if isinstance(store, MemoryStore):
            return MemoryStore(store.db)
        if isinstance(store, SQLiteStore):
            return SQLiteStore(store.path)
        from bubu.log.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        return PostgresStore(store.url, schema=store.schema)

    def sample_events(self, session: str) -> list[Event]:
        return session_events(session)

    def sample_blobs(self) -> list[bytes]:
        return [BLOB]


def _new(store: Store) -> str:
    return store.create_session(title="task", workspace="/work/project").id


# -- immutability, enforced by the database ---------------------------------------------------


def _raw_sqlite_attempts(store: SQLiteStore) -> list[str]:
    refused = []
    raw = sqlite3.connect(store.path, isolation_level=None)
    try:
        for sql in (
            "UPDATE events SET payload = x'00' WHERE seq = 1",
            "UPDATE events SET kind = 'text'",
            "DELETE FROM events WHERE seq = 2",
            "DELETE FROM events",
            "UPDATE blobs SET data = x'00'",
            "DELETE FROM blobs",
        ):
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                raw.execute(sql)
            refused.append(sql)
        with pytest.raises(sqlite3.DatabaseError, match="gapless"):
            raw.execute(
                "INSERT INTO events(pos, kind, payload, hash) "
                "VALUES ((1 << 32) + 9, 'x', x'00', zeroblob(32))"
            )
    finally:
        raw.close()
    return refused


def _raw_postgres_attempts(store: Store) -> list[str]:
    import psycopg
    from psycopg import sql

    from bubu.log.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    refused = []
    with psycopg.connect(store.target.conninfo, autocommit=True) as raw:
        raw.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(store.schema)))
        for stmt in (
            "UPDATE events SET payload = '\\x00'::bytea WHERE seq = 1",
            "UPDATE events SET kind = 'text'",
            "DELETE FROM events WHERE seq = 2",
            "DELETE FROM events",
            "TRUNCATE events CASCADE",
            "UPDATE blobs SET data = '\\x00'::bytea",
            "DELETE FROM blobs",
        ):
            with pytest.raises(psycopg.errors.IntegrityError, match="append-only"):
                raw.execute(stmt)
            refused.append(stmt)
        with pytest.raises(psycopg.errors.IntegrityError, match="gapless"):
            raw.execute(
                b"INSERT INTO events(sid, seq, kind, payload, hash) "
                b"SELECT sid, 99, 'x', '\\x00'::bytea, decode(repeat('00', 32), 'hex') "
                b"FROM sessions"
            )
    return refused


@on_disk
def test_the_database_refuses_update_and_delete_of_events(store: Store) -> None:
    sid = _new(store)
    store.append(sid, session_events(sid), expect=0, blobs=[BLOB])
    before = store.read(sid)
    if isinstance(store, SQLiteStore):
        refused = _raw_sqlite_attempts(store)
    else:
        refused = _raw_postgres_attempts(store)
    assert len(refused) >= 6
    assert store.read(sid) == before
    assert store.verify(sid).ok
    assert store.blob(codec.sha256_hex(BLOB)) == BLOB
