"""A rewind on PostgreSQL, and the kept contents travelling with an export."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from bubu.api import Agent
from bubu.engine.rewind import preview, rewind
from bubu.log.postgres import PostgresStore
from bubu.log.sqlite import SQLiteStore
from bubu.log.transfer import export_lines, import_lines
from pgserver import PG_URL, ensure_database

SCRIPT = [
    {
        "tool_calls": [
            {"name": "write_file", "arguments": {"path": "a.txt", "content": "ALPHA\n"}},
            {"name": "edit_file", "arguments": {"path": "b.txt", "old": "beta", "new": "BETA"}},
            {"name": "write_file", "arguments": {"path": "sub/c.txt", "content": "new\n"}},
        ]
    },
    {"text": "done"},
]


def _workspace(tmp: Path) -> tuple[Path, str]:
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "a.txt").write_bytes(b"alpha\n")
    (ws / "b.txt").write_bytes(b"beta\n")
    script = tmp / "m.jsonl"
    script.write_text("".join(json.dumps(x) + "\n" for x in SCRIPT))
    return ws, f"scripted:{script}"


@pytest.fixture
def pg() -> Iterator[PostgresStore]:
    ensure_database(PG_URL)
    schema = f"bubu_rewind_{uuid.uuid4().hex[:10]}"
    store = PostgresStore(PG_URL, schema=schema)
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(PG_URL, autocommit=True) as db:
            db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.postgres
def test_a_rewind_on_postgresql(tmp_path: Path, pg: PostgresStore) -> None:
    ws, model = _workspace(tmp_path)
    with Agent(model=model, store=pg, workspace=ws) as agent:
        sid = agent.run("change").session
    assert (ws / "b.txt").read_bytes() == b"BETA\n"
    p = preview(pg, sid, 0)
    assert [(f.path, f.action) for f in p.files] == [
        ("a.txt", "restore"),
        ("b.txt", "restore"),
        ("sub/c.txt", "delete"),
    ]
    done = rewind(pg, p)
    assert (ws / "a.txt").read_bytes() == b"alpha\n"
    assert (ws / "b.txt").read_bytes() == b"beta\n"
    assert not (ws / "sub" / "c.txt").exists()
    assert pg.verify(sid).ok
    assert pg.verify(done.fork).ok
    assert [failed for *_, failed in done.results] == [False, False, False]


def test_an_export_carries_the_kept_contents(tmp_path: Path) -> None:
    ws, model = _workspace(tmp_path)
    with Agent(model=model, store=tmp_path / "a.db", workspace=ws) as agent:
        sid = agent.run("change").session
    with SQLiteStore(tmp_path / "a.db") as a, SQLiteStore(tmp_path / "b.db") as b:
        import_lines(b, list(export_lines(a, a.session(sid))))
        p = preview(b, sid, 0)
    assert {f.path: f.action for f in p.files} == {
        "a.txt": "restore",
        "b.txt": "restore",
        "sub/c.txt": "delete",
    }
