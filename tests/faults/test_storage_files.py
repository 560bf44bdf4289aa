"""Storage faults on the files themselves: a deleted or truncated WAL, a read-only database file,
a database directory that does not exist, a database from a newer Bubu.

Real SQLite files and real `bubu` processes; each row checks the line the person sees and that
what was committed is still there byte for byte (or, for a deleted WAL, exactly what is lost).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bubu.events import Text, make
from bubu.log import codec
from bubu.log.sqlite import SQLiteStore

from .helpers import (
    KNOWN,
    assert_kept,
    bubu,
    bubu_json,
    drop_root_file_powers,
    error_line,
    seed,
    sha,
    snapshot,
    write_script,
)

# ---- the write-ahead log is deleted or cut short -----------------------------------------------

WRITER = """
import os, signal, sys
from bubu.events import Text, make
from bubu.log.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1])
sid = store.create_session(title="wal", workspace="/w").id
head = 0
for n in range(100):
    ev = make(
        session=sid, role="user", author="user", ts=n, content=Text(text=f"event {n} " + "w" * 300)
    )
    head = store.append(sid, [ev], expect=head, durable=True).high_water
    if n == 49:
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    print(head, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture
def killed_writer(tmp_path: Path) -> tuple[Path, list[tuple[int, bytes, bytes]]]:
    """A database whose writer was SIGKILLed: events 1–50 are in the main file (checkpointed),
    51–100 were committed (acknowledged) but exist only in the -wal file."""
    db = tmp_path / "bubu.db"
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.split() == [str(n) for n in range(1, 101)], "100 commits acknowledged"
    wal = Path(f"{db}-wal")
    assert wal.stat().st_size > 50 * 300, "the last 50 commits live in the WAL"
    # What was acknowledged, read through a copy so the original WAL is left as the crash left it.
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    Path(f"{copy}-wal").write_bytes(wal.read_bytes())
    with SQLiteStore(copy) as store:
        (info,) = store.sessions()
        rows = [(int(s), bytes(h), bytes(p)) for s, h, p in store.raw(info.id)]
    assert len(rows) == 100
    return db, rows


def _after_wal_damage(db: Path) -> list[tuple[int, bytes, bytes]]:
    report = bubu_json(db, "verify", "--json")
    assert report["ok"], report
    assert report["database"] == "ok", report
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        return [(int(s), bytes(h), bytes(p)) for s, h, p in store.raw(info.id)]


def test_a_deleted_wal_loses_exactly_the_commits_it_held(
    killed_writer: tuple[Path, list[tuple[int, bytes, bytes]]],
) -> None:
    db, acknowledged = killed_writer
    Path(f"{db}-wal").unlink()
    remaining = _after_wal_damage(db)
    # The commits after the last checkpoint were in the deleted file: they are gone, and nothing
    # else. What remains is an exact prefix, its chain intact; appends continue from it.
    assert remaining == acknowledged[:50]
    _appends_continue(db, 50)


def _appends_continue(db: Path, high_water: int) -> None:
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        ev = make(session=info.id, role="user", author="user", ts=1, content=Text(text="after"))
        head = store.append(info.id, [ev], expect=high_water)
        assert head.high_water == high_water + 1
        assert store.verify(info.id).ok


@pytest.mark.parametrize("keep", [0.25, 0.5, 0.75])
def test_a_truncated_wal_keeps_an_exact_prefix(
    killed_writer: tuple[Path, list[tuple[int, bytes, bytes]]], keep: float
) -> None:
    db, acknowledged = killed_writer
    wal = Path(f"{db}-wal")
    os.truncate(wal, int(wal.stat().st_size * keep))
    remaining = _after_wal_damage(db)
    # SQLite replays the WAL up to its last whole commit before the cut: the checkpointed 50 plus
    # some of the rest, always a prefix of what was acknowledged, the chain never broken.
    assert 50 <= len(remaining) < 100
    assert remaining == acknowledged[: len(remaining)]
    _appends_continue(db, len(remaining))


# ---- a read-only database file -----------------------------------------------------------------


@pytest.fixture
def read_only(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A seeded database whose file is mode 0444 (binding root too, see `obey_permissions`)."""
    db, ws, ids = seed(tmp_path, 2)
    db.chmod(0o444)
    return db, ws, ids


@pytest.mark.heavy
def test_a_read_only_database_can_be_inspected(read_only: tuple[Path, Path, list[str]]) -> None:
    db, _, ids = read_only
    before = snapshot(db, ids[0])
    for args in (
        ["sessions"],
        ["verify"],
        ["show", ids[0]],
        ["status", ids[0]],
        ["export", ids[0]],
    ):
        done = bubu(db, *args, obey_permissions=True)
        assert done.returncode == 0, (args, done.stderr)
    assert_kept(before, db)


def test_a_new_session_in_a_read_only_database_is_refused(
    read_only: tuple[Path, Path, list[str]], tmp_path: Path
) -> None:
    db, ws, _ = read_only
    script = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    done = bubu(
        db, "run", "new task", "-w", str(ws), "-m", f"scripted:{script}", obey_permissions=True
    )
    assert done.returncode == 1
    assert error_line(done.stderr) == (
        f"bubu: error: the database {db} is read-only (attempt to write a readonly database); "
        "fix its permissions"
    )


def test_continuing_a_session_in_a_read_only_database_is_refused(
    read_only: tuple[Path, Path, list[str]], tmp_path: Path
) -> None:
    db, _ws, ids = read_only
    script = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bubu",
            "--db",
            str(db),
            "run",
            "--session",
            ids[0],
            "more",
            "-m",
            f"scripted:{script}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=drop_root_file_powers,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1
    assert error_line(done.stderr) == (
        f"bubu: error: the database {db} is read-only (attempt to write a readonly database); "
        "fix its permissions"
    )


# ---- a directory that does not exist -----------------------------------------------------------


def test_a_database_directory_that_does_not_exist(tmp_path: Path) -> None:
    db = tmp_path / "nowhere" / "bubu.db"
    script = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    for args in (["sessions"], ["run", "a task", "-w", str(tmp_path), "-m", f"scripted:{script}"]):
        done = bubu(db, *args)
        assert done.returncode == 1
        assert error_line(done.stderr) == (
            f"bubu: error: the directory {db.parent} for the database does not exist; "
            "create it or choose another --db"
        )
    assert not db.parent.exists(), "nothing was created"


# ---- a database from a newer Bubu --------------------------------------------------------------


def test_a_database_migrated_by_a_newer_bubu_is_refused_untouched(tmp_path: Path) -> None:
    db, _, ids = seed(tmp_path, 1)
    raw = sqlite3.connect(db)
    raw.execute("INSERT INTO bubu_migrations(version, name, applied_ms) VALUES (99, 'future', 0)")
    raw.commit()
    raw.close()
    before = sha(db)
    for args in (["sessions"], ["verify"], ["show", ids[0]]):
        done = bubu(db, *args)
        assert done.returncode == 1
        assert error_line(done.stderr) == (
            f"bubu: error: the database {db} was written by a newer Bubu (migration 99, this Bubu "
            f"knows up to {KNOWN}); upgrade Bubu to open it"
        )
    assert sha(db) == before


@pytest.mark.heavy
def test_an_event_from_a_newer_bubu_is_refused_and_nothing_is_appended(tmp_path: Path) -> None:
    db, _ws, ids = seed(tmp_path, 2)
    sid = ids[0]
    with SQLiteStore(db) as store:
        head = store.head(sid)
        payload = json.dumps(
            {
                "v": 99,
                "id": "evt_future",
                "session": sid,
                "role": "user",
                "author": "user",
                "ts": 1,
                "content": {"kind": "hologram", "text": "from the future"},
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        digest = codec.chain(bytes.fromhex(head.digest), payload)
        store._db.execute(
            "INSERT INTO events(pos, kind, payload, hash) "
            "VALUES (((SELECT sid FROM sessions WHERE id = ?) << 32) + ?, 'hologram', ?, ?)",
            (sid, head.high_water + 1, payload, digest),
        )
    before, other = snapshot(db, sid), snapshot(db, ids[1])
    seq = before.high_water
    message = (
        f"bubu: error: the event at seq {seq} was written by a newer Bubu (schema 99, this Bubu "
        "reads up to 1); upgrade Bubu to read this log"
    )
    script = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    for args in (
        ["show", sid],
        ["export", sid],
        ["resume", sid],
        ["run", "--session", sid, "more", "-m", f"scripted:{script}"],
    ):
        done = bubu(db, *args)
        assert done.returncode == 1, args
        assert error_line(done.stderr) == message, args
    done = bubu(db, "verify")
    assert done.returncode == 1
    assert f"BAD   {sid}  at seq {seq}: {message.removeprefix('bubu: error: ')}" in done.stdout
    assert snapshot(db, sid) == before, "nothing was appended after the newer event"
    assert_kept(other, db)
