"""A turn with Claude's own text editor and bash on the wire: the calls run as Bubu's tools, with
their dispatch records, permissions and protected paths, and the next request replays them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from bubu import Agent
from bubu.engine.permissions import Policy
from bubu.events import FunctionCall, FunctionResponse
from bubu.log.sqlite import SQLiteStore
from bubu.providers.anthropic import AnthropicProvider

from .wire import ANTHROPIC_KEY, Wire, sse

APP = 'def greet():\n    print("Hi")\n'


def _event(kind: str, **data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def claude_calls(*calls: tuple[str, str, dict[str, Any]]) -> Any:
    """A Messages API stream answering with `calls` (id, tool name, input), as documented."""
    start: dict[str, Any] = {
        "id": "msg_native",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 900, "output_tokens": 1},
    }
    parts = [_event("message_start", message=start)]
    for n, (call_id, name, given) in enumerate(calls):
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        parts.append(_event("content_block_start", index=n, content_block=block))
        delta = {"type": "input_json_delta", "partial_json": json.dumps(given)}
        parts.append(_event("content_block_delta", index=n, delta=delta))
        parts.append(_event("content_block_stop", index=n))
    parts.append(
        _event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 60})
    )
    parts.append(_event("message_stop"))
    body = "".join(parts).encode()
    return lambda request: httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content=body
    )


def test_a_turn_with_the_text_editor_and_bash(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "app.py").write_text(APP)
    first = claude_calls(
        (
            "toolu_create",
            "str_replace_based_edit_tool",
            {"command": "create", "path": "notes.md", "file_text": "# Notes\n"},
        ),
        (
            "toolu_edit",
            "str_replace_based_edit_tool",
            {"command": "str_replace", "path": "app.py", "old_str": '"Hi"', "new_str": '"Hello"'},
        ),
    )
    second = claude_calls(
        (
            "toolu_insert",
            "str_replace_based_edit_tool",
            {
                "command": "insert",
                "path": "notes.md",
                "insert_line": 1,
                "insert_text": "- greet says Hello",
            },
        ),
        (
            "toolu_hook",
            "str_replace_based_edit_tool",
            {
                "command": "str_replace",
                "path": ".git/config",
                "old_str": "[core]",
                "new_str": "[core]\n\thooksPath = x",
            },
        ),
        (
            "toolu_view",
            "str_replace_based_edit_tool",
            {"command": "view", "path": "app.py", "view_range": [2, 2]},
        ),
        ("toolu_bash", "bash", {"command": "cat notes.md"}),
        ("toolu_undo", "str_replace_based_edit_tool", {"command": "undo_edit", "path": "app.py"}),
    )
    wire = Wire([first, second, sse("anthropic_text.sse")])
    provider = AnthropicProvider(
        "claude-sonnet-4-5", api_key=ANTHROPIC_KEY, http_client=wire.client()
    )
    db = tmp_path / "bubu.db"
    with Agent(model=provider, store=db, workspace=ws, policy=Policy(yes=True)) as agent:
        result = agent.run("say hello")
    assert result.ok, result

    assert (ws / "app.py").read_text() == 'def greet():\n    print("Hello")\n'
    assert (ws / "notes.md").read_text() == "# Notes\n- greet says Hello\n"
    assert (ws / ".git" / "config").read_text() == "[core]\n"  # --yes does not open .git

    with SQLiteStore(db) as store:
        records = store.read(result.session)
    calls = {c.call_id: c for r in records if isinstance(c := r.event.content, FunctionCall)}
    assert {k: c.name for k, c in calls.items()} == {
        "toolu_create": "write_file",
        "toolu_edit": "edit_file",
        "toolu_insert": "insert_text",
        "toolu_hook": "edit_file",
        "toolu_view": "read_file",
        "toolu_bash": "run_command",
        "toolu_undo": "tool_reply",
    }
    native = calls["toolu_edit"].native
    assert isinstance(native, dict)
    assert native["name"] == "str_replace_based_edit_tool"
    dispatch = next(
        a.tool_dispatch
        for r in records
        if (a := r.event.actions) and a.tool_dispatch and a.tool_dispatch.call_id == "toolu_edit"
    )
    assert dispatch.effect == "provable_write"
    assert dispatch.before_sha256 == hashlib.sha256(APP.encode()).hexdigest()
    assert dispatch.after_sha256 == hashlib.sha256((ws / "app.py").read_bytes()).hexdigest()
    results = {c.call_id: c for r in records if isinstance(c := r.event.content, FunctionResponse)}
    assert results["toolu_hook"].is_error
    assert "permission denied" in results["toolu_hook"].result
    assert results["toolu_view"].result.splitlines()[0].strip() == '2\t    print("Hello")'
    assert "- greet says Hello" in results["toolu_bash"].result
    assert results["toolu_undo"].is_error
    assert "no command 'undo_edit'" in results["toolu_undo"].result

    # Every request offered the native tools; the later ones replay the model's own blocks.
    bodies = [json.loads(r.content) for r in wire.requests]
    for body in bodies:
        assert [t.get("type") for t in body["tools"][:2]] == [
            "text_editor_20250728",
            "bash_20250124",
        ]
    replayed = [b for m in bodies[2]["messages"] if m["role"] == "assistant" for b in m["content"]]
    assert [b["name"] for b in replayed if b["type"] == "tool_use"] == [
        "str_replace_based_edit_tool",
        "str_replace_based_edit_tool",
        "str_replace_based_edit_tool",
        "str_replace_based_edit_tool",
        "str_replace_based_edit_tool",
        "bash",
        "str_replace_based_edit_tool",
    ]
    assert replayed[0]["input"] == {
        "command": "create",
        "path": "notes.md",
        "file_text": "# Notes\n",
    }


@pytest.mark.parametrize("native_tools", [False, None])
def test_a_turn_elsewhere_offers_the_json_schema_tools(
    tmp_path: Path, native_tools: bool | None
) -> None:
    wire = Wire([sse("anthropic_text.sse")])
    provider = AnthropicProvider(
        "claude-sonnet-4-5",
        api_key=ANTHROPIC_KEY,
        http_client=wire.client(),
        base_url=None if native_tools is False else "http://127.0.0.1:9/litellm",
        native_tools=native_tools,
    )
    with Agent(model=provider, store=tmp_path / "bubu.db", workspace=tmp_path) as agent:
        assert agent.run("hi").ok
    offered = {t["name"] for t in json.loads(wire.requests[0].content)["tools"]}
    assert {"read_file", "write_file", "edit_file", "run_command"} <= offered
    assert not {"apply_patch", "insert_text", "tool_reply", "bash"} & offered
