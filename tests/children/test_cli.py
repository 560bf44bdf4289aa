"""The tree in `bubu sessions`, `bubu show` and `bubu status --json`; `bubu stop` of a parent
stops its running children, and the parent records that each was stopped."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from bubu.log.sqlite import SQLiteStore
from bubu.projections.status import fold_status
from engine.cli import bubu, bubu_cmd, bubu_env, bubu_json

from .helpers import delegate, script


def _sessions(db: Path) -> list[str]:
    with SQLiteStore(db) as store:
        return [s.id for s in store.sessions()]


def _state(db: Path, sid: str) -> str:
    with SQLiteStore(db) as store:
        return fold_status(store.read(sid)).state


@pytest.mark.slow
def test_stop_of_a_parent_stops_its_children_and_the_tree_is_shown(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    sleeper: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "run_command", "arguments": {"command": "sleep 30"}}]},
        {"text": "report"},
    ]
    kids = [script(tmp_path / f"{m}.jsonl", sleeper) for m in ("a", "b")]
    parent = script(
        tmp_path / "p.jsonl",
        [
            {"tool_calls": [delegate("do a", model=kids[0]), delegate("do b", model=kids[1])]},
            {"text": "went on"},
        ],
    )
    db = tmp_path / "bubu.db"
    args = ["run", "split", "-w", str(ws), "-m", parent, "--sandbox", "off", "--yes"]
    proc = subprocess.Popen(
        bubu_cmd(db, *args),
        env=bubu_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while len(_sessions(db) if db.exists() else []) < 3 or not all(
            _state(db, s) == "open" for s in _sessions(db)
        ):
            assert time.monotonic() < deadline, "the children never ran"
            time.sleep(0.1)
        time.sleep(0.5)  # into their commands
        top = [s for s in _sessions(db) if not bubu_json(db, "status", s, "--json")["parent"]]
        (sid,) = top
        running = bubu_json(db, "status", sid, "--json")
        assert [c["state"] for c in running["children"]] == ["running", "running"]
        stop = bubu(db, "stop", sid)
        assert stop.returncode == 0, stop.stderr
        assert proc.wait(timeout=60) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    status = bubu_json(db, "status", sid, "--json")
    assert status["status"] == "stopped"
    kids_json = status["children"]
    assert [c["state"] for c in kids_json] == ["stopped", "stopped"]
    for c in kids_json:
        assert _state(db, c["session"]) == "stopped"
        assert bubu_json(db, "status", c["session"], "--json")["parent"] == sid
    listing = bubu(db, "sessions").stdout.splitlines()
    assert listing[0].startswith(sid)
    assert sorted(ln.split()[1] for ln in listing[1:]) == sorted(c["session"] for c in kids_json)
    assert all(ln.startswith("└ ") for ln in listing[1:])
    shown = bubu(db, "show", sid).stdout
    assert "sub-agents: 2 (0 running)" in shown
    show_json = bubu_json(db, "show", sid, "--json")
    assert {c["session"] for c in show_json["children"]} == {c["session"] for c in kids_json}
