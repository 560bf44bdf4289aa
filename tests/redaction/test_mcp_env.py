"""MCP servers get no secret they were not given, and what they echo is redacted in the log."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bubu import secrets
from bubu.log import redact
from bubu.tools import ToolContext
from bubu.tools.mcp import MCPServers, _expand, load_config
from engine.cli import only_session
from engine.helpers import call, write_script

from .test_cli import KEY, assert_no_secret, run

SERVER = Path(__file__).with_name("env_server.py")


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "mcp.json"
    server = {"command": [sys.executable, str(SERVER)], "env": {"SERVICE": "${MY_SERVICE_TOKEN}"}}
    path.write_text(json.dumps({"servers": {"sec": server}}))
    return path


def _results(log: str) -> list[str]:
    events = [json.loads(line)["event"] for line in log.splitlines()]
    return [
        e["content"]["result"]
        for e in events
        if e.get("content", {}).get("kind") == "function_response"
    ]


@pytest.mark.heavy
def test_a_server_that_echoes_its_environment_and_arguments(tmp_path: Path) -> None:
    """The server sees the secret its configuration names (redacted when it echoes it), not the
    provider key; an argument holding the key reaches it redacted, since calls run from the log."""
    ws = tmp_path / "ws"
    ws.mkdir()
    script = write_script(
        tmp_path / "model.jsonl",
        [
            {"tool_calls": [call("sec__environment")]},
            {"tool_calls": [call("sec__echo", text=f"the key {KEY}")]},
            {"text": "done"},
        ],
    )
    db = tmp_path / "b.db"
    done = run(
        db,
        "run",
        "ask the server",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        "--mcp",
        str(_config(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    log = assert_no_secret(db, only_session(db), cli=False)
    env_text, echoed = _results(log)[:2]
    env = json.loads(env_text)
    assert "OPENAI_API_KEY" not in env
    assert "MY_SERVICE_TOKEN" not in env
    assert env["SERVICE"] == "[redacted:MY_SERVICE_TOKEN]"
    assert echoed == "received: the key [redacted:OPENAI_API_KEY]"


def test_env_passes_a_secret_on_to_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server started with `pass_env` (what `--env OPENAI_API_KEY` gives it) sees the key, which
    the server of the run above (started without) did not."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    ctx = ToolContext(workspace=tmp_path, timeout_s=30)
    with MCPServers(load_config(_config(tmp_path)), pass_env=("OPENAI_API_KEY",)) as servers:
        (tool,) = [t for t in servers.tools() if t.remote == "environment"]
        env = json.loads(tool.run({}, ctx, None).output)
    assert env["OPENAI_API_KEY"] == KEY


def test_header_credentials_are_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """What an HTTP server's headers expand, and the credential of an auth header written into the
    configuration itself, are redacted like the environment's secrets."""
    monkeypatch.setenv("TRACKER_PLAIN", "ordinary-value-123")
    secrets.reset({})
    try:
        headers = _expand(
            {"Authorization": "Bearer literal-credential-99", "X-Org": "${TRACKER_PLAIN}"},
            server="tracker",
        )
        assert headers["X-Org"] == "ordinary-value-123"
        out = redact.text("Bearer literal-credential-99 org ordinary-value-123")
        assert out == "Bearer [redacted:MCP_TRACKER_AUTHORIZATION] org [redacted:TRACKER_PLAIN]"
    finally:
        secrets.reset()
