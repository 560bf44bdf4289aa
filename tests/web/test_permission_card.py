"""The permission card shows a command exactly, line by line, and marks a protected write."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from .scenarios import wait_for
from .test_api import client, detail, make_client, pending, start  # noqa: F401 (fixtures)


def test_the_card_shows_each_line_of_a_command_and_flags_a_protected_write(
    client: TestClient,  # noqa: F811
    tmp_path: Path,
) -> None:
    sid = start(
        client,
        tmp_path,
        "card",
        [
            {
                "tool_calls": [
                    {"name": "run_command", "arguments": {"command": "echo one\necho two\r"}}
                ]
            },
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": ".git/config", "content": "x"}}
                ]
            },
            {"text": "done"},
        ],
        sandbox="off",
    )
    wait_for(lambda: bool(pending(client, sid)), what="the command's request")
    (card,) = pending(client, sid)
    assert card["command"] == ["echo one⏎", "echo two␍"]
    assert card["protected"] is False
    r = client.post(
        f"/api/sessions/{sid}/permissions/{card['request_id']}", json={"decision": "deny"}
    )
    assert r.status_code == 200, r.text
    wait_for(lambda: any(p["protected"] for p in pending(client, sid)), what="the write's request")
    (card,) = pending(client, sid)
    assert card["command"] is None
    assert card["reason"].startswith(".git/config is a protected path")
    r = client.post(
        f"/api/sessions/{sid}/permissions/{card['request_id']}", json={"decision": "allow"}
    )
    assert r.status_code == 200, r.text
    wait_for(
        lambda: detail(client, sid)["session"]["status"] == "completed", what="the turn to end"
    )
    assert (tmp_path / "card" / ".git" / "config").read_text() == "x", "a person approved it"
