"""Claude's text editor and bash end to end: a kill between dispatch and outcome re-runs the
edit its hashes prove undone, reports the command as interrupted, runs the view that waited for
the edit, and the next request replays the model's own blocks with the recovered results."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from .helpers import bubu, finish, read, start_bubu
from .wire import ANTHROPIC_KEY, Reply, serve

FIXTURES = Path(__file__).parent.parent / "providers" / "fixtures"
SPEC = "anthropic:claude-sonnet-4-5"


def _sse(name: str) -> Reply:
    return Reply(body=((FIXTURES / name).read_bytes(),))


@pytest.mark.heavy
def test_a_text_editor_edit_and_a_bash_command_killed_after_dispatch(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_text('def greet():\n    print("Hi")\n')
    db = tmp_path / "bubu.db"
    env = {"ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    with serve([_sse("anthropic_native_tools.sse")]) as server:
        proc = start_bubu(
            db,
            "run",
            "say hello",
            "-w",
            str(ws),
            "-m",
            SPEC,
            "--base-url",
            server.url,
            "--native-tools",
            "--yes",
            env={**env, "BUBU_FAILPOINT": "after_dispatch"},
        )
        assert finish(proc)[0] == -signal.SIGKILL
        server.replies.append(_sse("anthropic_text.sse"))
        done = bubu(db, "recover", "-m", SPEC, "--base-url", server.url, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        requests = server.requests

    assert (ws / "app.py").read_text() == 'def greet():\n    print("Hello")\n'
    decided = {
        f.tool: f.decision for r in read(db) if (a := r.event.actions) and (f := a.tool_recovery)
    }
    # The view of app.py waited for the edit of it, so it was never dispatched: it runs after.
    assert decided == {"edit_file": "rerun_not_applied", "run_command": "interrupted"}
    first, after = requests[0], requests[-1]
    assert [t.get("type") for t in first["tools"][:2]] == ["text_editor_20250728", "bash_20250124"]
    assert after["tools"] == first["tools"]
    sent: list[dict[str, Any]] = [
        b for m in after["messages"] if m["role"] == "assistant" for b in m["content"]
    ]
    uses = [b for b in sent if b["type"] == "tool_use"]
    assert [(u["name"], u["input"].get("command")) for u in uses] == [
        ("str_replace_based_edit_tool", "str_replace"),
        ("str_replace_based_edit_tool", "view"),
        ("bash", "python -m pytest -q"),
    ]
    answers = {
        b["tool_use_id"]: b
        for m in after["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    }
    assert answers["toolu_01RunTests000000000000003"].get("is_error") is True
    assert "interrupted" in json.dumps(answers["toolu_01RunTests000000000000003"]["content"])
    assert answers["toolu_01EditGreeting0000000001"].get("is_error") is not True
    # view_range [3, 7] of a two-line file: read_file's own answer, after the edit ran.
    assert "offset 3 is past the end" in answers["toolu_01ViewRange00000000000002"]["content"]
