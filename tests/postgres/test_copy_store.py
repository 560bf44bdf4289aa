"""`bubu copy-store` between SQLite and PostgreSQL, both ways, verifying both ends."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result

import bubu.cli.storecmds  # registers copy-store (until app.py lists the module)
from bubu.cli.app import cli
from bubu.log import codec
from bubu.log.postgres import PostgresStore
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store

from .samples import BLOB, filled

pytestmark = pytest.mark.postgres

assert bubu.cli.storecmds.copy_store_cmd.name == "copy-store"


def copy(*args: str) -> Result:
    """Run `bubu copy-store ARGS` in-process."""
    return CliRunner().invoke(cli, ["copy-store", *args], catch_exceptions=False)


def two_sessions(store: Store) -> list[str]:
    """A session with a blob, then an empty one; their ids, oldest first."""
    full = filled(store, "with a blob")
    empty = store.create_session(title="empty", workspace="/w").id
    return [full, empty]


def same_log(a: Store, b: Store, sid: str) -> None:
    """`sid` holds the same bytes, hashes, blobs and session row in both stores."""
    assert a.head(sid) == b.head(sid)
    assert [(r.seq, r.hash, codec.encode(r.event)) for r in a.read(sid)] == [
        (r.seq, r.hash, codec.encode(r.event)) for r in b.read(sid)
    ]
    ia, ib = a.session(sid), b.session(sid)
    assert (ia.title, ia.workspace, ia.model, ia.high_water, ia.last_ms) == (
        ib.title,
        ib.workspace,
        ib.model,
        ib.high_water,
        ib.last_ms,
    )
    assert b.verify(sid).ok


def test_sqlite_to_postgres_and_back_keeps_every_byte(tmp_path: Path, pg_url: str) -> None:
    first = tmp_path / "first.db"
    with SQLiteStore(first) as src:
        sids = two_sessions(src)
    there = copy(str(first), pg_url, "--json")
    assert there.exit_code == 0, there.output
    report = json.loads(there.stdout)
    assert report["ok"] is True
    assert [(s["session"], s["result"]) for s in report["sessions"]] == [
        (sid, "copied") for sid in sids
    ]
    back = tmp_path / "back.db"
    assert copy(pg_url, str(back)).exit_code == 0
    with SQLiteStore(first) as a, PostgresStore(pg_url) as b, SQLiteStore(back) as c:
        assert [s["digest"] for s in report["sessions"]] == [a.head(sid).digest for sid in sids]
        for sid in sids:
            same_log(a, b, sid)
            same_log(b, c, sid)
        assert c.blob(codec.sha256_hex(BLOB)) == BLOB
        assert [s.id for s in c.sessions()] == [s.id for s in a.sessions()]


def test_sessions_already_in_dst_are_skipped_and_the_exit_says_so(
    tmp_path: Path, pg_url: str
) -> None:
    src = tmp_path / "src.db"
    with SQLiteStore(src) as store:
        sids = two_sessions(store)
    assert copy(str(src), pg_url).exit_code == 0
    with SQLiteStore(src) as store:
        newer = filled(store, "added later")
    again = copy(str(src), pg_url)
    assert again.exit_code == 1
    lines = again.stdout.splitlines()
    assert lines[:2] == [f"skipped  {sid}  it already exists in DST" for sid in sids]
    assert lines[2].startswith(f"copied   {newer}  5 events  ")
    assert again.stderr == "bubu: error: 2 of 3 sessions were not copied (see above)\n"
    with PostgresStore(pg_url) as dst:
        assert len(dst.sessions()) == 3


def test_only_the_named_sessions_are_copied(tmp_path: Path, pg_url: str) -> None:
    src = tmp_path / "src.db"
    with SQLiteStore(src) as store:
        full, _ = two_sessions(store)
    result = copy(str(src), pg_url, "--session", full[:-2], "-s", "ses_nope", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert [(s["session"], s["result"]) for s in report["sessions"]] == [
        (full, "copied"),
        ("ses_nope", "refused"),
    ]
    with PostgresStore(pg_url) as dst:
        assert [s.id for s in dst.sessions()] == [full]


def test_a_tampered_sqlite_source_is_refused(tmp_path: Path, pg_url: str) -> None:
    src = tmp_path / "src.db"
    with SQLiteStore(src) as store:
        bad, good = filled(store, "tampered"), filled(store, "intact")
    db = sqlite3.connect(src, isolation_level=None)
    db.execute("DROP TRIGGER events_no_update")
    db.execute(
        "UPDATE events SET payload = "
        "CAST(replace(CAST(payload AS TEXT), '\"m1\"', '\"m9\"') AS BLOB)"
        " WHERE seq = 2 AND sid = (SELECT sid FROM sessions WHERE id = ?)",
        (bad,),
    )
    db.close()
    result = copy(str(src), pg_url, "--json")
    assert result.exit_code == 1
    by_id = {s["session"]: s for s in json.loads(result.stdout)["sessions"]}
    assert by_id[bad]["result"] == "refused"
    assert by_id[bad]["reason"].startswith("it does not verify in SRC at seq 2")
    assert by_id[good]["result"] == "copied"
    with PostgresStore(pg_url) as dst:
        assert [s.id for s in dst.sessions()] == [good]


def test_a_tampered_postgres_source_is_refused(tmp_path: Path, pg: PostgresStore) -> None:
    bad = filled(pg, "tampered")
    with psycopg.connect(pg.target.conninfo, autocommit=True) as raw:
        # Only a superuser can do this: switch the triggers off for this connection.
        raw.execute("SET session_replication_role = replica")
        raw.execute(
            f'UPDATE "{pg.schema}".events SET payload = convert_to(replace(convert_from(payload, '
            "'UTF8'), '\"m0\"', '\"m7\"'), 'UTF8') WHERE seq = 1"
        )
    dst = tmp_path / "dst.db"
    result = copy(f"{pg.url}?schema={pg.schema}", str(dst))
    assert result.exit_code == 1
    assert result.stdout.startswith(f"refused  {bad}  it does not verify in SRC at seq 1: ")
    with SQLiteStore(dst) as store:
        assert store.sessions() == []


def test_a_missing_source_is_not_created(tmp_path: Path, pg_url: str) -> None:
    missing = tmp_path / "nope.db"
    result = copy(str(missing), pg_url)
    assert result.exit_code == 1
    assert (
        result.stderr == f"bubu: error: the source database {missing} does not exist; check SRC\n"
    )
    assert not missing.exists()
