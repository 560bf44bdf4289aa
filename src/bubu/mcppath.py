"""Where the user's MCP servers are configured, found without loading the MCP client (asyncio)."""

from __future__ import annotations

import os
from pathlib import Path


def default_config_path() -> Path | None:
    """``$BUBU_HOME/mcp.json`` (BUBU_HOME defaults to ~/.bubu) if that file exists."""
    home = Path(os.environ.get("BUBU_HOME") or Path.home() / ".bubu").expanduser()
    path = home / "mcp.json"
    return path if path.is_file() else None
