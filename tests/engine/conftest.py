"""Fixtures for the engine tests: a workspace with a small file, and the session's SQLite store."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace holding `a.txt` ("alpha") and `b.txt` ("beta")."""
    path = tmp_path / "ws"
    path.mkdir()
    (path / "a.txt").write_text("alpha\n")
    (path / "b.txt").write_text("beta\n")
    return path.resolve()
