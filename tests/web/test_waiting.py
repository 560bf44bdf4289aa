"""The web API shows a turn waiting for its provider (run by the CLI in another process), and
resumes one that gave up waiting, once the provider is back."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from bubu.log.sqlite import SQLiteStore
from bubu.web import create_app
from longrun.outage import serve_outages

from .scenarios import TOKEN, bubu, clean_env, wait_for

AUTH = {"authorization": f"Bearer {TOKEN}"}
KEY = "sk-web-outage-0123456789abcdef"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    return w


def _detail(client: TestClient, sid: str) -> dict[str, Any]:
    r = client.get(f"/api/sessions/{sid}")
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def _only(db: Path) -> str | None:
    with SQLiteStore(db) as store:
        sessions = store.sessions()
    return sessions[0].id if sessions else None


@pytest.fixture
def env() -> dict[str, str]:
    return {**clean_env(), "OPENAI_API_KEY": KEY}


@pytest.mark.slow
def test_the_page_shows_the_wait_and_resumes_a_turn_that_gave_up(
    tmp_path: Path, ws: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "bubu.db"
    with serve_outages() as server:
        server.outage(600.0, retry_after="1")
        proc = subprocess.Popen(
            bubu(
                db,
                "run",
                "say done",
                "-w",
                str(ws),
                "-m",
                "openai:gpt-outage",
                "--base-url",
                server.openai(),
                "--retry-for",
                "4s",
            ),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(lambda: db.exists() and server.refused() >= 1, 60, "a refused attempt")
            sid = _only(db)
            assert sid is not None
            with SQLiteStore(db) as store:
                app = create_app(store, token=TOKEN, recover=False, workspace=str(tmp_path))
                with TestClient(app, headers=AUTH) as client:
                    seen: dict[str, Any] = {}

                    def waiting() -> bool:
                        seen.update(_detail(client, sid))
                        return seen.get("waiting") is not None

                    wait_for(waiting, 30, "the wait on the session page")
                    w = seen["waiting"]
                    assert seen["session"]["status"] == "running"
                    assert w["attempt"] >= 2
                    assert w["next_at_ms"] >= w["since_ms"]
                    assert (w["status"], w["model"]) == (503, "openai:gpt-outage")
                    assert "temporarily unavailable" in w["error"]
                    out, err = proc.communicate(timeout=60)
                    assert proc.returncode == 75, out + err

                    gave_up = _detail(client, sid)
                    assert gave_up["session"]["status"] == "failed"
                    assert gave_up["cause"] == "provider_unavailable"
                    assert gave_up["waiting"] is None
                    assert gave_up["session"]["reason"].startswith(
                        "gave up waiting for the provider"
                    )

                    # The provider is back: Resume on the page continues the turn.
                    server.recover()
                    monkeypatch.setenv("OPENAI_BASE_URL", server.openai())
                    monkeypatch.setenv("OPENAI_API_KEY", KEY)
                    r = client.post(f"/api/sessions/{sid}/resume", json={})
                    assert r.status_code == 200, r.text
                    deadline = time.monotonic() + 60
                    while _detail(client, sid)["session"]["status"] != "completed":
                        assert time.monotonic() < deadline, _detail(client, sid)["session"]
                        time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
