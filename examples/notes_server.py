"""A small MCP server (stdio) for the MCP example: notes kept in a JSON file.

    python examples/notes_server.py      # speaks MCP on stdin/stdout; run by an MCP host

`list_notes` and `read_note` declare readOnlyHint; `add_note` changes the file. NOTES names the
file (default notes.json in the current directory).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

app = MCPServer("notes")
READ_ONLY = ToolAnnotations(read_only_hint=True)


def _load() -> dict[str, str]:
    path = Path(os.environ.get("NOTES", "notes.json"))
    return dict(json.loads(path.read_text())) if path.exists() else {}


@app.tool(annotations=READ_ONLY)
def list_notes() -> str:
    """The titles of all notes, one per line."""
    return "\n".join(sorted(_load())) or "(no notes)"


@app.tool(annotations=READ_ONLY)
def read_note(title: str) -> str:
    """The text of one note."""
    return _load().get(title, f"no note titled {title!r}")


@app.tool()
def add_note(title: str, text: str) -> str:
    """Add (or replace) a note."""
    notes = _load()
    notes[title] = text
    Path(os.environ.get("NOTES", "notes.json")).write_text(json.dumps(notes, indent=1))
    return f"saved {title!r}"


if __name__ == "__main__":
    app.run()
