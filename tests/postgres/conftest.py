"""Fixtures for the PostgreSQL tests: a fresh schema per test and a raw connection into it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from bubu.log.postgres import PostgresStore
from pgserver import PG_URL


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh schema name, dropped (with everything in it) after the test."""
    name = f"bubu_pgtest_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(PG_URL, autocommit=True) as db:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def pg_url(schema: str) -> str:
    """A postgresql:// URL that names the test's schema."""
    return f"{PG_URL}?schema={schema}"


@pytest.fixture
def pg(schema: str) -> Iterator[PostgresStore]:
    """An empty PostgresStore in the test's schema."""
    store = PostgresStore(PG_URL, schema=schema)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def raw(pg: PostgresStore) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A plain autocommit psycopg connection whose search_path is the test's schema."""
    with psycopg.connect(PG_URL, autocommit=True) as db:
        db.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg.schema)))
        yield db
