"""The web UI's per-turn diff: what the turn opened by a request changed, from the snapshots."""

from __future__ import annotations

import json
from pathlib import Path

from starlette.testclient import TestClient

from bubu.api import Agent
from bubu.engine.permissions import Policy
from bubu.log.sqlite import SQLiteStore
from bubu.web.app import create_app

from .scenarios import TOKEN
from .test_rewind_api import AUTH, BASE


def test_a_turns_changes_and_diff(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    script = tmp_path / "s.jsonl"
    lines = [
        {"tool_calls": [{"name": "run_command", "arguments": {"command": "echo two >> a.txt"}}]},
        {"text": "done"},
    ]
    script.write_text("".join(json.dumps(line) + "\n" for line in lines))
    db = tmp_path / "bubu.db"
    with Agent(
        model=f"scripted:{script}", store=db, workspace=ws, policy=Policy(yes=True, sandbox="off")
    ) as agent:
        sid = agent.run("go").session
    assert (ws / "a.txt").read_text() == "one\ntwo\n"
    store = SQLiteStore(db)
    app = create_app(store, token=TOKEN, recover=False, workspace=str(tmp_path))
    with TestClient(app, base_url=BASE, headers=AUTH) as client:
        got = client.get(f"/api/sessions/{sid}/diff?at=1").json()
        bad = client.get(f"/api/sessions/{sid}/diff?at=x")
    store.close()
    assert [c["line"] for c in got["changes"]] == ["modified a.txt (+1 −0)"], got
    assert " one\n+two\n" in got["diff"]
    assert bad.status_code == 400
