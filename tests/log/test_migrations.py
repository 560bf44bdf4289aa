"""SQLite schema migrations on a real database an older Bubu wrote, and the kind index.

`tests/fixtures/sqlite_migration1.db` was written by Bubu when the schema had migration 1 only
(two sessions of `samples.session_events`, one appended whole, one in two batches, with the
offloaded blob). It is a stored artefact of that version: never regenerate it with newer code.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from bubu.engine.worker import REQUEST_KINDS
from bubu.errors import AppendConflict
from bubu.events import Event, Info, SessionStarted, SystemNote, Text, Thinking, kind_of, make
from bubu.log import codec
from bubu.log.migrations import INDEXED_KINDS, SQLITE_MIGRATIONS
from bubu.log.sqlite import SQLiteStore
from bubu.projections.origin import FACT_KINDS
from bubu.projections.status import BOUNDARY_KINDS

from .samples import ACTION_NAMES, BLOB, CONTENT_KINDS, NOTE_KINDS, session_events

EventFactory = Callable[..., Event]
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "sqlite_migration1.db"
SESSIONS = ("ses_migration1a", "ses_migration1b")
KIND_SETS = (  # indexed kinds alone (read through kind_index), and mixed with others
    ["turn_started"],
    ["run_started", "turn_ended", "recovery_notice"],
    ["compaction", "info", "permission_decision"],
    ["error", "compaction", "model_request"],
    ["permission_request", "tool_dispatch"],
)


def _copy(tmp_path: Path) -> Path:
    path = tmp_path / "old.db"
    shutil.copyfile(FIXTURE, path)
    return path


def _kinds_in(store: SQLiteStore, sid: str) -> list[tuple[int, str]]:
    return [(r.seq, kind_of(r.event)) for r in store.read(sid)]


def test_the_fixture_is_at_migration_1() -> None:
    raw = sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True)
    try:
        assert raw.execute("SELECT version FROM bubu_migrations").fetchall() == [(1,)]
        names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
        assert "events_rare_kind" in names
        assert "kind_index" not in names
    finally:
        raw.close()


def test_a_database_at_migration_1_is_upgraded_in_place_and_reads_the_same(
    tmp_path: Path,
) -> None:
    path = _copy(tmp_path)
    raw = sqlite3.connect(path)
    before = raw.execute("SELECT pos, kind, payload, hash FROM events ORDER BY pos").fetchall()
    raw.close()

    with SQLiteStore(path) as store:
        assert [v for v, _ in store.migrations()] == [m.version for m in SQLITE_MIGRATIONS]
        for sid in SESSIONS:
            report = store.verify(sid)
            assert report.ok, report.problem
            kinds = _kinds_in(store, sid)
            assert any(k in INDEXED_KINDS for _, k in kinds)
            for wanted in KIND_SETS:
                got = [(r.seq, kind_of(r.event)) for r in store.read(sid, kinds=wanted)]
                assert got == [(s, k) for s, k in kinds if k in wanted]
                assert got  # the sample session has every kind
            upto = len(kinds) // 2
            part = store.read(sid, after=2, upto=upto, kinds=["turn_started", "run_started"])
            assert [r.seq for r in part] == [
                s for s, k in kinds if 2 < s <= upto and k in ("turn_started", "run_started")
            ]
        assert store.blob(codec.sha256_hex(BLOB)) == BLOB

    raw = sqlite3.connect(path)
    try:
        # The migration moved no byte of the log.
        assert (
            raw.execute("SELECT pos, kind, payload, hash FROM events ORDER BY pos").fetchall()
            == before
        )
        names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
        assert "events_rare_kind" not in names
        assert "kind_index" in names
    finally:
        raw.close()


def test_an_upgraded_database_takes_new_appends_and_is_not_migrated_twice(
    tmp_path: Path, make_event: EventFactory
) -> None:
    path = _copy(tmp_path)
    sid = SESSIONS[1]
    with SQLiteStore(path) as store:
        hw = store.head(sid).high_water
        infos = [r.seq for r in store.read(sid, kinds=["info"])]
        assert infos  # the sample session has one already
        note = make_event(sid, SystemNote(note=Info(text="after the upgrade")))
        text = make_event(sid, Text(text="and a text"))
        assert store.append(sid, [note], expect=hw).high_water == hw + 1
        assert store.append(sid, [text], expect=hw + 1).high_water == hw + 2
    with SQLiteStore(path) as store:
        assert [v for v, _ in store.migrations()] == [m.version for m in SQLITE_MIGRATIONS]
        assert [r.seq for r in store.read(sid, kinds=["info"])] == [*infos, hw + 1]
        assert store.verify(sid).ok
        lease = store.acquire_lease(sid, "runner-a", 60)  # leases gained stop requests (3)
        asked = store.request_stop(sid)
        assert asked is not None
        assert (asked.epoch, asked.stop_requested) == (lease.epoch, True)


# -- the kind index ---------------------------------------------------------------------------


def _insert_behind_the_stores_back(store: SQLiteStore, sid: str, event: Event) -> int:
    """Append one correctly chained event row with raw SQL (no kind_index row)."""
    head = store.head(sid)
    payload = codec.encode(event)
    raw = sqlite3.connect(store.path, isolation_level=None)
    try:
        (rowid,) = raw.execute("SELECT sid FROM sessions WHERE id = ?", (sid,)).fetchone()
        raw.execute(
            "INSERT INTO events(pos, kind, payload, hash) VALUES (?,?,?,?)",
            (
                (rowid << 32) | (head.high_water + 1),
                kind_of(event),
                payload,
                codec.chain(bytes.fromhex(head.digest), payload),
            ),
        )
    finally:
        raw.close()
    return head.high_water + 1


def test_the_indexed_kinds_are_kinds_and_leave_the_per_step_ones_out() -> None:
    assert set(INDEXED_KINDS) <= CONTENT_KINDS | NOTE_KINDS | ACTION_NAMES
    # What every agent step writes stays on the one-statement append path.
    per_step = {"thinking", "function_call", "function_response", "model_request", "tool_dispatch"}
    assert not set(INDEXED_KINDS) & per_step
    # What a status, the worker's queue and recovery fold from is read through the index.
    assert set(BOUNDARY_KINDS) | set(REQUEST_KINDS) <= set(INDEXED_KINDS)


def test_every_append_path_indexes_the_indexed_kinds(sqlite_store: SQLiteStore) -> None:
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    events = session_events(sid)
    hw = 0
    for i, ev in enumerate(events):  # one at a time: the single-event path and the batch path
        blobs = [BLOB] if getattr(ev.content, "blob", None) is not None else []
        hw = sqlite_store.append(sid, [ev], expect=hw, durable=i % 2 == 0, blobs=blobs).high_water
    other = sqlite_store.create_session(title="u", workspace="/w")
    sqlite_store.append(other.id, session_events(other.id), expect=0, blobs=[BLOB])
    for s in (sid, other.id):
        kinds = _kinds_in(sqlite_store, s)
        raw = sqlite3.connect(sqlite_store.path)
        indexed = raw.execute(
            "SELECT seq, kind FROM kind_index WHERE sid = (SELECT sid FROM sessions WHERE id = ?) "
            "ORDER BY seq",
            (s,),
        ).fetchall()
        raw.close()
        assert indexed == [(q, k) for q, k in kinds if k in INDEXED_KINDS]
        assert indexed
        assert sqlite_store.verify(s).ok


def test_an_indexed_event_written_behind_the_stores_back_fails_verify_at_its_seq(
    sqlite_store: SQLiteStore, make_event: EventFactory
) -> None:
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    sqlite_store.append(sid, session_events(sid), expect=0, blobs=[BLOB])
    assert sqlite_store.verify(sid).ok
    event = make_event(sid, SystemNote(note=Info(text="smuggled")))
    seq = _insert_behind_the_stores_back(sqlite_store, sid, event)
    report = sqlite_store.verify(sid)
    assert (report.ok, report.first_bad_seq) == (False, seq)
    assert report.problem is not None
    assert "kind_index" in report.problem
    assert "'info'" in report.problem
    # The chain itself is whole: every event still reads, in order.
    assert sqlite_store.read(sid)[-1].event == event


def test_a_stray_kind_index_row_fails_verify(
    sqlite_store: SQLiteStore, make_event: EventFactory
) -> None:
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    texts = [make_event(sid, Text(text=f"t{i}")) for i in range(3)]
    sqlite_store.append(sid, texts, expect=0)
    raw = sqlite3.connect(sqlite_store.path, isolation_level=None)
    raw.execute(
        "INSERT INTO kind_index(sid, kind, seq) "
        "SELECT sid, 'turn_started', 2 FROM sessions WHERE id = ?",
        (sid,),
    )
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        raw.execute("DELETE FROM kind_index")
    raw.close()
    report = sqlite_store.verify(sid)
    assert (report.ok, report.first_bad_seq) == (False, 2)
    assert report.problem is not None
    assert "names a 'turn_started' event at seq 2" in report.problem
    # A read by kind is not misled by it.
    assert sqlite_store.read(sid, kinds=["turn_started"]) == []


def test_a_writer_whose_cached_head_went_stale_gets_a_conflict_not_a_fork(
    sqlite_store: SQLiteStore, make_event: EventFactory
) -> None:
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    sqlite_store.append(sid, [make_event(sid, Thinking(text="a"))], expect=0)
    # Another writer appends an event of a kind that is not indexed: the log stays whole.
    _insert_behind_the_stores_back(sqlite_store, sid, make_event(sid, Thinking(text="b")))
    assert sqlite_store.verify(sid).ok
    late = make_event(sid, Thinking(text="late"))
    with pytest.raises(AppendConflict) as e:
        sqlite_store.append(sid, [late], expect=1, durable=True)
    assert (e.value.expected, e.value.actual) == (1, 2)
    assert [r.event.content for r in sqlite_store.read(sid)] == [
        Thinking(text="a"),
        Thinking(text="b"),
    ]
    assert sqlite_store.append(sid, [late], expect=2).high_water == 3
    assert sqlite_store.verify(sid).ok


def test_a_database_before_the_facts_were_indexed_reads_them_and_is_upgraded(
    tmp_path: Path,
) -> None:
    """A database whose `session_started` rows are not in kind_index (written before migration
    7): a read-only open reads them off the events and verifies; a writable open backfills the
    index, and reads by kind find them through it."""
    path = _copy(tmp_path)
    sid = SESSIONS[0]
    with SQLiteStore(path) as store:
        note = SystemNote(note=SessionStarted(workspace="/w", title="t", origin="import"))
        ev = make(session=sid, role="system", author="host", ts=1, content=note)
        store.append(sid, [ev], expect=len(store.read(sid)))
        wanted = [(r.seq, kind_of(r.event)) for r in store.read(sid, kinds=FACT_KINDS)]
    assert "session_started" in {k for _, k in wanted}
    raw = sqlite3.connect(path, isolation_level=None)
    try:  # as migration 6 left it
        raw.execute("DROP TRIGGER kind_index_no_delete")
        raw.execute("DELETE FROM kind_index WHERE kind = 'session_started'")
        raw.execute("DELETE FROM bubu_migrations WHERE version = 7")
    finally:
        raw.close()
    with SQLiteStore(path, readonly=True) as store:
        assert [(r.seq, kind_of(r.event)) for r in store.read(sid, kinds=FACT_KINDS)] == wanted
        assert store.verify(sid).ok, store.verify(sid).problem
    with SQLiteStore(path) as store:
        assert 7 in [v for v, _ in store.migrations()]
        assert [(r.seq, kind_of(r.event)) for r in store.read(sid, kinds=FACT_KINDS)] == wanted
        assert store.verify(sid).ok, store.verify(sid).problem
    raw = sqlite3.connect(path)
    try:
        indexed = raw.execute("SELECT count(*) FROM kind_index WHERE kind = 'session_started'")
        assert indexed.fetchone()[0] >= 1
    finally:
        raw.close()
