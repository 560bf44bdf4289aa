"""Shared fixtures: a `store` for every log backend, and a small event factory.

The `store` fixture is parametrized over the backends (ids `sqlite`, `postgres`, `memory`), so a
test that takes it runs once per backend; `-k sqlite` selects the embedded one. The PostgreSQL
store is imported inside the fixture so the SQLite runs never depend on it; each PostgreSQL test
gets a fresh schema of its own and drops it afterwards, in the database
`pgserver.ensure_database` creates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import hermetic
import hypo
from backends import BACKENDS, open_backend
from bubu.events import Actions, Author, Content, Event, Role, Status, Text, Visibility, make
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store
from pgserver import PG_URL, ensure_database

TS = 1_700_000_000_000
"""A fixed creation time, so events built in tests are reproducible."""

EventFactory = Callable[..., Event]


def make_event(
    session: str,
    content: Content | None = None,
    *,
    role: Role = "user",
    author: Author = "user",
    actions: Actions | None = None,
    ts: int = TS,
    id: str | None = None,
    turn: str | None = None,
    run: str | None = None,
    invocation: str | None = None,
    status: Status | None = None,
    visibility: Visibility = "visible",
) -> Event:
    """An event of the current schema for `session`; plain user text unless `content` is given."""
    if content is None and actions is None:
        content = Text(text="hello")
    return make(
        session=session,
        role=role,
        author=author,
        ts=ts,
        content=content,
        actions=actions,
        id=id,
        turn=turn,
        run=run,
        invocation=invocation,
        status=status,
        visibility=visibility,
    )


def pytest_configure(config: pytest.Config) -> None:
    """A quick selection (``-m "not slow"``) runs the property tests with fewer examples; no
    installed third-party plugin takes part (`hermetic`)."""
    hypo.choose(str(config.getoption("markexpr", "") or ""))
    hermetic.pin_plugins()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A `heavy` test is a long one that is safe beside others: it is left out of the quick
    selection like a `slow` one (before `-m` selects), and scripts/test runs it on every core."""
    for item in items:
        if item.get_closest_marker("heavy") is not None:
            item.add_marker(pytest.mark.slow)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the first PostgreSQL test of this process, create the test database if missing."""
    if item.get_closest_marker("postgres") is not None:
        ensure_database(PG_URL)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """An empty store, once per backend (`on_disk` limits a test to those with a database)."""
    opened, dispose = open_backend(str(request.param), tmp_path)
    try:
        yield opened
    finally:
        dispose()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """An empty SQLite store in `tmp_path` (for tests that need the file itself)."""
    opened = SQLiteStore(tmp_path / "bubu.db")
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(name="make_event")
def make_event_fixture() -> EventFactory:
    """The `make_event` helper, for tests that would rather not import from conftest."""
    return make_event
