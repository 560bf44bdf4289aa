"""Fencing and orderly shutdown: a frozen worker whose lease was taken over never writes again;
SIGTERM hands a running turn back to the fleet after its current step."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from bubu.engine.worker import Submission, submit
from bubu.events import RecoveryNotice, SystemNote
from bubu.log.postgres import PostgresStore, WorkQueue
from bubu.projections.status import fold_status

from .checks import check_log
from .proc import WorkerProc, command, wait_for, write_script

pytestmark = pytest.mark.postgres

FAST = ("--lease-ttl", "2", "--poll", "0.1")


def queued(tmp_path: Path, pg: PostgresStore, script: list[dict[str, object]]) -> tuple[str, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    model = write_script(tmp_path / "script.jsonl", script)
    info = submit(
        pg,
        task="count",
        workspace=ws,
        model=model,
        policy=Submission(allow_commands=("echo *", "touch *", "sleep *")),
    )
    return info.id, ws


@pytest.mark.heavy
def test_a_frozen_worker_whose_lease_was_taken_over_cannot_append(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    sid, ws = queued(
        tmp_path,
        pg,
        [
            command("echo one >> counter && touch started && sleep 2.5"),
            command("echo two >> counter"),
            {"text": "done"},
        ],
    )
    frozen = WorkerProc(tmp_path, url, "--once", *FAST, name="frozen")
    taker: WorkerProc | None = None
    try:
        wait_for((ws / "started").exists, "the first command to start")
        frozen.send(signal.SIGSTOP)
        lease = pg.current_lease(sid)
        assert lease is not None
        wait_for(lambda: pg.now_ms() > lease.expires_ms, "the frozen worker's lease to expire")
        taker = WorkerProc(tmp_path, url, "--once", *FAST, name="taker")
        assert taker.wait() == 0
        assert fold_status(pg.read(sid)).state == "completed"
        before = pg.head(sid).high_water
        # On waking, the frozen worker renews its lease or commits its command's outcome (a stop
        # cancels the command and commits that outcome too): the database refuses its old epoch.
        frozen.send(signal.SIGCONT)
        assert frozen.wait() == 0
    finally:
        frozen.kill()
        if taker is not None:
            taker.kill()
    assert pg.head(sid).high_water == before
    log = check_log(pg, sid)
    first, second = log.runs
    assert (first.pid, second.pid) == (frozen.pid, taker.pid)
    assert second.epoch > first.epoch
    assert second.cause == "recovery"
    assert [ln for ln in frozen.lines() if " finish " in ln][-1].split()[3:6] == [
        "finish",
        sid,
        "lost",
    ]
    # The interrupted command was not run again; the next one ran once.
    assert (ws / "counter").read_text().splitlines() == ["one", "two"]
    outcomes = [outcome for _, outcome in log.commands().values()]
    assert outcomes == ["interrupted", "ok"]


@pytest.mark.heavy
def test_sigterm_finishes_the_current_step_and_hands_the_turn_to_another_worker(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    sid, ws = queued(
        tmp_path,
        pg,
        [
            command("echo one >> counter && touch started && sleep 1"),
            command("echo two >> counter"),
            {"text": "done"},
        ],
    )
    first = WorkerProc(tmp_path, url, *FAST, name="first")
    try:
        wait_for((ws / "started").exists, "the first command to start")
        first.send(signal.SIGTERM)
        assert first.wait() == 0
    finally:
        first.kill()
    # The step in flight finished and was recorded; the turn is open and its lease free.
    log = check_log(pg, sid)
    assert [o for _, o in log.commands().values()] == ["ok"]
    assert fold_status(log.records).state == "open"
    lease = pg.current_lease(sid)
    assert lease is not None
    assert lease.owner == ""
    assert WorkQueue(pg).waiting() == [sid]
    assert any(f"finish {sid} released" in ln for ln in first.lines())

    second = WorkerProc(tmp_path, url, "--once", *FAST, name="second")
    assert second.wait() == 0
    assert any(f"claim {sid} continue" in ln for ln in second.lines())
    log = check_log(pg, sid)
    assert fold_status(log.records).state == "completed"
    assert [(r.pid, r.cause) for r in log.runs] == [(first.pid, "new"), (second.pid, "resume")]
    assert (ws / "counter").read_text().splitlines() == ["one", "two"]
    # An orderly hand-off is not a crash: no recovery notice for the user to dismiss.
    assert not any(
        isinstance(c := r.event.content, SystemNote) and isinstance(c.note, RecoveryNotice)
        for r in log.records
    )


@pytest.mark.heavy
def test_a_second_ctrl_c_stops_at_once_and_records_what_was_cut_short(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    sid, ws = queued(
        tmp_path,
        pg,
        [
            command("echo one >> counter && touch started && sleep 30"),
            {"text": "done"},
        ],
    )
    worker = WorkerProc(tmp_path, url, *FAST, name="worker")
    try:
        wait_for((ws / "started").exists, "the command to start")
        worker.send(signal.SIGINT)
        wait_for(lambda: any("draining" in ln for ln in worker.lines()), "the worker to drain")
        worker.send(signal.SIGINT)
        assert worker.wait() == 130
    finally:
        worker.kill()
    log = check_log(pg, sid)
    # The cut-short command has an outcome (so nothing dangles), and the turn waits for the fleet.
    assert [o for _, o in log.commands().values()] == ["error"]
    assert fold_status(log.records).state == "open"
    assert WorkQueue(pg).waiting() == [sid]
    assert any(f"finish {sid} released" in ln for ln in worker.lines())
