"""Fixtures for the extension tests: a workspace, a database path and scripted-model files."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest

Script = Callable[[Iterable[Mapping[str, object]]], str]
"""Writes a scripted model file (one response per line) and returns its model spec."""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace holding `a.txt`."""
    path = tmp_path / "ws"
    path.mkdir()
    (path / "a.txt").write_text("alpha\n")
    return path.resolve()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Where the session database goes."""
    return tmp_path / "bubu.db"


@pytest.fixture
def script(tmp_path: Path) -> Script:
    """Write a scripted model (DESIGN §9) and get its ``scripted:PATH`` spec."""
    count = 0

    def write(lines: Iterable[Mapping[str, object]]) -> str:
        nonlocal count
        count += 1
        path = tmp_path / f"script{count}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return f"scripted:{path}"

    return write
