"""The built-in tools' declarations as recorded data, and the host's tools told without loading
them when the built-ins are all it has.

A request lists the tools it offers by name, description and argument schema (`bubu.projections
.request.tool_specs`); a planning turn offers only those whose effect is ``read_only``. For the
built-in tools those four facts are recorded in ``builtin_tools.json`` beside this module, so
that `bubu context`, which shows the next request exactly, need not import every tool (the
sandbox, the search engine, the background processes: about 50 ms of a reader's start).
tests/tools/test_toolspecs.py holds the record equal to what the tools declare;
``python -m bubu.toolspecs`` rewrites it after a tool's declaration changes.

`host_declarations` answers for the host only when nothing else can be offered: no MCP servers
configured and no installed plugin that may register tools (`bubu.pluginscan`); otherwise it
returns None and the caller loads the tools (`bubu.tools.host_tools`), as a run does.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

RECORD = Path(__file__).with_name("builtin_tools.json")
"""Where the built-in tools' declarations are recorded."""

GROUP = "bubu.tools"
BUILTIN_REGISTRATION = {"builtin": "bubu.tools:builtin_tool_list"}
"""The line Bubu's own distribution declares in the ``bubu.tools`` group (`bubu.plugins.BUILTINS`
takes it from here)."""


class ToolDecl(msgspec.Struct, frozen=True, kw_only=True):
    """What a request needs of a tool: its name, description, argument schema and effect."""

    name: str
    description: str
    parameters: dict[str, Any]
    effect: str


def declarations(tools: Iterable[Any]) -> tuple[ToolDecl, ...]:
    """The declarations of `tools` (anything with a tool's four attributes), in their order."""
    return tuple(
        ToolDecl(name=t.name, description=t.description, parameters=t.parameters, effect=t.effect)
        for t in tools
    )


def encode(decls: Iterable[ToolDecl]) -> bytes:
    """The record's bytes: one JSON list, indented, keys in the tools' own order."""
    return msgspec.json.format(msgspec.json.encode(list(decls)), indent=2) + b"\n"


def recorded() -> tuple[ToolDecl, ...]:
    """The built-in tools' declarations, as recorded (in the built-ins' order)."""
    return msgspec.json.decode(RECORD.read_bytes(), type=tuple[ToolDecl, ...])


def host_declarations() -> tuple[ToolDecl, ...] | None:
    """The declarations of every tool this host offers, when those are the built-ins alone
    (no MCP configuration, no plugin that may register tools); else None."""
    from bubu.mcppath import default_config_path
    from bubu.pluginscan import may_register

    if default_config_path() is not None or may_register(GROUP, BUILTIN_REGISTRATION):
        return None
    return recorded()


def main() -> None:
    """Rewrite the record from the built-in tools' declarations."""
    from bubu.tools import builtin_tools

    RECORD.write_bytes(encode(declarations(builtin_tools().values())))
    print(f"wrote {RECORD}")


if __name__ == "__main__":
    main()
