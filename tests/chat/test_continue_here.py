"""`-c` continues the latest session of this workspace, never one of another directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.log.sqlite import SQLiteStore
from engine.cli import bubu
from engine.helpers import write_script


def _sessions(db: Path) -> dict[str, str]:
    with SQLiteStore(db) as store:
        return {s.id: s.workspace for s in store.sessions()}


@pytest.mark.slow
def test_c_continues_the_session_of_this_workspace_not_the_newest(tmp_path: Path) -> None:
    db = tmp_path / "bubu.db"
    script = write_script(tmp_path / "s.jsonl", [{"text": "ok"}] * 4)
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    model = f"scripted:{script}"
    assert bubu(db, "run", "first here", "-w", str(here), "-m", model).returncode == 0
    assert bubu(db, "run", "first there", "-w", str(there), "-m", model).returncode == 0
    mine = next(s for s, ws in _sessions(db).items() if ws == str(here.resolve()))
    done = bubu(db, "run", "-c", "-w", str(here), "more here", "-m", model)
    assert done.returncode == 0, done.stderr
    assert len(_sessions(db)) == 2, "no new session"
    assert f"bubu · {mine} · {model} · {here.resolve()}" in done.stdout
    with SQLiteStore(db) as store:
        asked = [r.event.content for r in store.read(mine) if r.event.role == "user"]
    assert [getattr(c, "text", None) for c in asked] == ["first here", "more here"]


@pytest.mark.heavy
def test_c_in_a_directory_without_sessions_names_it_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "bubu.db"
    script = write_script(tmp_path / "s.jsonl", [{"text": "ok"}])
    busy, empty = tmp_path / "busy", tmp_path / "empty"
    busy.mkdir()
    empty.mkdir()
    assert bubu(db, "run", "task", "-w", str(busy), "-m", f"scripted:{script}").returncode == 0
    before = _sessions(db)
    done = bubu(db, "run", "-c", "-w", str(empty), "more", "-m", f"scripted:{script}")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"bubu: error: there is no session in {empty.resolve()} to continue")
    assert "bubu sessions" in line
    assert _sessions(db) == before


@pytest.mark.slow
def test_c_through_a_symlink_is_the_same_workspace(tmp_path: Path) -> None:
    db = tmp_path / "bubu.db"
    script = write_script(tmp_path / "s.jsonl", [{"text": "ok"}] * 2)
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    model = f"scripted:{script}"
    assert bubu(db, "run", "one", "-w", str(real), "-m", model).returncode == 0
    done = bubu(db, "run", "-c", "-w", str(link), "two", "-m", model)
    assert done.returncode == 0, done.stderr
    assert len(_sessions(db)) == 1
