"""An MCP server that tells what it was given: its whole environment, and an argument echoed.

python env_server.py      serve over stdio
"""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import MCPServer

app = MCPServer("bubu-env")


@app.tool()
def environment() -> str:
    """The server's environment variables, as a JSON object."""
    return json.dumps(dict(os.environ), sort_keys=True)


@app.tool()
def echo(text: str) -> str:
    """The text, as received."""
    return f"received: {text}"


if __name__ == "__main__":
    app.run()
