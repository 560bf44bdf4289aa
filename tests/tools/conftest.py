"""Fixtures for the tool tests: a real workspace directory, a directory outside it, a context."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.tools import ToolContext, builtin_tools
from bubu.tools.base import Tool


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace directory."""
    path = tmp_path / "ws"
    path.mkdir()
    return path.resolve()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace holding a secret file."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("top secret\n")
    return path.resolve()


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    """A context for the workspace, with a short default timeout."""
    return ToolContext(workspace=ws, timeout_s=30.0)


@pytest.fixture
def tools() -> dict[str, Tool]:
    """Every built-in tool by name."""
    return builtin_tools()
