"""A relative `scripted:` path is stored resolved: continuing the session from another directory
finds the same script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _bubu(db: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "BUBU_DB"} | {"BUBU_HOME": str(db.parent)}
    return subprocess.run(
        [sys.executable, "-m", "bubu", "--db", str(db), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.heavy
def test_a_relative_script_path_is_stored_resolved(tmp_path: Path) -> None:
    project = tmp_path / "project"
    elsewhere = tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "s.jsonl").write_text('{"text": "first"}\n{"text": "second"}\n')
    db = tmp_path / "bubu.db"
    done = _bubu(db, project, "run", "one", "-m", "scripted:s.jsonl", "-w", str(project))
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(_bubu(db, elsewhere, "sessions", "--json").stdout)
    assert row["model"] == f"scripted:{project / 's.jsonl'}"
    more = _bubu(db, elsewhere, "run", "--session", row["id"], "two")
    assert more.returncode == 0, more.stderr
    assert "second" in more.stdout
