"""`bubu submit` and `bubu worker` as real processes; status, show and the UI on PostgreSQL."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from bubu.events import PermissionDecision, SystemNote, TurnStarted
from bubu.log.postgres import PostgresStore, WorkQueue
from bubu.projections.status import fold_status

from .checks import check_log
from .proc import BUBU, WorkerProc, bubu, bubu_json, bubu_ok, clean_env, command, write_script

pytestmark = pytest.mark.postgres


def workspace(tmp_path: Path, name: str) -> Path:
    ws = tmp_path / name
    ws.mkdir()
    return ws


def decisions(pg: PostgresStore, session: str) -> list[PermissionDecision]:
    return [
        a.permission_decision
        for r in pg.read(session)
        if (a := r.event.actions) is not None and a.permission_decision is not None
    ]


def turn_started(pg: PostgresStore, session: str) -> TurnStarted:
    (note,) = [
        c.note
        for r in pg.read(session)
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
    ]
    return note


@pytest.mark.heavy
def test_a_submitted_task_runs_on_a_worker_under_the_policy_it_was_submitted_with(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    model = write_script(
        tmp_path / "script.jsonl", [command("echo ran >> counter"), {"text": "done"}]
    )
    off = ["--sandbox", "off"]  # where commands ask; "sandboxed" needs no approval
    flags = {
        "allowed": ["--allow", "echo *", *off],
        "yes": ["--yes", *off],
        "plain": off,
        "sandboxed": [],
    }
    sessions = {}
    for name, extra in flags.items():
        ws = workspace(tmp_path, name)
        out = bubu_ok(
            tmp_path, "submit", "count once", "--db", url, "-w", str(ws), "-m", model, *extra
        )
        sessions[name] = out.strip()
    assert WorkQueue(pg).counts() == {"queued": 4}
    # A worker whose ceiling lets tasks loosen all this (the default one holds them: test_ceiling).
    worker = WorkerProc(
        tmp_path, url, "--once", "--max-sandbox", "off", "--allow-yes", "--allow-patterns"
    )
    assert worker.wait() == 0
    for name, sid in sessions.items():
        check_log(pg, sid)
        assert fold_status(pg.read(sid)).state == "completed"
        counter = tmp_path / name / "counter"
        assert (counter.read_text() if counter.exists() else "") == (
            "" if name == "plain" else "ran\n"
        )
    assert turn_started(pg, sessions["allowed"]).allow_commands == ["echo *"]
    assert decisions(pg, sessions["allowed"]) == []
    assert turn_started(pg, sessions["yes"]).yes
    assert [(d.decision, d.by) for d in decisions(pg, sessions["yes"])] == [("allow", "flag")]
    assert not turn_started(pg, sessions["plain"]).yes
    assert [(d.decision, d.by) for d in decisions(pg, sessions["plain"])] == [("deny", "nobody")]
    assert turn_started(pg, sessions["plain"]).sandbox == "off"
    assert turn_started(pg, sessions["sandboxed"]).sandbox == "workspace-write"
    assert decisions(pg, sessions["sandboxed"]) == []
    lines = worker.lines()
    for sid in sessions.values():
        assert any(f"claim {sid} new epoch=1" in ln for ln in lines), lines
        assert any(f"finish {sid} completed epoch=1" in ln for ln in lines), lines


@pytest.mark.slow
def test_status_show_sessions_verify_and_the_ui_read_a_postgresql_log(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    model = write_script(tmp_path / "script.jsonl", [{"text": "all done"}])
    ws = workspace(tmp_path, "ws")
    sid = bubu_json(
        tmp_path, "submit", "say hello", "--db", url, "-w", str(ws), "-m", model, "--json"
    )["session"]
    assert WorkerProc(tmp_path, url, "--once").wait() == 0
    status = bubu_json(tmp_path, "--db", url, "status", sid, "--json")
    assert (status["status"], status["turns"]) == ("completed", 1)
    shown = bubu_ok(tmp_path, "--db", url, "show", sid)
    assert "say hello" in shown
    assert "all done" in shown
    assert [s["id"] for s in bubu_json(tmp_path, "--db", url, "sessions", "--json")] == [sid]
    assert bubu_json(tmp_path, "--db", url, "verify", "--json")["ok"]
    ui = subprocess.Popen(
        [*BUBU, "--db", url, "ui", "--no-open", "--port", "0"],
        env=clean_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert ui.stdout is not None
        first = ui.stdout.readline()
        assert first.startswith("Bubu UI: http://"), first + (ui.stderr.read() if ui.stderr else "")
        origin, token = first.split(": ", 1)[1].strip().split("/#token=")
        with httpx.Client(
            base_url=origin, headers={"authorization": f"Bearer {token}"}, timeout=30
        ) as http:
            listing = http.get("/api/sessions")
            assert listing.status_code == 200, listing.text
            assert [s["id"] for s in listing.json()["sessions"]] == [sid]
            detail = http.get(f"/api/sessions/{sid}")
            assert detail.status_code == 200, detail.text
            assert sid in detail.text
            assert "say hello" in detail.text
    finally:
        ui.terminate()
        ui.communicate(timeout=30)


@pytest.mark.heavy
def test_submit_and_worker_refuse_a_sqlite_log(tmp_path: Path) -> None:
    db = str(tmp_path / "bubu.db")
    for args in (["submit", "x", "--db", db, "-m", "scripted:x"], ["worker", "--db", db]):
        done = bubu(tmp_path, *args)
        assert done.returncode == 2
        assert "the fleet needs a PostgreSQL log; pass --db postgresql://" in done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.heavy
def test_a_session_the_worker_cannot_run_is_put_off_not_lost(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    ws = workspace(tmp_path, "ws")
    missing = tmp_path / "no-such-script.jsonl"
    sid = bubu_ok(
        tmp_path, "submit", "x", "--db", url, "-w", str(ws), "-m", f"scripted:{missing}"
    ).strip()
    worker = WorkerProc(tmp_path, url, "--once")
    assert worker.wait() == 0
    (line,) = [ln for ln in worker.lines() if "finish" in ln]
    assert f"finish {sid} error epoch=1" in line
    assert "cannot read the script" in line
    assert "retried in 5 s" in line
    queue = WorkQueue(pg)
    assert queue.state(sid) == "queued"
    assert queue.waiting() == [sid]
    assert queue.claim("someone", 30) is None  # deferred
    assert json.loads(bubu_ok(tmp_path, "--db", url, "status", sid, "--json"))["events"] == 1


@pytest.mark.slow
def test_a_worker_leaves_an_imported_open_turn_to_the_user(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    ws = workspace(tmp_path, "ws")
    spec = write_script(tmp_path / "s.jsonl", [command("echo ran"), {"text": "done"}])
    local = tmp_path / "local.db"
    env = {**clean_env(tmp_path), "BUBU_FAILPOINT": "mid_tool"}
    crashed = subprocess.run(
        [*BUBU, "--db", str(local), "run", "x", "-w", str(ws), "-m", spec, "--yes"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert crashed.returncode == -9, crashed.stderr
    (sid,) = [s["id"] for s in bubu_json(tmp_path, "--db", str(local), "sessions", "--json")]
    export = tmp_path / "x.jsonl"
    export.write_text(bubu_ok(tmp_path, "--db", str(local), "export", sid))
    bubu_ok(tmp_path, "--db", url, "import", str(export))
    worker = WorkerProc(tmp_path, url, "--once")
    assert worker.wait() == 0
    (line,) = [ln for ln in worker.lines() if "finish" in ln]
    assert f"finish {sid} error" in line
    assert (
        f"was imported, so its unfinished turn is continued only explicitly: `bubu recover {sid}`"
        in line
    )
    assert fold_status(pg.read(sid)).state == "open"
