"""Three worker processes, thirty scripted sessions, one worker SIGKILLed mid-run."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from bubu.engine.worker import Submission, submit
from bubu.log.postgres import PostgresStore, WorkQueue
from bubu.projections.status import fold_status

from .checks import check_log
from .proc import WorkerProc, bubu_json, command, wait_for, write, write_script

pytestmark = pytest.mark.postgres

SESSIONS = 30
SCRIPT = [
    {"text": "first the counter", **command("echo one >> counter && sleep 0.3")},
    write("out.txt", "written\n"),
    command("echo two >> counter && sleep 0.3"),
    {"text": "done"},
]


def held_by(pg: PostgresStore, pid: int) -> set[str]:
    """Sessions with an open turn whose live lease belongs to process `pid`."""
    now = pg.now_ms()
    queue = WorkQueue(pg)
    held = set()
    for info in pg.sessions():
        lease = pg.current_lease(info.id)
        if lease is None or lease.expires_ms <= now or f":{pid}:" not in lease.owner:
            continue
        if queue.state(info.id) == "open":
            held.add(info.id)
    return held


@pytest.mark.slow
def test_a_fleet_survives_a_worker_killed_mid_run(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    model = write_script(tmp_path / "script.jsonl", SCRIPT)
    policy = Submission(allow_commands=("echo *", "sleep *"))
    sessions: dict[str, Path] = {}
    for n in range(SESSIONS):
        ws = tmp_path / f"ws{n:02}"
        ws.mkdir()
        info = submit(pg, task=f"task {n}", workspace=ws, model=model, policy=policy)
        sessions[info.id] = ws
    queue = WorkQueue(pg)
    args = ("--concurrency", "2", "--lease-ttl", "2", "--poll", "0.1")
    workers = [WorkerProc(tmp_path, url, *args, name=f"worker{i}") for i in range(3)]
    victim, survivors = workers[0], workers[1:]
    try:
        wait_for(lambda: queue.counts().get("idle", 0) >= 6, "six sessions to complete")
        # Freeze the victim so that what it holds cannot finish before the kill.
        in_flight: set[str] = set()
        while not in_flight:
            victim.send(signal.SIGSTOP)
            in_flight = held_by(pg, victim.pid)
            if not in_flight:
                victim.send(signal.SIGCONT)
                wait_for(lambda: bool(held_by(pg, victim.pid)), "the victim to hold a session")
        victim.send(signal.SIGKILL)
        assert victim.wait() == -signal.SIGKILL
        wait_for(lambda: queue.counts() == {"idle": SESSIONS}, "every session to end", 120)
        for w in survivors:
            w.send(signal.SIGTERM)
        assert [w.wait() for w in survivors] == [0, 0]
    finally:
        for w in workers:
            w.kill()

    recovered = 0
    for sid, ws in sessions.items():
        log = check_log(pg, sid)
        status = fold_status(log.records)
        assert (status.state, status.turns) == ("completed", 1), sid
        # The provable write landed, whoever ran or recovered it.
        assert (ws / "out.txt").read_text() == "written\n"
        # No side effect ran twice; every command has exactly one outcome.
        lines = (ws / "counter").read_text().splitlines() if (ws / "counter").exists() else []
        assert len(lines) == len(set(lines)), (sid, lines)
        assert set(lines) <= {"one", "two"}, (sid, lines)
        for cmd, outcome in log.commands().values():
            assert outcome is not None, (sid, cmd)
            word = cmd.split()[1]
            assert outcome != "ok" or word in lines, (sid, cmd, lines)
        pids = [r.pid for r in log.runs]
        if sid in in_flight:
            recovered += 1
            assert pids[0] == victim.pid
            assert victim.pid not in pids[1:]
            assert log.runs[1].cause == "recovery"
        else:
            assert victim.pid not in pids[1:]
    assert recovered == len(in_flight) >= 1

    verified = bubu_json(tmp_path, "--db", url, "verify", "--json")
    assert verified["database"] == "ok"
    assert verified["ok"]
    assert len(verified["sessions"]) == SESSIONS
    survivor_pids = {w.pid for w in survivors}
    for sid in sessions:
        last = check_log(pg, sid).runs[-1]
        assert last.pid in survivor_pids or last.pid == victim.pid
    for w in survivors:
        lines = w.lines()
        claims = [m[1] for ln in lines if (m := re.search(r" claim (ses_\w+) ", ln))]
        finishes = [m for ln in lines if (m := re.search(r" finish (ses_\w+) (\w+) ", ln))]
        assert claims
        assert sorted(claims) == sorted(m[1] for m in finishes)
        assert {m[2] for m in finishes} == {"completed"}, lines
    assert any(" claim " in ln for ln in victim.lines())
