"""A parent with two children on a PostgreSQL fleet: its worker is SIGKILLed while both children
run a command; another worker recovers the parent, whose recovery continues both children (the
children are never claimed on their own), and no command runs twice."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from bubu.engine.scope import session_facts
from bubu.engine.worker import Submission, submit
from bubu.events import TurnStarted
from bubu.log.postgres import PostgresStore
from bubu.projections.recovery import INTERRUPTED
from bubu.projections.status import fold_status
from fleet.proc import WorkerProc, wait_for

from .helpers import delegate, finished, notes, results, script

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _lines(path: Path) -> list[str]:
    return sorted(path.read_text().split()) if path.exists() else []


def _child(root: Path, mark: str, counter: Path) -> str:
    cmd = f"echo {mark} >> {counter}; sleep 60"
    return script(
        root / f"{mark}.jsonl",
        [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": cmd}}]},
            {"text": f"report of {mark}"},
        ],
    )


def test_a_killed_workers_children_continue_with_their_parent_elsewhere(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    counter = tmp_path / "counter"
    kids = {mark: _child(tmp_path, mark, counter) for mark in ("A", "B")}
    parent = script(
        tmp_path / "parent.jsonl",
        [
            {"tool_calls": [delegate("do A", model=kids["A"]), delegate("do B", model=kids["B"])]},
            {"text": "both done"},
        ],
    )
    info = submit(
        pg, task="split it", workspace=ws, model=parent, policy=Submission(yes=True, sandbox="off")
    )
    args = (
        "--lease-ttl",
        "1",
        "--poll",
        "0.1",
        "--max-sandbox",
        "off",
        "--allow-yes",
        "--concurrency",
        "2",
    )
    first = WorkerProc(tmp_path, url, *args, name="first")
    try:
        wait_for(lambda: _lines(counter) == ["A", "B"], "both children's commands")
        first.send(signal.SIGKILL)
        assert first.wait() == -signal.SIGKILL
    finally:
        first.kill()
    second = WorkerProc(tmp_path, url, *args, name="second")
    try:
        wait_for(lambda: fold_status(pg.read(info.id)).state == "completed", "the parent", 90)
        second.send(signal.SIGTERM)
        assert second.wait() == 0
    finally:
        second.kill()

    logged = first.lines() + second.lines()
    assert _lines(counter) == ["A", "B"]  # nothing done twice
    recs = pg.read(info.id)
    got = results(recs)
    assert sorted(g.result.splitlines()[-1] for g in got) == ["report of A", "report of B"]
    children = {f.child for f in finished(recs)}
    assert len(children) == 2
    assert len(pg.sessions()) == 3
    for kid in children:
        assert session_facts(pg, pg.session(kid)).parent == info.id
        child = pg.read(kid)
        assert len(notes(child, TurnStarted)) == 1
        assert fold_status(child).state == "completed"
        (cmd,) = results(child, "run_command")
        assert cmd.result.startswith(INTERRUPTED)  # killed mid-command: never re-run
        assert pg.verify(kid).ok
        # A worker that claimed a child on its own put it off, it never ran it.
        assert all("sub-agent of" in ln for ln in logged if ln.startswith(f"finish {kid}"))
