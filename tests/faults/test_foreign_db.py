"""A `--db` that is not a Bubu log is refused untouched by every command; a read-only command never
creates or migrates a database; a log on a read-only mount can still be inspected.

Real SQLite files, real `bubu` processes, a real read-only bind mount."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu.log.migrations import SQLITE_MIGRATIONS

from .helpers import assert_kept, bubu, error_line, read, seed, sha, snapshot, write_script

LATEST = max(m.version for m in SQLITE_MIGRATIONS)
"""The newest schema migration of this Bubu."""


def _foreign(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE contacts(name TEXT, phone TEXT)")
    db.execute("INSERT INTO contacts VALUES ('Ada', '555')")
    db.commit()
    db.close()
    return path


def _commands(tmp_path: Path) -> list[list[str]]:
    script = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    export = tmp_path / "nothing.jsonl"
    export.write_bytes(b"")
    return [
        ["sessions"],
        ["verify"],
        ["show", "ses_x"],
        ["status", "ses_x"],
        ["log", "ses_x"],
        ["export", "ses_x"],
        ["context", "ses_x"],
        ["recover"],
        ["stop", "ses_x"],
        ["import", str(export)],
        ["fork", "ses_x", "--at", "1"],
        ["compact", "ses_x"],
        ["run", "a task", "-w", str(tmp_path), "-m", f"scripted:{script}"],
    ]


@pytest.mark.slow
def test_a_foreign_sqlite_file_is_refused_untouched_by_every_command(tmp_path: Path) -> None:
    db = _foreign(tmp_path / "contacts.db")
    before, mtime = sha(db), os.stat(db).st_mtime_ns
    for args in _commands(tmp_path):
        done = bubu(db, *args)
        assert done.returncode != 0, args
        assert error_line(done.stderr).endswith(
            f"{db} is a SQLite database but not a Bubu log (its tables: contacts; no "
            "bubu_migrations table); Bubu left it untouched: point --db at a Bubu log or a new path"
        ), (args, done.stderr)
    assert sha(db) == before
    assert os.stat(db).st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("contacts")) == [
        "contacts.db"
    ], "no -wal or -shm was made"
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    raw.close()


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    db.write_bytes(b"my notes, not a database\n" * 100)
    before = sha(db)
    for args in (["sessions"], ["recover"]):
        done = bubu(db, *args)
        assert done.returncode == 1
        assert error_line(done.stderr) == (
            f"bubu: error: {db} is not a readable Bubu database (file is not a database); "
            "restore it from a backup or point --db elsewhere"
        )
    assert sha(db) == before


def test_a_read_only_command_creates_no_database(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    for args in (["sessions"], ["verify"], ["show", "ses_x"], ["status", "ses_x"]):
        bubu(db, *args)
        assert not db.exists(), args
    done = bubu(db, "sessions")
    assert done.returncode == 0
    assert "no sessions yet" in done.stdout


def test_a_read_only_command_does_not_migrate_an_older_log(tmp_path: Path) -> None:
    db, _, ids = seed(tmp_path, 1)
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER IF EXISTS bubu_migrations_no_delete")
    raw.execute("DELETE FROM bubu_migrations WHERE version = 3")
    raw.commit()
    raw.close()
    before = sha(db)
    done = bubu(db, "sessions")
    assert done.returncode == 1
    assert error_line(done.stderr) == (
        f"bubu: error: the database {db} was written by an older Bubu (migration 2 of {LATEST}) "
        "and this command only reads; `bubu recover` upgrades it"
    )
    assert sha(db) == before
    del ids


@contextlib.contextmanager
def _read_only_mount(source: Path, target: Path) -> Iterator[Path]:
    target.mkdir()
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


@pytest.mark.heavy
def test_a_log_on_a_read_only_mount_can_be_inspected(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    db, _, ids = seed(src, 2)
    before = snapshot(db, ids[0])
    with _read_only_mount(src, tmp_path / "ro") as ro:
        rodb = ro / db.name
        with pytest.raises(OSError, match="Read-only file system"):
            (ro / "probe").write_bytes(b"x")
        for args in (["sessions"], ["verify"], ["show", ids[0]], ["status", ids[0]]):
            done = bubu(rodb, *args)
            assert done.returncode == 0, (args, done.stderr)
        assert ids[0] in bubu(rodb, "sessions").stdout
        assert "ok" in bubu(rodb, "verify").stdout
        script = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
        done = bubu(rodb, "run", "new", "-w", str(tmp_path), "-m", f"scripted:{script}")
        assert done.returncode == 1
        assert error_line(done.stderr) == (
            f"bubu: error: the database {rodb} is on a read-only file system; inspect it with "
            "`bubu sessions`, `show` or `verify`, or copy it to a writable disk to go on"
        )
    assert_kept(before, db)


KILLED_WRITER = """
import os, signal, sys
from bubu.events import Text, make
from bubu.log.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1])
sid = sys.argv[2]
ev = make(session=sid, role="user", author="user", ts=1, content=Text(text="only in the wal"))
store.append(sid, [ev], expect=store.head(sid).high_water, durable=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_log_with_wal_commits_on_a_read_only_mount(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    db, _, ids = seed(src, 1)
    high = len(read(db, ids[0]))
    writer = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(db), ids[0]],
        check=False,
        capture_output=True,
        timeout=60,
    )
    assert writer.returncode == -9
    assert (src / "bubu.db-wal").stat().st_size > 0
    with _read_only_mount(src, tmp_path / "ro") as ro:
        done = bubu(ro / db.name, "verify")
        assert done.returncode == 0, done.stderr
        assert f"{high + 1} events" in done.stdout, "the commit in the -wal file is read"
    (src / "bubu.db-shm").unlink()
    with _read_only_mount(src, tmp_path / "ro2") as ro:
        done = bubu(ro / db.name, "verify")
        assert done.returncode == 0, done.stderr
        assert f"{high} events" in done.stdout, "without its -shm file only the main file is read"
        assert (
            f"bubu: warning: {ro / db.name} is read as its main file holds it: its -wal file has "
            "commits SQLite cannot read on this read-only disk"
        ) in done.stderr
