"""Bubu's built-in tools and their registry (DESIGN §4, §9).

    read_file, list_files, grep, read_result, search_result    read_only
    write_file, edit_file                                      provable_write
    run_command                                                side_effecting

Each tool follows the seam in `bubu.tools.base`: a JSON schema for its arguments, an effect class,
`permission` (a reason to ask, or None), `prepare` (the `WriteIntent` of a provable write) and
`run`, which never raises for an ordinary failure.
"""

from __future__ import annotations

from bubu.tools.base import JSON, Tool, ToolContext, ToolResult, WriteIntent
from bubu.tools.files import EditFile, ReadFile, WriteFile, atomic_write, file_sha256
from bubu.tools.results import ReadResult, SearchResult, line_count
from bubu.tools.search import Grep, ListFiles
from bubu.tools.shell import RunCommand
from bubu.tools.workspace import BuiltinTool

__all__ = [
    "JSON",
    "BuiltinTool",
    "EditFile",
    "Grep",
    "ListFiles",
    "ReadFile",
    "ReadResult",
    "RunCommand",
    "SearchResult",
    "Tool",
    "ToolContext",
    "ToolResult",
    "WriteFile",
    "WriteIntent",
    "atomic_write",
    "builtin_tools",
    "file_sha256",
    "line_count",
]


def builtin_tools() -> dict[str, Tool]:
    """A fresh instance of every built-in tool, by name, in a fixed order."""
    tools: list[Tool] = [
        ReadFile(),
        ListFiles(),
        Grep(),
        WriteFile(),
        EditFile(),
        RunCommand(),
        ReadResult(),
        SearchResult(),
    ]
    return {tool.name: tool for tool in tools}
