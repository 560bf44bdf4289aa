"""Sessions searchable by content: the same hits from SQLite FTS5 and PostgreSQL full-text."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from bubu.cli.app import cli
from bubu.events import Actions, FunctionCall, FunctionResponse, Text, ToolDispatch, make
from bubu.log.postgres import PostgresStore
from bubu.log.search import search, terms
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store
from pgserver import PG_URL, ensure_database

TS = 1_700_000_000_000


def _fill(store: Store) -> list[str]:
    """Three sessions: the words are in a request, in the model's text, in a tool result."""
    ids = []
    for title, user, model, result in [
        ("fix the parser", "the tokenizer crashes on tabs", "I will look at lexer.py", "ok"),
        ("write docs", "document the flags", "done", "grep found zebra_stripes in cli.py"),
        ("misc", "hello", "the Quick brown fox jumps", "nothing"),
    ]:
        info = store.create_session(title=title, workspace="/w")
        s = info.id
        ids.append(s)
        events = [
            make(session=s, role="user", author="user", ts=TS, content=Text(text=user)),
            make(
                session=s,
                role="model",
                author="agent",
                ts=TS,
                content=Text(text=model),
                invocation="i1",
            ),
            make(
                session=s,
                role="model",
                author="agent",
                ts=TS,
                invocation="i1",
                content=FunctionCall(
                    call_id=f"c{s}",
                    name="grep",
                    arguments={"pattern": f"needle{len(ids) - 1}", "path": "src"},
                ),
                actions=Actions(end_invocation=True),
            ),
            make(
                session=s,
                role="system",
                author="system",
                ts=TS,
                actions=Actions(
                    tool_dispatch=ToolDispatch(
                        call_id=f"c{s}", tool="grep", effect="read_only", args_digest="d"
                    )
                ),
            ),
            make(
                session=s,
                role="tool",
                author="tool",
                ts=TS,
                content=FunctionResponse(call_id=f"c{s}", name="grep", result=result),
            ),
        ]
        store.append(s, events, expect=0)
    return ids


QUERIES = [
    ("tokenizer", [0]),
    ("TABS crashes", [0]),
    ('"brown fox"', [2]),
    ('"fox brown"', []),
    ("zebra_stripes", [1]),
    ("zebra", [1]),
    ("lexer.py", [0]),
    ('NEAR(fox OR) AND "', []),
    ("the", [0, 1, 2]),
    ("* ^ : -", []),
    ("absent", []),
    # The tool calls' arguments are indexed, and a trailing * matches a prefix.
    ("needle1", [1]),
    ("needle*", [0, 1, 2]),
    ("tokeni*", [0]),
    ('"brown fo"*', [2]),
    ('"brown fo"', []),
    ("zebr*", [1]),
    ("zebr", []),
]


def _hits(store: Store, ids: list[str]) -> dict[str, list[int]]:
    out = {}
    for q, _ in QUERIES:
        out[q] = sorted(ids.index(h.session) for h in search(store, q))
    return out


@pytest.fixture
def pg() -> Iterator[PostgresStore]:
    ensure_database(PG_URL)
    schema = f"bubu_search_{uuid.uuid4().hex[:10]}"
    store = PostgresStore(PG_URL, schema=schema)
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(PG_URL, autocommit=True) as db:
            db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.postgres
def test_sqlite_and_postgres_find_the_same_sessions(tmp_path: Path, pg: PostgresStore) -> None:
    with SQLiteStore(tmp_path / "b.db") as lite:
        lite_ids = _fill(lite)
        got_lite = _hits(lite, lite_ids)
    pg_ids = _fill(pg)
    got_pg = _hits(pg, pg_ids)
    expected = dict(QUERIES)
    assert got_lite == expected
    assert got_pg == expected


def test_the_index_catches_up_with_new_events_and_is_not_doubled(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "b.db") as store:
        ids = _fill(store)
        assert search(store, "giraffe") == []
        store.append(
            ids[2],
            [
                make(
                    session=ids[2],
                    role="user",
                    author="user",
                    ts=TS,
                    content=Text(text="a giraffe appears"),
                )
            ],
            expect=5,
        )
        hits = search(store, "giraffe")
        assert [(h.session, h.seq) for h in hits] == [(ids[2], 6)]
        assert "giraffe" in hits[0].snippet
        search(store, "giraffe")
        rows = store._db.execute("SELECT count(*) FROM search_fts").fetchone()[0]
        assert rows == 13  # request, text, call and result of 3 sessions, the new request once


def test_a_database_that_cannot_be_written_is_searched_all_the_same(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    with SQLiteStore(db) as store:
        _fill(store)  # never searched: no index yet
    ro = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.OperationalError):
            ro.execute("CREATE TABLE x(a)")
    finally:
        ro.close()
    with SQLiteStore(db) as store:
        store._db.execute("PRAGMA query_only=1")  # every write to the main database now fails
        assert [h.seq for h in search(store, "zebra")] == [5]
        ids = [i.id for i in reversed(store.sessions())]
        assert _hits(store, ids) == dict(QUERIES)  # the same answers as the index gives


def test_sessions_search_shows_a_snippet(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    with SQLiteStore(db) as store:
        ids = _fill(store)
    out = CliRunner().invoke(cli, ["--db", str(db), "sessions", "--search", "zebra"])
    assert out.exit_code == 0, out.output
    assert ids[1] in out.output
    assert ids[0] not in out.output
    assert "seq 5: grep found zebra_stripes in cli.py" in out.output
    out = CliRunner().invoke(cli, ["--db", str(db), "sessions", "--search", 'AND "'])
    assert out.exit_code == 0
    assert "no session matches" in out.output


def test_a_query_is_words_and_phrases_only() -> None:
    assert terms('fix "the parser" NEAR(a) *') == [["fix"], ["the", "parser"], ["near"], ["a"]]
    assert terms('pyte* "run the"* x') == [["pyte*"], ["run", "the*"], ["x"]]


def test_an_index_built_before_tool_calls_were_indexed_is_built_anew(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "b.db") as store:
        ids = _fill(store)
        search(store, "needle1")
        # As an older index left it: the digests unmarked, and no row of a tool call.
        store._db.execute("UPDATE search_done SET digest = substr(digest, 4)")
        store._db.execute("DELETE FROM search_fts WHERE words LIKE 'grep needle%'")
        assert [h.session for h in search(store, "needle1")] == [ids[1]]


def test_an_index_that_disagrees_with_the_log_is_rebuilt(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "b.db") as store:
        ids = _fill(store)
        search(store, "zebra")
        # The index says it was built from another log up to seq 2 (a database replaced under it).
        store._db.execute(
            "UPDATE search_done SET high_water=2, digest='not the log' WHERE session=?", (ids[1],)
        )
        store._db.execute("DELETE FROM search_fts WHERE session=? AND seq=5", (ids[1],))
        assert [h.session for h in search(store, "zebra")] == [ids[1]]
        rows = store._db.execute(
            "SELECT count(*) FROM search_fts WHERE session=?", (ids[1],)
        ).fetchone()[0]
        assert rows == 4  # rebuilt from the log, nothing doubled


def test_a_status_filter_that_matches_nothing_says_so_not_that_there_are_no_sessions(
    tmp_path: Path,
) -> None:
    db = tmp_path / "b.db"
    with SQLiteStore(db) as store:
        _fill(store)
    out = CliRunner().invoke(cli, ["--db", str(db), "sessions", "--status", "running"])
    assert out.exit_code == 0, out.output
    assert out.output.strip() == (
        "no running sessions (3 sessions in other states; `bubu sessions` lists them all)"
    )
    assert "no sessions yet" not in out.output
