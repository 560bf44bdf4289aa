"""Fixtures for the fleet tests: a fresh PostgreSQL schema per test, its URL, and a store on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from bubu.log.postgres import PostgresStore, WorkQueue
from pgserver import PG_URL


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh schema name, dropped (with everything in it) after the test."""
    name = f"bubu_fleet_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(PG_URL, autocommit=True) as db:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def url(schema: str) -> str:
    """The postgresql:// URL of the test's schema, as `--db` takes it."""
    return f"{PG_URL}?schema={schema}"


@pytest.fixture
def pg(url: str) -> Iterator[PostgresStore]:
    """A PostgresStore on the test's schema."""
    store = PostgresStore(url)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def queue(pg: PostgresStore) -> WorkQueue:
    """The work queue of `pg`."""
    return WorkQueue(pg)
