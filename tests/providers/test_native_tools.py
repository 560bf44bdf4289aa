"""The providers' own tool shapes on the wire: Anthropic's text editor and bash on the Messages
API, OpenAI's apply_patch and shell on the Responses API (fixtures written from their docs)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bubu.providers.anthropic import AnthropicProvider
from bubu.providers.base import (
    AssistantMessage,
    ModelRequest,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolResultsMessage,
    ToolSpec,
    UserMessage,
)
from bubu.providers.openai_responses import OpenAIResponsesProvider
from bubu.tools import builtin_tools

from .wire import ANTHROPIC_KEY, OPENAI_KEY, Deltas, Wire, sse

SPECS = tuple(
    ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
    for t in sorted(builtin_tools().values(), key=lambda t: t.name)
)
ASK = ModelRequest(
    system="You are Bubu.",
    tools=SPECS,
    messages=(UserMessage(text="Say hello instead of hi."),),
    session_id="ses_01NATIVE",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def claude(wire: Wire, **options: Any) -> AnthropicProvider:
    return AnthropicProvider(
        "claude-sonnet-4-5", api_key=ANTHROPIC_KEY, http_client=wire.client(), **options
    )


def gpt(wire: Wire, **options: Any) -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider(
        "gpt-5.1", api_key=OPENAI_KEY, http_client=wire.client(), **options
    )


def names(tools: list[dict[str, Any]]) -> list[str]:
    return [t.get("name") or t["type"] for t in tools]


# ---- Anthropic -----------------------------------------------------------------------------------


def test_anthropic_offers_its_text_editor_and_bash_in_place_of_the_file_and_command_tools() -> None:
    wire = Wire([sse("anthropic_text.sse")])
    claude(wire).complete(ASK, Deltas())
    tools = wire.body()["tools"]
    assert tools[0] == {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}
    assert tools[1] == {"type": "bash_20250124", "name": "bash"}
    offered = names(tools)
    assert not {"read_file", "write_file", "edit_file", "run_command"} & set(offered)
    assert {"grep", "list_files", "read_result"} <= set(offered)
    assert "cache_control" in wire.body()["system"][-1]  # tools and system are still cached


@pytest.mark.parametrize(
    "options",
    [
        {"native_tools": False},
        {"base_url": "http://127.0.0.1:4000"},  # a proxy (LiteLLM) may not know the tool types
    ],
)
def test_anthropic_keeps_the_json_schema_tools_when_native_ones_are_off(
    options: dict[str, Any],
) -> None:
    wire = Wire([sse("anthropic_text.sse")])
    claude(wire, **options).complete(ASK, Deltas())
    assert names(wire.body()["tools"]) == [s.name for s in SPECS]


def test_a_proxy_can_be_given_the_native_tools_all_the_same() -> None:
    wire = Wire([sse("anthropic_text.sse")])
    claude(wire, base_url="http://127.0.0.1:4000", native_tools=True).complete(ASK, Deltas())
    assert names(wire.body()["tools"])[:2] == ["str_replace_based_edit_tool", "bash"]


def test_native_anthropic_calls_become_calls_of_bubus_tools_with_the_block_kept() -> None:
    wire = Wire([sse("anthropic_native_tools.sse")])
    response = claude(wire).complete(ASK, Deltas())
    text, edit, view, bash = response.parts
    assert text == TextPart(text="Fixing the greeting, then running the tests.")
    assert isinstance(edit, ToolCallPart)
    assert (edit.name, edit.arguments) == (
        "edit_file",
        {"path": "app.py", "old": 'print("Hi")', "new": 'print("Hello")'},
    )
    assert edit.native == {
        "type": "tool_use",
        "id": "toolu_01EditGreeting0000000001",
        "name": "str_replace_based_edit_tool",
        "input": {
            "command": "str_replace",
            "path": "app.py",
            "old_str": 'print("Hi")',
            "new_str": 'print("Hello")',
        },
    }
    assert isinstance(view, ToolCallPart)
    assert (view.name, view.arguments) == ("read_file", {"path": "app.py", "offset": 3, "limit": 5})
    assert isinstance(bash, ToolCallPart)
    assert (bash.name, bash.arguments) == ("run_command", {"command": "python -m pytest -q"})


def test_anthropic_replays_the_native_blocks_and_answers_with_tool_results() -> None:
    wire = Wire([sse("anthropic_native_tools.sse"), sse("anthropic_text.sse")])
    first = claude(wire).complete(ASK, Deltas())
    calls = [p for p in first.parts if isinstance(p, ToolCallPart)]
    results = tuple(
        ToolResultPart(call_id=c.call_id, name=c.name, content=f"done {n}")
        for n, c in enumerate(calls)
    )
    follow = ModelRequest(
        system=ASK.system,
        tools=ASK.tools,
        messages=(
            *ASK.messages,
            AssistantMessage(parts=first.parts),
            ToolResultsMessage(results=results),
        ),
        session_id=ASK.session_id,
    )
    claude(wire).complete(follow, Deltas())
    sent = wire.body()["messages"]
    assistant = sent[1]["content"]
    assert [b["type"] for b in assistant] == ["text", "tool_use", "tool_use", "tool_use"]
    assert assistant[1] == calls[0].native
    assert assistant[3] == {
        "type": "tool_use",
        "id": "toolu_01RunTests000000000000003",
        "name": "bash",
        "input": {"command": "python -m pytest -q"},
    }
    answers = [b for b in sent[2]["content"] if b["type"] == "tool_result"]
    assert [(a["tool_use_id"], a["content"]) for a in answers] == [
        ("toolu_01EditGreeting0000000001", "done 0"),
        ("toolu_01ViewRange00000000000002", "done 1"),
        ("toolu_01RunTests000000000000003", "done 2"),
    ]


@pytest.mark.parametrize(
    ("given", "name", "arguments"),
    [
        (
            {"command": "create", "path": "n.py", "file_text": "x\n"},
            "write_file",
            {"path": "n.py", "content": "x\n"},
        ),
        (
            {"command": "insert", "path": "n.py", "insert_line": 2, "insert_text": "y"},
            "insert_text",
            {"path": "n.py", "insert_line": 2, "text": "y"},
        ),
        ({"command": "view", "path": "src"}, "read_file", {"path": "src"}),
        (
            {"command": "view", "path": "n.py", "view_range": [10, -1]},
            "read_file",
            {"path": "n.py", "offset": 10},
        ),
        (
            {"command": "undo_edit", "path": "n.py"},
            "tool_reply",
            {
                "message": (
                    "the text editor has no command 'undo_edit'; "
                    "use view, create, str_replace or insert"
                ),
                "error": True,
            },
        ),
        (
            {"command": "str_replace", "path": "n.py"},
            "tool_reply",
            {"message": "str_replace needs old_str and new_str (strings)", "error": True},
        ),
    ],
)
def test_every_text_editor_command_maps_to_one_bubu_call(
    given: dict[str, Any], name: str, arguments: dict[str, Any]
) -> None:
    from bubu.providers.native import from_anthropic

    assert from_anthropic("str_replace_based_edit_tool", given) == (name, arguments)


def test_a_bash_restart_is_answered_without_running_anything() -> None:
    from bubu.providers.native import from_anthropic

    name, args = from_anthropic("bash", {"restart": True}) or ("", {})
    assert name == "tool_reply"
    assert args["error"] is False


# ---- OpenAI Responses ---------------------------------------------------------------------------


def test_responses_offers_apply_patch_and_shell_in_place_of_the_write_and_command_tools() -> None:
    wire = Wire([sse("responses_text.sse")])
    gpt(wire).complete(ASK, Deltas())
    tools = wire.body()["tools"]
    assert tools[:2] == [
        {"type": "apply_patch"},
        {"type": "shell", "environment": {"type": "local"}},
    ]
    offered = names(tools)
    assert not {"write_file", "edit_file", "run_command"} & set(offered)
    assert {"read_file", "grep", "list_files"} <= set(offered)


def test_responses_elsewhere_keeps_the_function_tools() -> None:
    wire = Wire([sse("responses_text.sse")])
    gpt(wire, base_url="http://127.0.0.1:4000/v1").complete(ASK, Deltas())
    assert all(t["type"] == "function" for t in wire.body()["tools"])


def test_apply_patch_calls_are_one_provable_write_per_file_and_shell_a_command() -> None:
    wire = Wire([sse("responses_apply_patch.sse")])
    response = gpt(wire).complete(ASK, Deltas())
    calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        (
            "call_Patch1CreateHelpers0001",
            "apply_patch",
            {
                "path": "helpers.py",
                "operation": "create_file",
                "diff": "+def shout(text):\n+    return text.upper()\n",
            },
        ),
        (
            "call_Patch2UpdateApp000000002",
            "apply_patch",
            {
                "path": "app.py",
                "operation": "update_file",
                "diff": '@@ def greet():\n-    print("Hi")\n+    print(shout("hello"))\n',
            },
        ),
        (
            "call_Patch3DeleteOld0000000003",
            "apply_patch",
            {"path": "old.py", "operation": "delete_file"},
        ),
        (
            "call_Shell4RunTests000000004",
            "run_command",
            {"command": "python -m pytest -q", "timeout_s": 60.0},
        ),
    ]
    assert all(isinstance(c.native, dict) for c in calls)
    assert response.stop_reason == "tool_use"


def _follow(first_parts: tuple[Any, ...], results: tuple[ToolResultPart, ...]) -> ModelRequest:
    return ModelRequest(
        system=ASK.system,
        tools=ASK.tools,
        messages=(
            *ASK.messages,
            AssistantMessage(parts=first_parts),
            ToolResultsMessage(results=results),
        ),
        session_id=ASK.session_id,
    )


def test_responses_replays_the_native_items_and_answers_each_in_its_own_shape() -> None:
    wire = Wire([sse("responses_apply_patch.sse"), sse("responses_text.sse")])
    first = gpt(wire).complete(ASK, Deltas())
    calls = [p for p in first.parts if isinstance(p, ToolCallPart)]
    results = (
        ToolResultPart(
            call_id=calls[0].call_id, name="apply_patch", content="created helpers.py (2 lines)."
        ),
        ToolResultPart(
            call_id=calls[1].call_id,
            name="apply_patch",
            content="section 1 of the diff does not match",
            is_error=True,
        ),
        ToolResultPart(call_id=calls[2].call_id, name="apply_patch", content="deleted old.py."),
        ToolResultPart(
            call_id=calls[3].call_id,
            name="run_command",
            content="F.\n1 failed, 1 passed\nexit code 1",
        ),
    )
    gpt(wire).complete(_follow(first.parts, results), Deltas())
    items = wire.body()["input"]
    sent_calls = [i for i in items if i.get("type") in ("apply_patch_call", "shell_call")]
    assert [i["call_id"] for i in sent_calls] == [c.call_id for c in calls]
    assert sent_calls[0]["operation"] == {
        "type": "create_file",
        "path": "helpers.py",
        "diff": "+def shout(text):\n+    return text.upper()\n",
    }
    outputs = [i for i in items if i.get("type", "").endswith("_output")]
    assert outputs[:3] == [
        {
            "type": "apply_patch_call_output",
            "call_id": "call_Patch1CreateHelpers0001",
            "status": "completed",
            "output": "created helpers.py (2 lines).",
        },
        {
            "type": "apply_patch_call_output",
            "call_id": "call_Patch2UpdateApp000000002",
            "status": "failed",
            "output": "section 1 of the diff does not match",
        },
        {
            "type": "apply_patch_call_output",
            "call_id": "call_Patch3DeleteOld0000000003",
            "status": "completed",
            "output": "deleted old.py.",
        },
    ]
    assert outputs[3] == {
        "type": "shell_call_output",
        "call_id": "call_Shell4RunTests000000004",
        "output": [
            {
                "stdout": "F.\n1 failed, 1 passed",
                "stderr": "",
                "outcome": {"type": "exit", "exit_code": 1},
            }
        ],
        "max_output_length": 4096,
    }
    assert not any(i.get("type") == "function_call_output" for i in items)


def test_the_same_history_is_sent_as_the_same_bytes() -> None:
    wire = Wire(
        [sse("responses_apply_patch.sse"), sse("responses_text.sse"), sse("responses_text.sse")]
    )
    first = gpt(wire).complete(ASK, Deltas())
    results = tuple(
        ToolResultPart(call_id=c.call_id, name=c.name, content="ok\nexit code 0")
        for c in first.parts
        if isinstance(c, ToolCallPart)
    )
    follow = _follow(first.parts, results)
    gpt(wire).complete(follow, Deltas())
    gpt(wire).complete(follow, Deltas())
    assert wire.requests[1].content == wire.requests[2].content
    assert json.loads(wire.requests[1].content)["input"][1]["type"] == "apply_patch_call"


@pytest.mark.parametrize(
    ("content", "is_error", "output"),
    [
        (
            "(no output)\nexit code 0",
            False,
            {"stdout": "", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
        ),
        (
            "partial\ntimed out after 5s; the command and its processes were killed",
            True,
            {"stdout": "partial", "stderr": "", "outcome": {"type": "timeout"}},
        ),
        (
            "x\nkilled by signal 9 (SIGKILL)",
            False,
            {"stdout": "x", "stderr": "", "outcome": {"type": "exit", "exit_code": 137}},
        ),
        (
            "permission denied: the command was not approved",
            True,
            {
                "stdout": "",
                "stderr": "permission denied: the command was not approved",
                "outcome": {"type": "exit", "exit_code": 1},
            },
        ),
    ],
)
def test_a_command_result_is_read_back_into_stdout_and_an_outcome(
    content: str, is_error: bool, output: dict[str, Any]
) -> None:
    from bubu.providers.native import responses_result

    call = {"type": "shell_call", "call_id": "c", "action": {"commands": ["x"]}}
    result = ToolResultPart(call_id="c", name="run_command", content=content, is_error=is_error)
    assert responses_result(result, call) == {
        "type": "shell_call_output",
        "call_id": "c",
        "output": [output],
    }


@pytest.mark.parametrize(
    ("model", "native"),
    [("claude-3-7-sonnet-20250219", False), ("claude-haiku-4-5-20251001", True)],
)
def test_only_claude_models_that_know_the_tool_versions_get_them(model: str, native: bool) -> None:
    wire = Wire([sse("anthropic_text.sse")])
    AnthropicProvider(model, api_key=ANTHROPIC_KEY, http_client=wire.client()).complete(
        ASK, Deltas()
    )
    assert ("str_replace_based_edit_tool" in names(wire.body()["tools"])) is native


@pytest.mark.parametrize(
    ("model", "native_tools", "native"),
    [
        ("gpt-5", None, False),
        ("gpt-4.1", None, False),
        ("gpt-5.1-codex", None, True),
        ("gpt-5", True, True),
    ],
)
def test_only_openai_models_documented_for_apply_patch_get_it_unless_asked(
    model: str, native_tools: bool | None, native: bool
) -> None:
    wire = Wire([sse("responses_text.sse")])
    OpenAIResponsesProvider(
        model, api_key=OPENAI_KEY, http_client=wire.client(), native_tools=native_tools
    ).complete(ASK, Deltas())
    assert ({"type": "apply_patch"} in wire.body()["tools"]) is native


def test_a_tool_of_ones_own_with_a_native_name_keeps_the_json_schema_shape() -> None:
    from bubu.providers.native import anthropic_tools, responses_tools

    mine = ToolSpec(name="bash", description="my bash", parameters={"type": "object"})
    native, kept = anthropic_tools((*SPECS, mine))
    assert [t["name"] for t in native] == ["str_replace_based_edit_tool"]
    assert "run_command" in {s.name for s in kept}
    patch = ToolSpec(name="apply_patch", description="mine", parameters={"type": "object"})
    native, kept = responses_tools((*SPECS, patch))
    assert native == [{"type": "shell", "environment": {"type": "local"}}]
    assert {"write_file", "edit_file", "apply_patch"} <= {s.name for s in kept}
