"""Storage faults: the disk fills up, another process holds the database locked past the busy
timeout, a page is corrupted (see test_storage_files.py for the WAL, permissions and versions).

Real SQLite files and real `bubu` processes. Each row checks the one line the person sees, what the
log holds afterwards, and that every event committed before the fault is still there byte for
byte with a chain that verifies.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from bubu.engine.permissions import Policy
from bubu.engine.recovery import recover_session
from bubu.engine.session import new_session, start_turn
from bubu.errors import StorageError
from bubu.log.sqlite import SQLiteStore
from bubu.providers.scripted import ScriptedProvider

from .child import FillableStore
from .helpers import (
    FAST,
    assert_kept,
    bubu,
    call,
    error_line,
    kinds,
    make_host,
    read,
    results,
    seed,
    sha,
    snapshot,
    start_bubu,
    turn_end,
    wait_for,
    write_script,
)

# ---- the disk fills up -------------------------------------------------------------------------


@pytest.mark.heavy
def test_a_full_disk_fails_the_run_clearly_and_recovery_continues(tmp_path: Path) -> None:
    # The agent's own command fills the disk: its 20 KB result (random, so it does not compress
    # to a few bytes) cannot be written.
    ws = tmp_path / "ws"
    ws.mkdir()
    flag = tmp_path / "disk-is-full"
    fill = f"touch {flag}; head -c 15000 /dev/urandom | base64 -w 0"
    script = write_script(
        tmp_path / "s.jsonl",
        [{"tool_calls": [call("run_command", command=fill)]}, {"text": "Carrying on."}],
    )
    db = tmp_path / "bubu.db"
    done = bubu(
        db,
        "run",
        "fill the disk",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        "--sandbox",
        "off",
        hooked=True,
        env={"FAULT_DISK_FULL": str(flag)},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert error_line(done.stderr) == (
        f"bubu: error: the disk holding {db} is full (database or disk is full); "
        "free space and retry"
    )
    before = snapshot(db)
    assert kinds(read(db))[-2:] == ["permission_decision", "tool_dispatch"], (
        "the dispatch is durable"
    )

    flag.unlink()  # space was freed
    again = bubu(db, "recover")
    assert again.returncode == 0, again.stdout + again.stderr
    after = assert_kept(before, db)
    records = read(db)
    assert turn_end(records).reason == "completed"
    assert kinds(records)[before.high_water :] == [
        "run_started",
        "tool_recovery",
        "function_response",
        "recovery_notice",
        "model_request",
        "text",
        "turn_ended",
    ]
    assert results(records)[-1].result.startswith(
        "interrupted: the run that was running this call ended before its outcome could be"
    )
    assert after.high_water == len(records)


def test_a_full_disk_while_offloading_never_leaves_a_dangling_blob(tmp_path: Path) -> None:
    # 229 KB of output is offloaded as a blob; the disk has room for 20 more pages, not for the
    # blob, nor for the whole result inline: the outcome keeps the tool's own cut of the output
    # and says the rest could not be stored, no event refers to bytes that were not stored, and
    # the turn goes on.
    ws = tmp_path / "ws"
    ws.mkdir()
    flag = tmp_path / "disk-is-full"
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [call("run_command", command=f"touch {flag}; seq 1 40000")]},
            {"text": "Seen."},
        ],
    )
    with FillableStore(tmp_path / "bubu.db", flag=str(flag), room=20) as store:
        provider = ScriptedProvider(str(script))
        info = new_session(store, task="count", workspace=ws, model=provider.spec)
        policy = Policy(yes=True, sandbox="off")  # the flag is a file outside the workspace
        reason = start_turn(make_host(store, provider, policy=policy), info, "count")
        assert reason == "completed"
        assert store.verify(info.id).ok, "no dangling blob reference"
        (result,) = results(store.read(info.id))
    assert result.blob is None
    assert "could not be stored: the disk is full" in result.result
    assert result.result.startswith("1\n2\n3\n")  # the head the tool kept
    assert "40000" in result.result  # and its tail
    assert len(result.result.encode()) < 40_000  # the cut, not the 229 KB


# ---- another process holds the database locked -------------------------------------------------


@contextmanager
def holding_lock(db: Path, seconds: float) -> Iterator[subprocess.Popen[str]]:
    """A child process that takes an exclusive lock on `db` and holds it for `seconds` (or until
    the block ends, when it is killed)."""
    code = (
        "import sqlite3, sys, time\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(db), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "locked\n"
        yield child
    finally:
        child.kill()
        child.communicate()


@pytest.fixture
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> int:
    """Stores opened in this process wait 200 ms for a lock instead of 5 s."""
    monkeypatch.setattr("bubu.log.sqlite.BUSY_TIMEOUT_MS", 200)
    return 200


def test_a_lock_held_at_open_is_a_clear_error(tmp_path: Path, short_busy_timeout: int) -> None:
    db, _, _ids = seed(tmp_path, 1)
    before = snapshot(db)
    with holding_lock(db, 30), pytest.raises(StorageError) as caught:
        SQLiteStore(db)
    assert str(caught.value) == (
        f"the database {db} is locked by another process (waited 200 ms); "
        "close the other Bubu or try again"
    )
    assert_kept(before, db)


@pytest.mark.slow
def test_a_lock_held_at_open_through_the_cli(tmp_path: Path) -> None:
    db, _, ids = seed(tmp_path, 1)
    with holding_lock(db, 30):
        read = bubu(db, "sessions")  # a reader is not held up by a writer's lock (WAL)
        done = bubu(db, "dismiss", ids[0])
    assert read.returncode == 0, read.stderr
    assert ids[0] in read.stdout
    assert done.returncode == 1
    assert error_line(done.stderr) == (
        f"bubu: error: the database {db} is locked by another process (waited 5000 ms); "
        "close the other Bubu or try again"
    )


@pytest.mark.heavy
def test_a_lock_held_mid_run_fails_the_run_clearly(
    tmp_path: Path, short_busy_timeout: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashed: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)
    ws = tmp_path / "ws"
    ws.mkdir()
    script = write_script(
        tmp_path / "s.jsonl",
        [{"tool_calls": [call("run_command", command="touch started; sleep 0.5")]}, {"text": "ok"}],
    )
    db = tmp_path / "bubu.db"
    failure: list[BaseException] = []
    with SQLiteStore(db) as store:
        provider = ScriptedProvider(str(script))
        info = new_session(store, task="t", workspace=ws, model=provider.spec)
        host = make_host(
            store, provider, policy=Policy(yes=True), config=replace(FAST, lease_ttl_s=0.3)
        )

        def run() -> None:
            try:
                start_turn(host, info, "t")
            except BaseException as e:
                failure.append(e)

        runner = threading.Thread(target=run)
        runner.start()
        wait_for((ws / "started").exists, "the command to start")
        with holding_lock(db, 2.0) as holder:
            runner.join(30)
            holder.wait()
    assert not runner.is_alive()
    assert not crashed, "no thread died with a traceback"
    (err,) = failure
    assert isinstance(err, StorageError)
    assert str(err).startswith(f"the database {db} is locked by another process")
    before = snapshot(db)
    with SQLiteStore(db) as store:
        outcome = recover_session(
            make_host(store, ScriptedProvider(str(script))), store.session(info.id)
        )
        assert outcome.outcome == "completed"
    assert_kept(before, db)


@pytest.mark.slow
def test_a_lock_held_mid_run_through_the_cli(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = write_script(
        tmp_path / "s.jsonl",
        [{"tool_calls": [call("run_command", command="touch started; sleep 0.5")]}, {"text": "ok"}],
    )
    db = tmp_path / "bubu.db"
    proc = start_bubu(
        db,
        "run",
        "t",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        hooked=True,
        env={"FAULT_LEASE_TTL": "0.6"},
    )
    wait_for((ws / "started").exists, "the command to start")
    with holding_lock(db, 12):
        out, err = proc.communicate(timeout=60)
    assert "Traceback" not in out + err, err
    assert proc.returncode == 1
    assert error_line(err) == (
        f"bubu: error: the database {db} is locked by another process (waited 5000 ms); "
        "close the other Bubu or try again"
    )
    before = snapshot(db)
    assert bubu(db, "recover").returncode == 0
    assert_kept(before, db)


# ---- a corrupted page --------------------------------------------------------------------------


def test_a_silently_altered_event_is_caught_at_its_seq(tmp_path: Path) -> None:
    # Bytes of one event's text change on disk without touching the page structure: SQLite sees
    # nothing wrong; the chain names the seq, and every other session still verifies and reads.
    db, _, ids = seed(tmp_path)
    victim = ids[1]
    with SQLiteStore(db) as store:
        others = {s: snapshot(store, s) for s in ids if s != victim}
    data = bytearray(db.read_bytes())
    marker = b'"text":"task 1"'  # the user's request, seq 1 of the victim
    at = data.find(marker)
    assert at > 0
    assert data.find(marker, at + 1) == -1
    data[at + 8 : at + 12] = b"TASK"
    db.write_bytes(bytes(data))

    done = bubu(db, "verify")
    assert done.returncode == 1
    bad = [ln for ln in done.stdout.splitlines() if ln.startswith("BAD")]
    assert bad == [
        f"BAD   {victim}  at seq 1: the hash at seq 1 does not match its content "
        "(altered or damaged)"
    ]
    for sid, snap in others.items():
        assert_kept(snap, db)
        assert bubu(db, "show", sid).returncode == 0


def test_a_corrupted_page_is_reported_never_a_traceback(tmp_path: Path) -> None:
    db, _, ids = seed(tmp_path)
    with SQLiteStore(db) as store:
        (root,) = store._db.execute(
            "SELECT rootpage FROM sqlite_master WHERE name='sessions'"
        ).fetchone()
    with db.open("r+b") as f:
        f.seek((int(root) - 1) * 4096)
        f.write(random.Random(7).randbytes(4096))
    damaged = sha(db)
    message = (
        f"bubu: error: {db} is not a readable Bubu database (database disk image is malformed); "
        "restore it from a backup or point --db elsewhere"
    )
    for args in (
        ["sessions"],
        ["show", ids[0]],
        ["export", ids[0]],
        ["status", ids[0]],
        ["verify"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "bubu", "--db", str(db), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert "Traceback" not in done.stderr, (args, done.stderr)
        assert done.returncode == 1, args
        if args != ["verify"]:
            assert error_line(done.stderr) == message, args
    assert sha(db) == damaged, "nothing writes to a damaged database"
