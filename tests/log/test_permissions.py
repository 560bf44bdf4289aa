"""The log holds every message and every tool output, so only its owner may read it: `$BUBU_HOME`
is created 0700, a new database and its -wal and -shm files 0600 (whatever the umask), and an
existing database that others may read is named in one warning line, and left as it is."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import hermetic
from bubu.events import Text
from bubu.log import default_db
from bubu.log.sqlite import SQLiteStore
from conftest import EventFactory


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The umask of a user who shares everything (022 is the usual one; 0 the loosest)."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("loose_umask")
def test_a_new_home_and_log_are_their_owners_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_event: EventFactory
) -> None:
    home = tmp_path / "nested" / "home"
    monkeypatch.delenv("BUBU_DB", raising=False)
    monkeypatch.setenv("BUBU_HOME", str(home))
    db = Path(default_db())
    assert mode(home) == 0o700
    with SQLiteStore(db) as store:
        sid = store.create_session(title="t", workspace=str(tmp_path)).id
        store.append(sid, [make_event(sid, Text(text="a secret answer"))], expect=0)
        for f in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert f.exists(), f
            assert mode(f) == 0o600, f


def test_an_existing_home_keeps_its_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o750)
    monkeypatch.delenv("BUBU_DB", raising=False)
    monkeypatch.setenv("BUBU_HOME", str(home))
    default_db()
    assert mode(home) == 0o750


def test_a_log_others_may_read_gets_one_warning_line_and_keeps_its_mode(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    SQLiteStore(db).close()
    os.chmod(db, 0o644)
    # Two opens in one process (a command opens the log more than once): one line.
    code = (
        "import sys; from bubu.log.sqlite import SQLiteStore; "
        "[SQLiteStore(sys.argv[1]).close() for _ in range(2)]; "
        "SQLiteStore(sys.argv[1], readonly=True).close()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(db)],
        env=hermetic.environ("BUBU_"),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0] == (
        f"bubu: warning: the log {db} is readable by others (mode 0644), and it holds every "
        f"message and tool output; `chmod 600 {db}` makes it yours alone"
    )
    assert mode(db) == 0o644


def test_a_private_log_opens_without_a_word(tmp_path: Path) -> None:
    db = tmp_path / "mine.db"
    SQLiteStore(db).close()
    code = "import sys; from bubu.log.sqlite import SQLiteStore; SQLiteStore(sys.argv[1]).close()"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(db)],
        env=hermetic.environ("BUBU_"),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert proc.stderr == ""
