"""Fixtures for the web UI tests: a session crashed by a real SIGKILL (made once, copied per
test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu.log.sqlite import SQLiteStore

from .scenarios import Crashed, backup, crash_and_recover


@pytest.fixture(scope="session")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Crashed:
    """A session killed mid-tool by `bubu run` with a failpoint, then recovered by `bubu
    recover`."""
    return crash_and_recover(tmp_path_factory.mktemp("crash"))


@pytest.fixture
def recovered_store(tmp_path: Path, crashed: Crashed) -> Iterator[SQLiteStore]:
    """A private copy of the recovered database."""
    path = tmp_path / "bubu.db"
    backup(crashed.recovered_db, path)
    store = SQLiteStore(path)
    try:
        yield store
    finally:
        store.close()
