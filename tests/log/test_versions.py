"""Schema versions: the stored fixture of each version, upgrade-on-read, and newer logs refused."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from backends import on_disk
from bubu.errors import CorruptLog, NewerLogError
from bubu.events import SCHEMA_VERSION, SessionStarted, SystemNote, Text
from bubu.log import codec
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store
from bubu.log.transfer import export_lines, import_lines
from bubu.log.verify import verify_records

from .samples import ACTION_NAMES, CONTENT_KINDS, LATER_NOTE_KINDS, NOTE_KINDS, coverage

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CURRENT = FIXTURES / f"log_v{SCHEMA_VERSION}.jsonl"
ALL_VERSIONS = sorted(FIXTURES.glob("log_v*.jsonl"))


class _Line(msgspec.Struct):
    seq: int
    hash: str
    event: msgspec.Raw


def _lines(path: Path) -> tuple[dict[str, Any], list[_Line]]:
    header, *rest = path.read_bytes().splitlines()
    return json.loads(header), [msgspec.json.decode(line, type=_Line) for line in rest]


def test_there_is_a_fixture_for_every_version_up_to_the_current_one() -> None:
    assert [p.name for p in ALL_VERSIONS] == [
        f"log_v{v}.jsonl" for v in range(1, SCHEMA_VERSION + 1)
    ]


@pytest.mark.parametrize("path", ALL_VERSIONS, ids=lambda p: p.stem)
def test_every_fixture_decodes_to_the_current_schema_and_its_chain_verifies(path: Path) -> None:
    header, lines = _lines(path)
    rows = [(ln.seq, bytes.fromhex(ln.hash), bytes(ln.event)) for ln in lines]
    report = verify_records(header["session"], rows)
    assert report.ok, report.problem
    assert (report.high_water, report.digest) == (header["high_water"], header["digest"])
    events = [codec.decode(bytes(ln.event), seq=ln.seq) for ln in lines]
    assert {e.v for e in events} == {SCHEMA_VERSION}
    assert coverage(events) == (
        set(CONTENT_KINDS),
        set(NOTE_KINDS - LATER_NOTE_KINDS),
        set(ACTION_NAMES),
    )


def test_the_current_fixture_re_encodes_byte_for_byte() -> None:
    _, lines = _lines(CURRENT)
    for ln in lines:
        stored = bytes(ln.event)
        assert codec.encode(codec.decode(stored)) == stored, f"seq {ln.seq} changed encoding"


def test_the_current_fixture_imports_and_exports_unchanged(store: Store) -> None:
    raw = CURRENT.read_bytes().splitlines()
    header = json.loads(raw[0])
    info, head = import_lines(store, raw)
    assert (info.id, head.high_water, head.digest) == (
        header["session"],
        header["high_water"],
        header["digest"],
    )
    report = store.verify(info.id)
    assert report.ok, report.problem
    # The copy, then the import's own mark of where the session came from.
    *copied, origin = store.read(info.id)
    assert [r.event for r in copied] == [codec.decode(bytes(ln.event)) for ln in _lines(CURRENT)[1]]
    assert isinstance(origin.event.content, SystemNote)
    assert isinstance(origin.event.content.note, SessionStarted)
    assert origin.event.content.note.origin == "import"
    assert origin.event.content.note.source_digest == header["digest"]
    exported = list(export_lines(store, store.session(info.id)))
    assert exported[1:-1] == raw[1:]
    again = json.loads(exported[0])
    keys = ("session", "title", "workspace", "model")
    assert {k: again[k] for k in keys} == {k: header[k] for k in keys}
    assert again["high_water"] == header["high_water"] + 1


# -- upgrade on read --------------------------------------------------------------------------


def _v0_message(session: str, body: str) -> bytes:
    """A made-up schema-0 event: text content was once `{"kind": "message", "body": …}`."""
    return codec.canonical_json(
        {
            "v": 0,
            "id": "evt_old",
            "session": session,
            "role": "user",
            "author": "user",
            "ts": 1,
            "content": {"kind": "message", "body": body},
        }
    )


def _upgrade_v0(raw: dict[str, Any]) -> dict[str, Any]:
    content = raw.get("content")
    if isinstance(content, dict) and content.get("kind") == "message":
        raw["content"] = {"kind": "text", "text": content["body"]}
    return raw


@pytest.fixture
def v0_upgrader(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SCHEMA_VERSION == 1, "chain the fake upgrader onto the real ones when v2 exists"
    monkeypatch.setitem(codec.UPGRADERS, 0, _upgrade_v0)


@pytest.mark.usefixtures("v0_upgrader")
def test_an_older_event_is_upgraded_on_read() -> None:
    ev = codec.decode(_v0_message("ses_old", "hello from the past"), seq=1)
    assert ev.v == SCHEMA_VERSION
    assert ev.content == Text(text="hello from the past")
    assert (ev.id, ev.session, ev.role) == ("evt_old", "ses_old", "user")


def test_without_its_upgrader_an_older_event_is_not_misread() -> None:
    with pytest.raises(CorruptLog, match="schema 0, which no Bubu ever wrote"):
        codec.decode(_v0_message("ses_old", "x"))


def _raw_insert(path: str, session: str, payloads: list[bytes]) -> None:
    """Append text rows straight into the file, with a correct chain and their kind_index rows,
    as a Bubu of an older event schema would have."""
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        (sid,) = raw.execute("SELECT sid FROM sessions WHERE id = ?", (session,)).fetchone()
        row = raw.execute(
            "SELECT seq, hash FROM events WHERE sid = ? ORDER BY seq DESC LIMIT 1", (sid,)
        ).fetchone()
        seq, prev = (row[0], bytes(row[1])) if row else (0, codec.GENESIS)
        for payload in payloads:
            seq += 1
            prev = codec.chain(prev, payload)
            raw.execute(
                "INSERT INTO events(pos, kind, payload, hash) VALUES (?,?,?,?)",
                ((sid << 32) | seq, "text", payload, prev),
            )
            raw.execute("INSERT INTO kind_index(sid, kind, seq) VALUES (?, 'text', ?)", (sid, seq))
    finally:
        raw.close()


@pytest.mark.usefixtures("v0_upgrader")
def test_a_stored_older_event_reads_upgraded_and_still_verifies(
    sqlite_store: SQLiteStore, make_event: Any
) -> None:
    sid = sqlite_store.create_session(title="old", workspace="/w").id
    sqlite_store.append(sid, [make_event(sid, Text(text="new"))], expect=0)
    _raw_insert(sqlite_store.path, sid, [_v0_message(sid, "old one")])
    records = sqlite_store.read(sid)
    assert [r.event.content for r in records] == [Text(text="new"), Text(text="old one")]
    assert sqlite_store.verify(sid).ok  # the chain covers the stored (old) bytes


def test_a_stored_newer_event_is_refused_and_older_ones_stay_readable(
    sqlite_store: SQLiteStore, make_event: Any
) -> None:
    sid = sqlite_store.create_session(title="mixed", workspace="/w").id
    sqlite_store.append(sid, [make_event(sid), make_event(sid)], expect=0)
    future = json.loads(codec.encode(make_event(sid, Text(text="from v2"))))
    future["v"] = 2
    _raw_insert(sqlite_store.path, sid, [codec.canonical_json(future)])
    with pytest.raises(NewerLogError, match=r"at seq 3 was written by a newer Bubu .*upgrade Bubu"):
        sqlite_store.read(sid)
    assert len(sqlite_store.read(sid, upto=2)) == 2


def _record_migration_99(store: Store) -> Store:
    """Mark the database as migrated by a future Bubu; return a fresh handle on it."""
    if isinstance(store, SQLiteStore):
        store.close()
        raw = sqlite3.connect(store.path, isolation_level=None)
        raw.execute(
            "INSERT INTO bubu_migrations(version, name, applied_ms) VALUES (99, 'future', 0)"
        )
        raw.close()
        return SQLiteStore(store.path)
    import psycopg
    from psycopg import sql

    from bubu.log.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.target.conninfo, autocommit=True) as pg:
        pg.execute(
            sql.SQL("INSERT INTO {}.bubu_migrations(version, name) VALUES (99, 'future')").format(
                sql.Identifier(store.schema)
            )
        )
    return PostgresStore(store.url, schema=store.schema)


@on_disk
def test_a_database_migrated_by_a_newer_bubu_is_refused_on_open(store: Store) -> None:
    sid = store.create_session(title="kept", workspace="/w").id
    with pytest.raises(NewerLogError, match=r"newer Bubu \(migration 99.*upgrade Bubu to open it"):
        _record_migration_99(store)
    if isinstance(store, SQLiteStore):
        raw = sqlite3.connect(store.path)
        assert raw.execute("SELECT id FROM sessions").fetchall() == [(sid,)]
        raw.close()
