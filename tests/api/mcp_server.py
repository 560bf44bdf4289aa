"""A tiny MCP server for the tests, built with the SDK's MCPServer (FastMCP in SDK 1.x).

    python mcp_server.py            serve over stdio
    python mcp_server.py --http P   serve streamable HTTP on 127.0.0.1:P at /mcp

`lookup` declares readOnlyHint; `bump` declares nothing. Each call appends a line to the file
named by the TALLY environment variable (when set), so a test can count how often a tool ran.
"""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

app = MCPServer("bubu-test")


def _tally(line: str) -> None:
    path = os.environ.get("TALLY")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(key: str) -> str:
    """Look up the value of a key."""
    _tally(f"lookup {key}")
    return f"the value of {key} is {key.upper()}"


@app.tool()
def bump(n: int = 1) -> str:
    """Add n to the counter (a side effect)."""
    _tally(f"bump {n}")
    return f"bumped by {n}"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail(reason: str) -> str:
    """Always fails, with the reason."""
    raise ToolError(reason)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
