"""The rewind API through Starlette's TestClient: the preview as JSON, the token guard, bad input,
a stale preview refused, a confirmed one carried out; the search with a snippet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from bubu.api import Agent
from bubu.log.sqlite import SQLiteStore
from bubu.web import create_app

from .scenarios import TOKEN

AUTH = {"authorization": f"Bearer {TOKEN}"}
BASE = "http://127.0.0.1:8642"


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[TestClient, Path, str, SQLiteStore]]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_bytes(b"alpha\n")
    script = tmp_path / "m.jsonl"
    script.write_text(
        json.dumps(
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "a.txt", "content": "ALPHA\n"}},
                    {"name": "write_file", "arguments": {"path": "n.txt", "content": "new\n"}},
                ]
            }
        )
        + "\n"
        + json.dumps({"text": "the okapi is done"})
        + "\n"
    )
    db = tmp_path / "bubu.db"
    with Agent(model=f"scripted:{script}", store=db, workspace=ws) as agent:
        sid = agent.run("write").session
    store = SQLiteStore(db)
    app = create_app(store, token=TOKEN, recover=False, workspace=str(tmp_path))
    with TestClient(app, base_url=BASE, headers=AUTH) as client:
        yield client, ws, sid, store
    store.close()


def test_the_preview_then_the_confirmed_rewind(
    setup: tuple[TestClient, Path, str, SQLiteStore],
) -> None:
    client, ws, sid, store = setup
    r = client.get(f"/api/sessions/{sid}/rewind?to=0")
    assert r.status_code == 200, r.text
    p = r.json()
    assert {f["path"]: f["action"] for f in p["files"]} == {"a.txt": "restore", "n.txt": "delete"}
    assert (ws / "a.txt").read_bytes() == b"ALPHA\n"  # a preview changes nothing
    (ws / "a.txt").write_bytes(b"by hand\n")
    stale = client.post(f"/api/sessions/{sid}/rewind", json={"to": 0, "token": p["token"]})
    assert stale.status_code == 400
    assert "changed since this preview" in stale.json()["error"]
    assert (ws / "a.txt").read_bytes() == b"by hand\n"
    p = client.get(f"/api/sessions/{sid}/rewind", params={"to": "0", "force": "a.txt"}).json()
    done = client.post(
        f"/api/sessions/{sid}/rewind", json={"to": 0, "token": p["token"], "force": ["a.txt"]}
    )
    assert done.status_code == 200, done.text
    assert store.session(done.json()["fork"]).workspace == str(ws.resolve())
    assert (ws / "a.txt").read_bytes() == b"alpha\n"
    assert not (ws / "n.txt").exists()


def test_bad_input_and_no_token(setup: tuple[TestClient, Path, str, SQLiteStore]) -> None:
    client, _, sid, _ = setup
    for query, status, said in [
        ("to=x", 400, "whole number"),
        ("", 400, "whole number"),
        ("to=2", 400, "not a turn boundary"),
        ("to=99999999999999999999", 400, "whole number"),
    ]:
        r = client.get(f"/api/sessions/{sid}/rewind?{query}")
        assert r.status_code == status, r.text
        assert said in r.json()["error"]
    assert client.get("/api/sessions/nope/rewind?to=0").status_code == 404
    bad = client.post(f"/api/sessions/{sid}/rewind", json={"to": "0"})
    assert bad.status_code == 400
    anonymous = TestClient(client.app, base_url=BASE)
    assert anonymous.get(f"/api/sessions/{sid}/rewind?to=0").status_code == 401
    assert (
        anonymous.post(f"/api/sessions/{sid}/rewind", json={"to": 0, "token": "t"}).status_code
        == 401
    )


def test_the_session_search_looks_into_the_transcript(
    setup: tuple[TestClient, Path, str, SQLiteStore],
) -> None:
    client, _, sid, _ = setup
    rows = client.get("/api/sessions", params={"q": "okapi"}).json()["sessions"]
    assert [(r["id"], r["snippet"]) for r in rows] == [(sid, "the okapi is done")]
    assert client.get("/api/sessions", params={"q": 'okapi NEAR("'}).json()["sessions"] == []
