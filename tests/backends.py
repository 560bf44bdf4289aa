"""The log backends the tests run against, and how to open a fresh, empty store of each."""

from __future__ import annotations

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
