"""The workspace guard, argument checks, permissions and the registry, across every tool."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest

from bubu.errors import ToolError
from bubu.tools import ToolContext, builtin_tools
from bubu.tools.base import JSON, Tool
from bubu.tools.restore import restore_tool
from bubu.tools.schema import Arguments, arguments_schema, convert
from bubu.tools.workspace import (
    cut_line,
    display,
    drop_partial_utf8,
    guard,
    iter_lines,
    outside_reason,
    resolve,
)

EXPECTED = {
    "read_file": ("read_only", ["path"], {"path", "offset", "limit"}),
    "list_files": ("read_only", [], {"pattern", "path"}),
    "grep": ("read_only", ["pattern"], {"pattern", "path", "glob"}),
    "write_file": ("provable_write", ["path", "content"], {"path", "content"}),
    "edit_file": ("provable_write", ["path", "old", "new"], {"path", "old", "new", "replace_all"}),
    "run_command": (
        "side_effecting",
        ["command"],
        {"command", "timeout_s", "background", "keep", "restart"},
    ),
    "process_output": ("read_only", ["handle"], {"handle", "offset", "limit"}),
    "process_wait": ("read_only", ["handle", "timeout"], {"handle", "timeout"}),
    "process_kill": ("side_effecting", ["handle"], {"handle"}),
    "read_result": ("read_only", ["handle"], {"handle", "offset", "limit", "byte_offset", "bytes"}),
    "search_result": ("read_only", ["handle", "pattern"], {"handle", "pattern"}),
    "inspect_result": ("read_only", ["handle"], {"handle"}),
    "query_result": ("read_only", ["handle"], {"handle", "query", "row", "rows"}),
    "remember": ("provable_write", ["key", "text"], {"key", "text"}),
    "recall": ("read_only", ["query"], {"query"}),
    "update_plan": ("read_only", ["items"], {"items"}),
    "delegate": (
        "side_effecting",
        ["task"],
        {"task", "agent", "tools", "model", "budget", "isolation"},
    ),
    "merge_child": ("side_effecting", ["child"], {"child"}),
}


def test_registry_has_every_tool_with_its_effect_and_a_closed_schema() -> None:
    tools = builtin_tools()
    assert list(tools) == list(EXPECTED)
    for name, tool in tools.items():
        effect, required, props = EXPECTED[name]
        assert tool.name == name
        assert tool.effect == effect
        assert len(tool.description) > 40
        schema = tool.parameters
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert schema["required"] == required
        assert set(schema["properties"]) == props
        for prop in schema["properties"].values():
            assert prop["type"] in {"string", "integer", "number", "boolean", "array", "object"}
            assert prop["description"]


BAD_ARGS: list[tuple[str, dict[str, JSON], str]] = [
    ("read_file", {}, "missing required argument path"),
    ("read_file", {"path": 3}, "'path' must be a string, not a number"),
    ("read_file", {"path": "a", "offset": "2"}, "'offset' must be an integer"),
    ("read_file", {"path": "a", "limit": True}, "'limit' must be an integer, not a boolean"),
    ("read_file", {"path": "a", "offset": 0}, "'offset' must be at least 1"),
    ("read_file", {"path": "a", "bogus": 1}, "unknown argument 'bogus'"),
    ("list_files", {"pattern": ["*.py"]}, "'pattern' must be a string, not an array"),
    ("grep", {"path": "."}, "missing required argument pattern"),
    ("write_file", {"path": "a"}, "missing required argument content"),
    ("write_file", {"path": "a", "content": None}, "'content' must be a string, not null"),
    ("edit_file", {"path": "a", "old": "x"}, "missing required argument new"),
    ("edit_file", {"path": "a", "old": "x", "new": "y", "replace_all": "yes"}, "'replace_all'"),
    ("run_command", {"command": {"sh": 1}}, "'command' must be a string, not an object"),
    ("run_command", {"command": "true", "timeout_s": -1}, "'timeout_s' must be a positive"),
    ("run_command", {"command": "   "}, "the command is empty"),
    ("read_result", {"handle": 12}, "'handle' must be a string"),
    ("search_result", {"handle": "ab" * 8}, "missing required argument pattern"),
    # Checked by msgspec against each tool's arguments Struct, nested types and bounds included.
    ("edit_file", {"path": "a"}, "missing required argument old, new"),
    (
        "read_file",
        {"path": "a", "offset": 1.5},
        "argument 'offset' must be an integer, not a number",
    ),
    ("read_result", {"handle": "ab" * 8, "limit": 0}, "argument 'limit' must be at least 1, not 0"),
    ("list_files", {"path": None}, "argument 'path' must be a string, not null"),
    ("grep", {"pattern": "x", "glob": 7}, "argument 'glob' must be a string, not a number"),
    ("run_command", {"command": "true", "timeout_s": True}, "'timeout_s' must be a number, not a"),
    ("run_command", {"command": "true", "timeout_s": 0}, "'timeout_s' must be a positive number"),
    ("run_command", {"command": "true", "timeout_s": float("nan")}, "must be a positive number"),
    ("remember", {"key": ["k"], "text": "x"}, "argument 'key' must be a string, not an array"),
    ("recall", {}, "missing required argument query"),
    ("update_plan", {"items": "write tests"}, "argument 'items' must be an array, not a string"),
    (
        "update_plan",
        {"items": [{"text": "a", "status": "doing"}]},
        "the plan was not changed: item 1 has the status 'doing'; it must be one of pending",
    ),
    (
        "update_plan",
        {"items": [{"text": "a", "status": "pending", "due": 1}]},
        "item 1 has the unknown field 'due'",
    ),
    ("update_plan", {"items": [{"status": "pending"}]}, "item 1 has an empty text"),
    (
        "inspect_result",
        {"handle": "ab" * 8, "page": 2},
        "unknown argument 'page'; expected one of handle",
    ),
]


@pytest.mark.parametrize(("name", "args", "message"), BAD_ARGS)
def test_bad_arguments_are_an_error_result_never_an_exception(
    tools: dict[str, Tool], ctx: ToolContext, name: str, args: dict[str, JSON], message: str
) -> None:
    result = tools[name].run(args, ctx, None)
    assert result.is_error
    assert message in result.output


def test_restore_file_checks_its_arguments_like_every_tool(ctx: ToolContext) -> None:
    restore = restore_tool(lambda sha: None)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"path": "a", "sha256": None}, "argument 'sha256' must be a string, not null"),
        ({"path": "a", "expect": 1}, "argument 'expect' must be a string, not a number"),
        ({"sha256": "ab"}, "missing required argument path"),
    ]
    for args, message in cases:
        with pytest.raises(ToolError, match=re.escape(message)):
            restore.prepare(args, ctx)
        result = restore.run(args, ctx, None)
        assert result.is_error
        assert message in result.output


def test_an_argument_that_may_be_left_out_is_not_nullable_in_the_schema() -> None:
    class Probe(Arguments):
        need: Annotated[int, msgspec.Meta(ge=1), "Needed."]
        maybe: Annotated[str | msgspec.UnsetType, "Left out or a string."] = msgspec.UNSET
        either: str | None = None

    assert json.dumps(arguments_schema(Probe, "probe")) == json.dumps(
        {
            "type": "object",
            "properties": {
                "need": {"type": "integer", "description": "Needed."},
                "maybe": {"type": "string", "description": "Left out or a string."},
                "either": {"type": ["string", "null"]},
            },
            "required": ["need"],
            "additionalProperties": False,
        }
    )
    schema = arguments_schema(Probe, "probe")
    assert convert({"need": 2}, Probe, schema).maybe is msgspec.UNSET
    assert convert({"need": 2, "either": None}, Probe, schema).either is None
    with pytest.raises(ToolError, match="argument 'maybe' must be a string, not null"):
        convert({"need": 2, "maybe": None}, Probe, schema)
    with pytest.raises(ToolError, match="argument 'need' must be at least 1, not 0"):
        convert({"need": 0}, Probe, schema)
    with pytest.raises(ToolError, match="the arguments must be a JSON object"):
        convert(["need"], Probe, schema)


def test_a_path_resolves_inside_the_workspace(ws: Path, ctx: ToolContext) -> None:
    (ws / "src").mkdir()
    assert resolve(ctx, "src/../src/a.py") == str(ws / "src" / "a.py")
    assert guard(ctx, "./src") == str(ws / "src")
    assert display(ctx, str(ws / "src" / "a.py")) == os.path.join("src", "a.py")
    assert display(ctx, str(ws)) == "."
    assert outside_reason(ctx, "src/a.py") is None


@pytest.mark.parametrize("raw", ["../outside/secret.txt", "sub/../../outside/secret.txt"])
def test_dot_dot_leading_out_is_outside(ctx: ToolContext, outside: Path, raw: str) -> None:
    reason = outside_reason(ctx, raw)
    assert reason is not None
    assert "is outside the workspace" in reason
    assert str(outside / "secret.txt") in reason


def test_a_sibling_with_the_workspace_as_name_prefix_is_outside(ws: Path, ctx: ToolContext) -> None:
    sibling = ws.parent / (ws.name + "2")
    sibling.mkdir()
    assert outside_reason(ctx, str(sibling / "f")) is not None


def test_outside_allowed_lifts_the_guard(ws: Path, outside: Path) -> None:
    allowed = ToolContext(workspace=ws, outside_allowed=True)
    assert outside_reason(allowed, str(outside / "secret.txt")) is None
    result = builtin_tools()["read_file"].run({"path": str(outside / "secret.txt")}, allowed, None)
    assert not result.is_error
    assert "top secret" in result.output


ESCAPES = ["abs", "dotdot", "link_file", "link_dir"]


def _escape_path(kind: str, ws: Path, outside: Path) -> str:
    """A path given to a tool that leads to outside/secret.txt (or outside/)."""
    if kind == "abs":
        return str(outside / "secret.txt")
    if kind == "dotdot":
        return "../outside/secret.txt"
    if kind == "link_file":
        (ws / "innocent.txt").symlink_to(outside / "secret.txt")
        return "innocent.txt"
    (ws / "data").symlink_to(outside, target_is_directory=True)
    return "data/secret.txt"


@pytest.mark.parametrize("kind", ESCAPES)
def test_every_path_tool_refuses_a_path_that_leads_out(
    tools: dict[str, Tool], ws: Path, outside: Path, ctx: ToolContext, kind: str
) -> None:
    path = _escape_path(kind, ws, outside)
    calls: list[tuple[str, dict[str, JSON]]] = [
        ("read_file", {"path": path}),
        ("list_files", {"path": path}),
        ("grep", {"pattern": "secret", "path": path}),
        ("write_file", {"path": path, "content": "pwned\n"}),
        ("edit_file", {"path": path, "old": "top", "new": "pwned"}),
    ]
    for name, args in calls:
        tool = tools[name]
        reason = tool.permission(args, ctx)
        assert reason is not None, name
        assert "outside the workspace" in reason
        result = tool.run(args, ctx, None)
        assert result.is_error, name
        assert "outside the workspace" in result.output
        assert "top secret" not in result.output
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_inside_paths_need_no_permission_and_commands_always_do(
    tools: dict[str, Tool], ctx: ToolContext
) -> None:
    assert tools["read_file"].permission({"path": "a.py"}, ctx) is None
    assert tools["list_files"].permission({}, ctx) is None
    assert tools["grep"].permission({"pattern": "x"}, ctx) is None
    assert tools["write_file"].permission({"path": "new/a.py", "content": ""}, ctx) is None
    assert tools["edit_file"].permission({"path": "a.py", "old": "a", "new": "b"}, ctx) is None
    assert tools["read_result"].permission({"handle": "ab" * 32}, ctx) is None
    assert tools["run_command"].permission({"command": "rm -rf build"}, ctx) == "rm -rf build"
    assert tools["run_command"].permission({}, ctx)


def test_bad_paths_are_error_results(tools: dict[str, Tool], ctx: ToolContext) -> None:
    assert "path is empty" in tools["read_file"].run({"path": ""}, ctx, None).output
    assert "NUL" in tools["read_file"].run({"path": "a\0b"}, ctx, None).output


def test_cut_line_cuts_on_a_character_boundary_and_says_how_much() -> None:
    data = "a€€".encode()  # 1 + 3 + 3 bytes
    assert cut_line(data, len(data), 7) == "a€€"
    assert cut_line(data[:5], 7, 5) == "a€ … [line cut: 3 more bytes]"
    assert cut_line(data[:4], 1000, 4) == "a€ … [line cut: 996 more bytes]"


def test_iter_lines_keeps_a_bounded_head_and_counts_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"short\n" + b"x" * 100_000 + b"\n\nlast")
    with path.open("rb") as f:
        lines = list(iter_lines(f, 10))
    assert lines == [(b"short", 5), (b"x" * 10, 100_000), (b"", 0), (b"last", 4)]


def test_drop_partial_utf8_removes_only_a_sequence_cut_short() -> None:
    euro = "€".encode()
    assert drop_partial_utf8(b"ab" + euro) == b"ab" + euro
    assert drop_partial_utf8(b"ab" + euro[:2]) == b"ab"
    assert drop_partial_utf8(b"ab" + euro[:1]) == b"ab"
    assert drop_partial_utf8("😀".encode()[:3]) == b""
    assert drop_partial_utf8(b"abc") == b"abc"
    assert drop_partial_utf8(b"") == b""
