"""`SchemaCallsProvider` drives the real engine: every built-in tool is called once with
arguments from its own schema, each call is accepted (the arguments are valid), and the turn
ends with text."""

from __future__ import annotations

import json
from pathlib import Path

from bubu.engine.driver import RunConfig
from bubu.engine.permissions import Policy
from bubu.engine.session import Host, new_session, start_turn
from bubu.events import FunctionCall, FunctionResponse, Text
from bubu.log.sqlite import SQLiteStore
from bubu.providers.schemacalls import SchemaCallsProvider, arguments_for
from bubu.tools import builtin_tools
from bubu.tools.decorator import FunctionTool

FAST = RunConfig(backoff_s=0.001, backoff_max_s=0.01)


def _run(store: SQLiteStore, ws: Path, provider: SchemaCallsProvider) -> str:
    info = new_session(store, task="go", workspace=ws, model=provider.spec)
    host = Host(
        store=store,
        provider=provider,
        tools=builtin_tools(),
        config=FAST,
        policy=Policy(yes=True, sandbox="off"),
    )
    assert start_turn(host, info, "go") == "completed"
    return info.id


def test_every_offered_tool_is_called_once_and_accepts_its_arguments(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    provider = SchemaCallsProvider()
    sid = _run(sqlite_store, ws.resolve(), provider)
    events = [r.event.content for r in sqlite_store.read(sid)]
    calls = [c for c in events if isinstance(c, FunctionCall)]
    offered = [t.name for t in provider.turns()[0].tools]
    assert [c.name for c in calls] == offered
    responses = [c for c in events if isinstance(c, FunctionResponse)]
    assert len(responses) == len(calls)
    assert all(r.call_id.startswith("schema_0_") for r in responses)
    final = events[-2] if not isinstance(events[-1], Text) else events[-1]
    assert isinstance(final, Text)
    assert set(json.loads(final.text)) == set(offered)


def test_only_the_named_tools_are_called_and_the_final_text_is_chosen(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a").write_text("alpha\n")
    provider = SchemaCallsProvider(["read_file", "grep"], final_text="done")
    sid = _run(sqlite_store, ws.resolve(), provider)
    contents = [r.event.content for r in sqlite_store.read(sid)]
    assert [c.name for c in contents if isinstance(c, FunctionCall)] == ["grep", "read_file"]
    read = next(c for c in contents if isinstance(c, FunctionResponse) and c.name == "read_file")
    assert "alpha" in read.result
    assert not read.is_error
    assert Text(text="done") in contents
    assert len(provider.turns()) == 2


def test_arguments_follow_the_schemas_bounds_enums_refs_and_optional_fields() -> None:
    schema: dict[str, object] = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 3, "maximum": 9},
            "x": {"type": "number", "exclusiveMinimum": 1},
            "mode": {"enum": ["fast", "slow"]},
            "tags": {"type": "array", "items": {"type": "string", "minLength": 2}, "minItems": 2},
            "maybe": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/Point"}]},
            "flag": {"type": "boolean"},
        },
        "required": ["n", "x", "mode", "tags", "maybe"],
        "$defs": {
            "Point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
        },
    }
    args = arguments_for(schema)
    assert args == {"n": 3, "x": 1.5, "mode": "fast", "tags": ["aa", "aa"], "maybe": {"x": 1}}
    assert arguments_for(schema, optional=True)["flag"] is False


def test_the_arguments_fit_every_built_in_tools_own_check() -> None:
    """Each tool's own argument check (types, bounds, its `validate`) accepts what is made for
    it, with and without the optional properties."""
    for t in builtin_tools().values():
        assert isinstance(t, FunctionTool)
        for optional in (False, True):
            t.check(arguments_for(t.parameters, optional=optional))
