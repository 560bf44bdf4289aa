"""`bubu mcp login` against a local OAuth test server (`mcp_oauth_server.py`, real processes):
without a sign-in the server refuses and Bubu says how to sign in; the login registers a
client, goes through the authorization and the callback, and keeps the tokens 0600 in
$BUBU_HOME; a run then calls the server's tools with them, the tokens never reach the log, and
an expired token is refreshed (the rotated one kept)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.cli import bubu, bubu_cmd, bubu_env
from engine.helpers import write_script

pytest.importorskip("mcp")
httpx = pytest.importorskip("httpx")

SERVER = Path(__file__).with_name("mcp_oauth_server.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The OAuth-protected MCP server: its /mcp URL and its tally file."""
    port, tally = _free_port(), tmp_path / "tally.txt"
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), str(port)],
        env={**os.environ, "TALLY": str(tally)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/.well-known/oauth-authorization-server", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError("the OAuth test server did not start") from None
                time.sleep(0.1)
        yield f"{base}/mcp", tally
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _tally(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _login(db: Path) -> subprocess.CompletedProcess[str]:
    """`bubu mcp login notes --no-browser`, with the test as the browser: it opens the address
    printed, and the authorization server's redirect brings it to Bubu's callback."""
    proc = subprocess.Popen(
        bubu_cmd(db, "mcp", "login", "notes", "--no-browser"),
        env=bubu_env(db.parent),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.strip().startswith("http://"):
            answer = httpx.get(line.strip(), follow_redirects=True, timeout=30)
            assert answer.status_code == 200
            assert "Signed in." in answer.text
            break
    else:
        raise AssertionError("no sign-in address was printed: " + "".join(seen))
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(seen) + err)


def _log_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


@pytest.mark.heavy
def test_login_then_calls_with_the_token_refreshed_when_it_expires(
    tmp_path: Path, server: tuple[str, Path]
) -> None:
    url, tally = server
    home = tmp_path / "home"
    home.mkdir()
    db = home / "bubu.db"
    (home / "mcp.json").write_text(json.dumps({"servers": {"notes": {"url": url, "ask": False}}}))
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [{"name": "notes__whoami", "arguments": {}}]},
            {"text": "done"},
            {"tool_calls": [{"name": "notes__whoami", "arguments": {}}]},
            {"text": "done"},
        ],
    )
    before = bubu(db, "run", "who am I", "-w", str(tmp_path), "-m", f"scripted:{script}")
    assert before.returncode != 0
    assert "run `bubu mcp login notes`" in before.stderr

    done = _login(db)
    assert done.returncode == 0, done.stderr
    assert "signed in to notes (1 tools)" in done.stdout
    assert _tally(tally) == ["register", "authorize", "token"]
    kept = home / "mcp-auth" / "notes.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    first = json.loads(kept.read_text())["tokens"]

    ran = bubu(db, "run", "who am I", "-w", str(tmp_path), "-m", f"scripted:{script}")
    assert ran.returncode == 0, ran.stderr
    assert _tally(tally)[-1] == "call"
    assert first["access_token"].encode() not in _log_bytes(db)
    assert first["refresh_token"].encode() not in _log_bytes(db)

    data = json.loads(kept.read_text())
    data["expires_at"] = time.time() - 60  # the access token has expired
    kept.write_text(json.dumps(data))
    again = bubu(db, "run", "-c", "who am I now", "-w", str(tmp_path), "-m", f"scripted:{script}")
    assert again.returncode == 0, again.stderr
    assert _tally(tally)[-2:] == ["refresh", "call"]
    now = json.loads(kept.read_text())["tokens"]
    assert now["access_token"] != first["access_token"]
    assert now["refresh_token"] != first["refresh_token"]  # rotated, and the new one kept
    assert now["access_token"].encode() not in _log_bytes(db)
    assert b"signed in as the test user" in _log_bytes(db)


@pytest.mark.heavy
def test_login_names_what_is_wrong(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    db = home / "bubu.db"
    done = bubu(db, "mcp", "login", "notes")
    assert done.returncode == 1
    assert "there is no MCP configuration" in done.stderr
    (home / "mcp.json").write_text(json.dumps({"servers": {"local": {"command": ["true"]}}}))
    done = bubu(db, "mcp", "login", "notes")
    assert "has no MCP server 'notes'; it has: local" in done.stderr
    done = bubu(db, "mcp", "login", "local")
    assert "runs as a command (stdio)" in done.stderr
    done = bubu(db, "mcp", "logout", "notes")
    assert done.returncode == 0
    assert "not signed in to notes" in done.stdout


def test_a_sign_in_kept_before_bubu_home_exists_makes_it_its_owners_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from mcp.shared.auth import OAuthToken

    from bubu.tools.mcpauth import TokenFile

    home = tmp_path / "new" / "home"
    monkeypatch.setenv("BUBU_HOME", str(home))
    old = os.umask(0o022)
    try:
        tokens = TokenFile("notes", "http://127.0.0.1:9/mcp")
        asyncio.run(
            tokens.set_tokens(OAuthToken(access_token="tok-home-mode-test", token_type="Bearer"))
        )
    finally:
        os.umask(old)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "mcp-auth").stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "mcp-auth" / "notes.json").stat().st_mode) == 0o600
