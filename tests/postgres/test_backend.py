"""What only the PostgreSQL backend does: rules enforced by the server, the server's clock,
migrations recorded in the schema, and errors a user can read."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import psycopg
import pytest

from bubu import clock
from bubu.errors import LeaseError, NewerLogError, StorageError
from bubu.events import Text, make
from bubu.log import codec, open_store
from bubu.log.postgres import PG_MIGRATIONS, PostgresStore, split_url
from pgserver import PG_URL

from .samples import BLOB, filled

pytestmark = pytest.mark.postgres

Raw = psycopg.Connection[tuple[object, ...]]


# -- rules the server enforces on any connection ------------------------------------------------


def test_updates_and_deletes_are_refused_even_when_they_match_nothing(
    pg: PostgresStore, raw: Raw
) -> None:
    filled(pg)
    for stmt in (
        "UPDATE events SET kind = 'x' WHERE false",
        "DELETE FROM events WHERE false",
        "DELETE FROM blobs WHERE false",
        "TRUNCATE blobs",
    ):
        with pytest.raises(psycopg.errors.IntegrityError, match="append-only"):
            raw.execute(stmt)


def test_an_insert_must_continue_the_chain_and_then_moves_the_head(
    pg: PostgresStore, raw: Raw
) -> None:
    sid = filled(pg)
    head = pg.head(sid)
    ev = make(session=sid, role="user", author="user", ts=1, content=Text(text="by hand"))
    payload = codec.encode(ev)
    insert = (
        "INSERT INTO events(sid, seq, kind, payload, hash) "
        "SELECT sid, %s, 'text', %s, %s FROM sessions WHERE id = %s"
    )
    with pytest.raises(psycopg.errors.IntegrityError, match="does not chain"):
        raw.execute(insert, [head.high_water + 1, payload, bytes(32), sid])
    good = codec.chain(bytes.fromhex(head.digest), payload)
    raw.execute(insert, [head.high_water + 1, payload, good, sid])
    assert pg.head(sid).high_water == head.high_water + 1
    assert pg.head(sid).digest == good.hex()
    assert pg.verify(sid).ok


def test_a_session_head_cannot_be_moved_by_hand(pg: PostgresStore, raw: Raw) -> None:
    sid = filled(pg)
    with pytest.raises(psycopg.errors.IntegrityError, match="only by appending"):
        raw.execute("UPDATE sessions SET high_water = 1 WHERE id = %s", [sid])
    with pytest.raises(psycopg.errors.IntegrityError, match="empty log"):
        raw.execute(
            "INSERT INTO sessions(id, title, workspace, created_ms, high_water) "
            "VALUES ('ses_fake', 't', '/w', 0, 3)"
        )
    raw.execute("UPDATE sessions SET title = 'renamed' WHERE id = %s", [sid])
    assert pg.session(sid).title == "renamed"


def test_a_blob_must_hash_to_its_name(pg: PostgresStore, raw: Raw) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        raw.execute(
            "INSERT INTO blobs(sha256, size, data) VALUES (%s, %s, %s)",
            [codec.sha256_hex(BLOB), 1, b"x"],
        )


def test_tampering_past_the_triggers_is_found(pg: PostgresStore, raw: Raw) -> None:
    sid = filled(pg)
    assert pg.integrity_check() == "ok"
    # A superuser can switch triggers off; verify and the integrity check still notice.
    raw.execute("ALTER TABLE events DISABLE TRIGGER events_immutable")
    assert "events_immutable on events is disabled" in pg.integrity_check()
    raw.execute(
        "UPDATE events SET payload = convert_to(replace(convert_from(payload, 'UTF8'), "
        "'\"m1\"', '\"m9\"'), 'UTF8') WHERE seq = 2"
    )
    report = pg.verify(sid)
    assert (report.ok, report.first_bad_seq) == (False, 2)
    assert "does not match its content" in (report.problem or "")
    raw.execute("DELETE FROM events WHERE seq = 5")
    assert "disagree with their events" in pg.integrity_check()


# -- leases and the server's clock ------------------------------------------------------------


def test_lease_times_come_from_the_server_clock(
    pg: PostgresStore, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = filled(pg)
    # Skew this process's clock by a day: leases must not notice.
    day = 86_400_000
    monkeypatch.setattr(clock, "now_ms", lambda: time.time_ns() // 1_000_000 - day)
    monkeypatch.setattr(time, "time", lambda: time.time_ns() / 1e9 + day / 1000)
    before = pg.now_ms()
    lease = pg.acquire_lease(sid, "me", 30)
    after = pg.now_ms()
    assert before + 30_000 <= lease.expires_ms <= after + 30_000
    renewed = pg.renew_lease(lease, 60)
    assert after + 60_000 <= renewed.expires_ms <= pg.now_ms() + 60_000
    # Expiry is judged by the server: 1 ms in its past is expired, a minute ahead is live.
    raw.execute(
        "UPDATE leases SET expires_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1"
    )
    assert pg.acquire_lease(sid, "other", 30).epoch == 2
    with pytest.raises(LeaseError, match="being run by other"):
        pg.acquire_lease(sid, "third", 30)


def test_now_ms_is_the_server_clock(pg: PostgresStore, raw: Raw) -> None:
    row = raw.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint").fetchone()
    assert row is not None
    assert abs(pg.now_ms() - int(str(row[0]))) < 60_000


# -- migrations -------------------------------------------------------------------------------


def test_migrations_are_recorded_once(pg: PostgresStore) -> None:
    expected = [(m.version, m.name) for m in PG_MIGRATIONS]
    assert pg.migrations() == expected
    with PostgresStore(PG_URL, schema=pg.schema) as again:
        assert isinstance(again, PostgresStore)
        assert again.migrations() == expected


def test_a_schema_from_before_stop_requests_keeps_its_leases(pg: PostgresStore, raw: Raw) -> None:
    sid = filled(pg)
    held = pg.acquire_lease(sid, "runner-a", 60)
    raw.execute("ALTER TABLE leases DROP COLUMN stop_requested")  # as migration 2 left it
    raw.execute("DELETE FROM bubu_migrations WHERE version = 3")
    with PostgresStore(PG_URL, schema=pg.schema) as again:
        assert isinstance(again, PostgresStore)
        assert [v for v, _ in again.migrations()] == [m.version for m in PG_MIGRATIONS]
        assert again.current_lease(sid) == held
        asked = again.request_stop(sid)
        assert asked is not None
        assert (asked.epoch, asked.stop_requested) == (held.epoch, True)


def test_a_schema_from_a_newer_bubu_is_refused(pg: PostgresStore, raw: Raw) -> None:
    raw.execute("INSERT INTO bubu_migrations(version, name) VALUES (999, 'from the future')")
    with pytest.raises(NewerLogError, match=r"newer Bubu \(migration 999.*upgrade Bubu"):
        PostgresStore(PG_URL, schema=pg.schema)


def test_a_schema_named_in_the_url_is_used(pg_url: str, schema: str) -> None:
    assert split_url(pg_url) == (PG_URL, schema)
    store = open_store(pg_url)
    try:
        assert isinstance(store, PostgresStore)
        assert store.schema == schema
        sid = filled(store)
    finally:
        store.close()
    with PostgresStore(PG_URL, schema=schema) as same:
        assert [s.id for s in same.sessions()] == [sid]


def test_two_stores_opening_a_fresh_schema_at_once_both_work(schema: str) -> None:
    code = (
        "import sys; from bubu.log.postgres import PostgresStore; "
        "PostgresStore(sys.argv[1], schema=sys.argv[2]).close()"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, PG_URL, schema]) for _ in range(3)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    with PostgresStore(PG_URL, schema=schema) as store:
        assert isinstance(store, PostgresStore)
        assert len(store.migrations()) == len(PG_MIGRATIONS)


# -- errors a user can hit --------------------------------------------------------------------


def test_an_unreachable_server_is_one_sentence() -> None:
    with pytest.raises(StorageError) as e:
        PostgresStore("postgresql://postgres@127.0.0.1:1/test")
    assert str(e.value) == (
        "cannot reach PostgreSQL at postgres@127.0.0.1:1/test; is the server running?"
    )


def test_the_cli_reports_an_unreachable_server_without_a_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from bubu.cli import main; main()", "sessions"],
        env={"BUBU_DB": "postgresql://postgres@127.0.0.1:1/test", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        "bubu: error: cannot reach PostgreSQL at postgres@127.0.0.1:1/test; "
        "is the server running?\n"
    )


def test_a_missing_database_and_a_bad_user_say_so() -> None:
    missing = f"nodb_{uuid.uuid4().hex[:8]}"
    with pytest.raises(StorageError, match=f"the database {missing} does not exist.*createdb"):
        PostgresStore(f"postgresql://postgres@127.0.0.1:5432/{missing}")
    with pytest.raises(StorageError, match="refused the login"):
        PostgresStore("postgresql://no_such_role@127.0.0.1:5432/test")


def test_a_lost_connection_fails_one_call_and_the_next_reconnects(schema: str, raw: Raw) -> None:
    name = f"bubu_{uuid.uuid4().hex[:8]}"
    store = PostgresStore(f"{PG_URL}?application_name={name}", schema=schema)
    try:
        sid = filled(store)
        raw.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            [name],
        )
        with pytest.raises(StorageError, match=r"lost the connection.*re-read the log"):
            store.head(sid)
        assert store.head(sid).high_water == 5
        assert store.verify(sid).ok
    finally:
        store.close()
