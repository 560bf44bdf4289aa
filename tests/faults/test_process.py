"""Process faults: SIGTERM during a tool, a runner frozen (SIGSTOP) past its lease and thawed after
another took over, two CLIs on one session, SIGKILL during an import.

Real `bubu` processes, real signals, real SQLite files.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bubu import clock
from bubu.events import Text, make
from bubu.log.sqlite import SQLiteStore
from bubu.log.transfer import export_lines

from .helpers import (
    Snapshot,
    assert_kept,
    bubu,
    bubu_json,
    call,
    error_line,
    finish,
    kinds,
    only_session,
    read,
    results,
    snapshot,
    start_bubu,
    turn_end,
    wait_for,
    write_script,
)

# A command that says it started and then waits for the test to let it go (at most 30 s, so a
# failing test never leaves it behind).
GATED = (
    "echo $$ > started; for _ in $(seq 1500); do [ -e go ] && break; sleep 0.02; done; "
    "echo released"
)


def project(tmp_path: Path, command: str) -> tuple[Path, Path, Path]:
    """A workspace and a script whose first step runs `command`; (db, ws, script)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    script = write_script(
        tmp_path / "s.jsonl",
        [{"tool_calls": [call("run_command", command=command)]}, {"text": "All done."}],
    )
    return tmp_path / "bubu.db", ws, script


def pid_alive(pid: int) -> bool:
    """True while `pid` is a live (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


# ---- SIGTERM during a tool ---------------------------------------------------------------------


@pytest.mark.heavy
def test_sigterm_during_a_tool_suspends_in_order_and_resume_continues(tmp_path: Path) -> None:
    db, ws, script = project(tmp_path, GATED)
    proc = start_bubu(
        db,
        "run",
        "wait for it",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        "--sandbox",
        "off",
    )
    started = ws / "started"
    wait_for(lambda: started.exists() and started.read_text().strip().isdigit(), "the command")
    command_pid = int(started.read_text())
    before = snapshot(db)
    assert kinds(read(db))[-1] == "tool_dispatch"

    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == 4, out + err
    assert "● turn suspended: suspended by an orderly shutdown" in out
    assert err == ""
    assert not pid_alive(command_pid), "the command's process group was stopped"
    records = read(db)
    assert kinds(records)[before.high_water :] == ["function_response", "turn_ended"]
    assert results(records)[-1].is_error
    # The command was cut off by the shutdown: the model is told so when the turn resumes.
    assert results(records)[-1].result == (
        "(no output)\nstopped by an orderly shutdown of Bubu (SIGTERM); the command and its "
        "processes were killed"
    )
    assert turn_end(records).reason == "suspended"
    suspended = assert_kept(before, db)

    resumed = bubu(db, "resume", only_session(db))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "All done." in resumed.stdout
    records = read(db)
    assert kinds(records)[suspended.high_water :] == [
        "turn_started",
        "run_started",
        "model_request",
        "text",
        "turn_ended",
    ]
    assert turn_end(records).reason == "completed"
    assert_kept(suspended, db)


# ---- bubu stop from another process ------------------------------------------------------------


@pytest.mark.heavy
def test_bubu_stop_stops_a_turn_running_in_another_process(tmp_path: Path) -> None:
    db, ws, script = project(tmp_path, GATED)
    proc = start_bubu(
        db,
        "run",
        "wait for it",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        "--sandbox",
        "off",
    )
    started = ws / "started"
    wait_for(lambda: started.exists() and started.read_text().strip().isdigit(), "the command")
    command_pid = int(started.read_text())
    session = only_session(db)

    stop = bubu(db, "stop", session)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert f"to stop session {session}" in stop.stdout
    assert stop.stdout.splitlines()[-1] == "● turn stopped: stopped by the user"
    code, out, err = finish(proc)
    assert code == 3, out + err  # as Ctrl-C would end it
    assert "● turn stopped: stopped by the user" in out
    assert not pid_alive(command_pid), "the command's process group was stopped"
    records = read(db)
    assert turn_end(records).reason == "stopped"
    assert results(records)[-1].is_error

    again = bubu(db, "stop", session)
    assert again.returncode == 2
    assert error_line(again.stderr) == (
        f"bubu: error: nothing is running session {session}; its turn is stopped"
    )
    resumed = bubu(db, "resume", session)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "All done." in resumed.stdout


@pytest.mark.heavy
def test_bubu_stop_on_a_crashed_turn_says_nobody_runs_it(tmp_path: Path) -> None:
    db, ws, script = project(tmp_path, "echo hi")
    run = bubu(
        db,
        "run",
        "crash",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        env={"BUBU_FAILPOINT": "mid_tool"},
    )
    assert run.returncode == -9, run.stdout + run.stderr
    session = only_session(db)
    before = snapshot(db)
    stop = bubu(db, "stop", session, "--wait", "5")
    assert stop.returncode == 2, stop.stdout + stop.stderr
    assert error_line(stop.stderr) == (
        f"bubu: error: nothing is running session {session}; its turn is open (its runner is "
        "gone: `bubu recover` continues it)"
    )
    assert_kept(before, db)


# ---- SIGSTOP past the lease, SIGCONT after a takeover ------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Takeover:
    """A runner frozen past its lease, the runner that took over, and the thawed one's exit."""

    session: str
    stale_run: str
    taken_at: int
    after_takeover: Snapshot
    code: int
    out: str
    err: str
    db: Path


@pytest.fixture(scope="module")
def takeover(tmp_path_factory: pytest.TempPathFactory) -> Takeover:
    """A (1 s lease) is frozen with SIGSTOP mid-command; once its lease expires `bubu recover`
    takes the session over and finishes the turn; then A is thawed with SIGCONT."""
    tmp_path = tmp_path_factory.mktemp("takeover")
    db, ws, script = project(tmp_path, GATED)
    stale = start_bubu(
        db,
        "run",
        "slow",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        hooked=True,
        env={"FAULT_LEASE_TTL": "1.0"},
    )
    wait_for((ws / "started").exists, "the command to start")
    os.kill(stale.pid, signal.SIGSTOP)
    try:
        session = only_session(db)
        with SQLiteStore(db) as store:
            lease = store.current_lease(session)
            assert lease is not None
            wait_for(lambda: clock.now_ms() > lease.expires_ms + 100, "the lease to expire", 10)
            assert store.current_lease(session) == lease, "a frozen runner renews nothing"
        stale_run = read(db)[-1].event.run
        assert stale_run is not None
        rescue = bubu(db, "recover", session)
        assert rescue.returncode == 0, rescue.stdout + rescue.stderr
        after = snapshot(db)
        taken_at = next(r.seq for r in read(db) if r.event.run != stale_run and r.seq > 1)
    finally:
        (ws / "go").touch()
        os.kill(stale.pid, signal.SIGCONT)
    code, out, err = finish(stale)
    return Takeover(
        session=session,
        stale_run=stale_run,
        taken_at=taken_at,
        after_takeover=after,
        code=code,
        out=out,
        err=err,
        db=db,
    )


def test_a_thawed_runner_never_writes_after_a_takeover(takeover: Takeover) -> None:
    t = takeover
    assert t.code == 5, t.out + t.err
    records = read(t.db)
    assert_kept(t.after_takeover, t.db)
    assert len(records) == t.after_takeover.high_water, "the stale runner appended nothing"
    stale = [r.seq for r in records if r.event.run == t.stale_run]
    assert max(stale) < t.taken_at, "no event of the stale run after the takeover"
    assert kinds(records)[t.taken_at - 1 :] == [
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
    assert turn_end(records).reason == "completed"


def test_a_thawed_runner_says_why_it_stopped(takeover: Takeover) -> None:
    line = error_line(takeover.err)
    assert takeover.session in line
    assert "another" in line
    assert "lease" in line


# ---- two CLIs on one session -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Running:
    """A `bubu run` whose command waits for the test."""

    db: Path
    ws: Path
    script: Path
    session: str
    proc: subprocess.Popen[str]


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    """A session with a live runner (its command waits until the test is done), then its end."""
    db, ws, script = project(tmp_path, GATED)
    proc = start_bubu(db, "run", "first", "-w", str(ws), "-m", f"scripted:{script}", "--yes")
    try:
        wait_for((ws / "started").exists, "the command to start")
        yield Running(db=db, ws=ws, script=script, session=only_session(db), proc=proc)
    finally:
        (ws / "go").touch()
        code, out, err = finish(proc)
    assert code == 0, out + err
    records = read(db)
    assert {r.event.run for r in records} == {records[0].event.run}, "one run wrote everything"
    assert bubu_json(db, "verify", "--json")["ok"]


@pytest.mark.heavy
def test_a_second_cli_on_a_running_session_is_refused(running: Running) -> None:
    r = running
    before = snapshot(r.db)
    refusal = re.compile(
        rf"bubu: error: session {r.session} is being run by [^;]+:\d+:\w+; wait for it to finish "
        r"or stop it first$"
    )
    for args in (
        ["run", "--session", r.session, "second", "-m", f"scripted:{r.script}"],
        ["run", "-c", "-w", str(r.ws), "second", "-m", f"scripted:{r.script}"],
        ["resume", r.session],
    ):
        done = bubu(r.db, *args)
        assert done.returncode == 1, args
        assert refusal.fullmatch(error_line(done.stderr)), done.stderr
    assert snapshot(r.db) == before, "the refused CLIs wrote nothing"


def test_recover_on_a_running_session_says_it_is_running(running: Running) -> None:
    done = bubu(running.db, "recover", running.session)
    assert running.session in done.stdout + done.stderr
    assert "running" in done.stdout + done.stderr


# ---- SIGKILL during an import ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class KilledImport:
    """An import SIGKILLed while it was writing."""

    db: Path
    export: Path
    session: str
    events: int
    bystander: Snapshot


@pytest.fixture(scope="module")
def killed_import(tmp_path_factory: pytest.TempPathFactory) -> KilledImport:
    """Export a 20,000-event session; import it into a database holding another session and
    SIGKILL the import as soon as its session becomes visible to another connection."""
    tmp_path = tmp_path_factory.mktemp("import")
    source = tmp_path / "source.db"
    with SQLiteStore(source) as store:
        info = store.create_session(title="big", workspace="/w")
        for batch in range(20):
            events = [
                make(
                    session=info.id,
                    role="user",
                    author="user",
                    ts=n,
                    content=Text(text=f"event {batch}.{n} " + "z" * 200),
                )
                for n in range(1000)
            ]
            store.append(info.id, events, expect=batch * 1000)
        export = tmp_path / "big.jsonl"
        export.write_bytes(
            b"".join(line + b"\n" for line in export_lines(store, store.session(info.id)))
        )
    db = tmp_path / "bubu.db"
    with SQLiteStore(db) as store:
        other = store.create_session(title="bystander", workspace="/w")
        store.append(
            other.id,
            [
                make(
                    session=other.id, role="user", author="user", ts=1, content=Text(text="keep me")
                )
            ],
            expect=0,
        )
        bystander = snapshot(store, other.id)
    proc = start_bubu(db, "import", str(export))
    watch = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:

        def visible() -> bool:
            if proc.poll() is not None:
                return True
            try:
                row = watch.execute(
                    "SELECT count(*) FROM sessions WHERE id = ?", (info.id,)
                ).fetchone()
            except sqlite3.OperationalError:
                return False
            return bool(row[0])

        wait_for(visible, "the import to write", 60)
        proc.kill()
        proc.communicate()
    finally:
        watch.close()
    return KilledImport(db=db, export=export, session=info.id, events=20_000, bystander=bystander)


@pytest.mark.heavy
def test_sigkill_during_an_import_leaves_the_database_sound(killed_import: KilledImport) -> None:
    k = killed_import
    report = bubu_json(k.db, "verify", "--json")
    assert report["database"] == "ok"
    assert_kept(k.bystander, k.db)


@pytest.mark.heavy
def test_sigkill_during_an_import_leaves_the_session_absent_or_complete(
    killed_import: KilledImport,
) -> None:
    k = killed_import
    with SQLiteStore(k.db) as store:
        ids = {s.id: s.high_water for s in store.sessions()}
        if k.session in ids:
            # Complete: every exported event, and the import's note of where it came from.
            assert ids[k.session] == k.events + 1, "a session that exists is complete"
            assert store.verify(k.session).ok
    again = bubu(k.db, "import", str(k.export))
    if k.session in ids:
        assert again.returncode == 1
        assert error_line(again.stderr).endswith(
            f"session {k.session} already exists in this database"
        )
    else:
        assert again.returncode == 0, again.stderr
    assert (
        bubu_json(k.db, "verify", k.session, "--json")["sessions"][0]["high_water"] == k.events + 1
    )
