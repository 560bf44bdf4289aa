"""The definitions of the built-in tools, as the model is sent them, are exactly the recorded ones.

A request's prefix — the system prompt and the tool definitions — is what provider caches key
on, and a recovered turn re-issues its interrupted request from the code, not from a stored copy
of the definitions (the log records only the request's digest): a change to a name, a
description, a schema or even the order of a schema's keys makes the re-issued request differ
from the one whose digest was recorded. Such a change must be deliberate, so it is made here too:
regenerate the snapshot with `BUBU_UPDATE_SNAPSHOTS=1`, and say why in the commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bubu.tools import builtin_tools

SNAPSHOT = Path(__file__).parent / "snapshots" / "builtin_tools.json"


def _definitions() -> str:
    tools = sorted(builtin_tools().values(), key=lambda t: t.name)
    defs = [
        {"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools
    ]
    # Not sort_keys: the order of the keys is part of the bytes a provider sees.
    return json.dumps(defs, indent=1, ensure_ascii=False) + "\n"


def test_the_built_in_tool_definitions_are_the_recorded_ones() -> None:
    now = _definitions()
    if os.environ.get("BUBU_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(now)
    assert now == SNAPSHOT.read_text(), (
        "the built-in tool definitions changed; if that is deliberate, regenerate "
        f"{SNAPSHOT.name} with BUBU_UPDATE_SNAPSHOTS=1"
    )


def test_every_built_in_schema_is_a_closed_object() -> None:
    for tool in builtin_tools().values():
        params = tool.parameters
        assert params["type"] == "object", tool.name
        assert params["additionalProperties"] is False, tool.name
        assert set(params["required"]) <= set(params["properties"]), tool.name
