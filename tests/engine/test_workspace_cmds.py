"""`bubu diff`, `bubu checkout` and `bubu status` read the workspace from the snapshots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .cli import bubu, bubu_json, only_session
from .helpers import call, write_script


def _ran(tmp: Path, lines: list[dict[str, object]]) -> tuple[Path, Path, str]:
    db, ws = tmp / "bubu.db", tmp / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("a = 1\nb = 2\n")
    (ws / "old.txt").write_text("old\n")
    (ws / "tool.sh").write_text("#!/bin/sh\n")
    (ws / "tool.sh").chmod(0o755)
    os.symlink("src/a.py", ws / "link")
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "noise.log").write_text("ignored\n")
    script = write_script(tmp / "s.jsonl", lines)
    done = bubu(
        db, "run", "go", "-w", str(ws), "-m", f"scripted:{script}", "--sandbox", "off", "--yes"
    )
    assert done.returncode == 0, done.stderr
    return db, ws, only_session(db)


TWO_TURNS: list[dict[str, object]] = [
    {
        "tool_calls": [
            call("run_command", command="sed -i s/2/3/ src/a.py; rm old.txt; echo n > new.txt")
        ]
    },
    {"text": "done"},
]


@pytest.mark.heavy
def test_diff_prints_what_the_commands_changed(tmp_path: Path) -> None:
    db, _, sid = _ran(tmp_path, TWO_TURNS)
    out = bubu(db, "diff", sid).stdout
    assert "--- a/src/a.py\n+++ b/src/a.py\n" in out
    assert "-b = 2\n+b = 3\n" in out
    assert "--- a/old.txt\n+++ /dev/null\n" in out
    assert "+++ b/new.txt\n" in out
    assert "noise.log" not in out
    stat = bubu(db, "diff", sid, "--stat").stdout.splitlines()
    assert stat == [
        "added new.txt (+1)",
        "deleted old.txt (−1)",
        "modified src/a.py (+1 −1)",
        "3 paths changed, +2 −2",
    ]
    turn = bubu_json(db, "diff", sid, "--turn", "1", "--json")
    assert [c["path"] for c in turn["changes"]] == ["new.txt", "old.txt", "src/a.py"]
    bad = bubu(db, "diff", sid, "--turn", "2")
    assert bad.returncode == 1
    assert "give a --turn from 1 to 1" in bad.stderr


@pytest.mark.heavy
def test_checkout_materializes_the_workspace_with_modes_and_links(tmp_path: Path) -> None:
    db, _, sid = _ran(tmp_path, TWO_TURNS)
    out = tmp_path / "elsewhere"
    done = bubu(db, "checkout", sid, str(out))
    assert done.returncode == 0, done.stderr
    assert (out / "src" / "a.py").read_text() == "a = 1\nb = 3\n"
    assert (out / "new.txt").read_text() == "n\n"
    assert not (out / "old.txt").exists()
    assert not (out / "noise.log").exists()  # ignored by the workspace's .gitignore
    assert os.readlink(out / "link") == "src/a.py"
    assert os.stat(out / "tool.sh").st_mode & 0o777 == 0o755
    before = tmp_path / "before"
    assert bubu(db, "checkout", sid, str(before), "--at", "1").returncode == 0
    assert (before / "old.txt").read_text() == "old\n"
    again = bubu(db, "checkout", sid, str(out))
    assert again.returncode == 1
    assert "is not empty" in again.stderr


@pytest.mark.heavy
def test_status_names_the_files_the_open_turn_changed(tmp_path: Path) -> None:
    lines = [
        {"tool_calls": [call("run_command", command="echo x >> src/a.py")]},
        {"tool_calls": [call("run_command", command="sleep 5")]},
    ]
    db, ws = tmp_path / "bubu.db", tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("a = 1\n")
    script = write_script(tmp_path / "s.jsonl", lines)
    killed = bubu(
        db,
        "run",
        "go",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--sandbox",
        "off",
        "--yes",
        failpoint="mid_tool@2",
    )
    assert killed.returncode == -9
    sid = only_session(db)
    status = bubu_json(db, "status", sid, "--json")
    assert status["status"] == "open turn"
    assert status["changed"] == ["modified src/a.py (+1 −0)"]
    text = bubu(db, "status", sid).stdout
    assert "changed by this turn so far (1): modified src/a.py (+1 −0)" in text
