"""Bubu's built-in tools and their registry (DESIGN §4, §9).

    read_file, list_files, grep, read_result, search_result,
    inspect_result, query_result, recall, update_plan          read_only
    write_file, edit_file, remember                            provable_write
    run_command, delegate, merge_child, process_kill           side_effecting
    process_output, process_wait                               read_only

Each tool follows the seam in `bubu.tools.base`: a JSON schema for its arguments, an effect class,
`permission` (a reason to ask, or None), `prepare` (the `WriteIntent` of a provable write) and
`run`, which never raises for an ordinary failure. The built-ins are declared with `@tool`
(`bubu.tools.decorator`), the seam users' tools go through, each taking its arguments as one
`bubu.tools.schema.Arguments` Struct.

Tools reach a host through one seam, the ``bubu.tools`` entry-point group (`bubu.plugins`): the
built-ins are registered there as ``builtin``, next to third-party plugins. `registered_tools` is
what the CLI offers; `bubu.tools.decorator.tool` turns a function into a tool and
`bubu.tools.mcp` adapts the tools of MCP servers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib.metadata import EntryPoint
from typing import get_args

from bubu.errors import ConfigError
from bubu.events import EffectClass
from bubu.tools.base import JSON, Tool, ToolContext, ToolResult, WriteIntent
from bubu.tools.bgtools import process_kill, process_output, process_wait
from bubu.tools.delegate import delegate, merge_child
from bubu.tools.files import atomic_write, edit_file, file_sha256, read_file, write_file
from bubu.tools.inspect_result import inspect_result
from bubu.tools.memory import recall, remember, update_plan
from bubu.tools.query_result import query_result
from bubu.tools.results import line_count, read_result, search_result
from bubu.tools.search import grep, list_files
from bubu.tools.shell import run_command

__all__ = [
    "JSON",
    "Tool",
    "ToolContext",
    "ToolResult",
    "WriteIntent",
    "atomic_write",
    "builtin_tool_list",
    "builtin_tools",
    "check_tool",
    "file_sha256",
    "host_tools",
    "line_count",
    "registered_tools",
    "tool_table",
]


def builtin_tools() -> dict[str, Tool]:
    """Every built-in tool, by name, in a fixed order: functions declared with `@tool`
    (`bubu.tools.decorator`), like anyone's tools; they hold no state, so one table serves all."""
    tools: list[Tool] = [
        read_file,
        list_files,
        grep,
        write_file,
        edit_file,
        run_command,
        process_output,
        process_wait,
        process_kill,
        read_result,
        search_result,
        inspect_result,
        query_result,
        remember,
        recall,
        update_plan,
        delegate,
        merge_child,
    ]
    return {tool.name: tool for tool in tools}


def builtin_tool_list() -> list[Tool]:
    """The built-in tools as the ``builtin`` registration of the ``bubu.tools`` group."""
    return list(builtin_tools().values())


def check_tool(tool: object, *, where: str) -> None:
    """Refuse an object that does not declare what the engine needs of a tool (ConfigError)."""
    missing = [
        attr
        for attr in ("name", "description", "parameters", "effect", "permission", "prepare", "run")
        if not hasattr(tool, attr)
    ]
    if missing:
        raise ConfigError(
            f"{where} gave {type(tool).__name__}, which lacks {', '.join(missing)}; "
            "it is not a Bubu tool (see bubu.tools.base.Tool)"
        )
    effect = getattr(tool, "effect", None)
    if effect not in get_args(EffectClass):
        raise ConfigError(
            f"{where} gave the tool {getattr(tool, 'name', '?')!r} the effect class {effect!r}; "
            f"it must be one of {', '.join(get_args(EffectClass))}"
        )


def tool_table(tools: Iterable[Tool], *, where: str = "the tool list") -> dict[str, Tool]:
    """Tools by name, checked; two tools with one name are a ConfigError."""
    table: dict[str, Tool] = {}
    for t in tools:
        check_tool(t, where=where)
        if t.name in table:
            raise ConfigError(f"two tools are named {t.name!r} in {where}; rename one of them")
        table[t.name] = t
    return table


def registered_tools(entry_points: Iterable[EntryPoint] | None = None) -> dict[str, Tool]:
    """Every tool registered in the ``bubu.tools`` group (built-ins first), by name."""
    from bubu.plugins import plugin_tools

    return tool_table(plugin_tools(entry_points), where="the registered tools")


def host_tools(
    mcp: str | None = None,
    entry_points: Iterable[EntryPoint] | None = None,
    pass_env: Sequence[str] = (),
) -> dict[str, Tool]:
    """What a CLI host offers the model: every registered tool, plus the tools of the MCP servers
    configured in `mcp` (default ``$BUBU_HOME/mcp.json`` when it exists), connected once per
    process, with the secret variables `pass_env` passed on to them."""
    from bubu.mcppath import default_config_path
    from bubu.plugins import plugin_tools

    tools: list[Tool] = [*plugin_tools(entry_points)]
    if mcp is not None or default_config_path() is not None:
        from bubu.tools.mcp import connect  # the MCP client (asyncio) only when servers are set

        tools += connect(mcp, pass_env)
    return tool_table(tools, where="the host's tools")
