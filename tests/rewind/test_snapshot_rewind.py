"""Rewind and undo cover commands: what a command created, changed or deleted in the workspace is
put back from the snapshots (real processes, the real sandbox, a real `rm -rf`)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from bubu.engine.keep import KEEP_MAX_BYTES
from bubu.engine.rewind import preview
from bubu.log.sqlite import SQLiteStore

from .test_rewind import bubu

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")


def _project(tmp: Path, lines: list[dict[str, object]]) -> tuple[Path, Path]:
    ws = tmp / "ws"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("a = 1\n")
    (ws / "src" / "pkg" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (ws / "src" / "pkg" / "run.sh").chmod(0o755)
    (ws / "README").write_text("readme\n")
    script = tmp / "m.jsonl"
    script.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return ws, script


def _command(command: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "run_command", "arguments": {"command": command}}]}


def _session(tmp: Path) -> str:
    with SQLiteStore(tmp / "bubu.db") as store:
        return store.sessions()[-1].id


@pytest.mark.heavy
@needs_bwrap
def test_undo_restores_what_an_rm_rf_run_by_the_agent_deleted(tmp_path: Path) -> None:
    ws, script = _project(tmp_path, [_command("rm -rf src/ && echo gone > NOTES"), {"text": "ok"}])
    bubu(tmp_path, "run", "-w", str(ws), "-m", f"scripted:{script}", "clean up")
    assert not (ws / "src").exists()  # the sandboxed command really deleted it
    sid = _session(tmp_path)
    out = bubu(tmp_path, "undo", sid, "--yes")
    assert "restore   src/a.py" in out.stdout
    assert "restore   src/pkg/run.sh" in out.stdout
    assert "delete    NOTES" in out.stdout
    assert (ws / "src" / "a.py").read_text() == "a = 1\n"
    assert (ws / "src" / "pkg" / "run.sh").read_text() == "#!/bin/sh\necho hi\n"
    assert os.stat(ws / "src" / "pkg" / "run.sh").st_mode & 0o777 == 0o755
    assert not (ws / "NOTES").exists()
    assert (ws / "README").read_text() == "readme\n"


@pytest.mark.heavy
def test_a_file_changed_by_someone_else_since_is_left_alone_unless_forced(tmp_path: Path) -> None:
    ws, script = _project(
        tmp_path, [_command("echo more >> src/a.py; echo x > README"), {"text": "ok"}]
    )
    bubu(
        tmp_path,
        "run",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--sandbox",
        "off",
        "--yes",
        "go",
    )
    (ws / "README").write_text("the person's own edit\n")
    sid = _session(tmp_path)
    out = bubu(tmp_path, "rewind", sid, "--to", "0", "--yes")
    assert "changed   README" in out.stdout
    assert (ws / "README").read_text() == "the person's own edit\n"
    assert (ws / "src" / "a.py").read_text() == "a = 1\n"

    ws2, script2 = _project(tmp_path / "again", [_command("echo x > README"), {"text": "ok"}])
    tmp2 = tmp_path / "again"
    bubu(
        tmp2, "run", "-w", str(ws2), "-m", f"scripted:{script2}", "--sandbox", "off", "--yes", "go"
    )
    (ws2 / "README").write_text("the person's own edit\n")
    bubu(tmp2, "undo", _session(tmp2), "--yes", "--force-file", "README")
    assert (ws2 / "README").read_text() == "readme\n"


def test_the_preview_lists_every_path_a_command_touched(tmp_path: Path) -> None:
    big = b"y" * (KEEP_MAX_BYTES + 1)
    ws, script = _project(
        tmp_path,
        [_command("rm src/a.py; echo new > created.txt; echo z >> big.bin"), {"text": "ok"}],
    )
    (ws / "big.bin").write_bytes(big)
    bubu(
        tmp_path,
        "run",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--sandbox",
        "off",
        "--yes",
        "go",
    )
    with SQLiteStore(tmp_path / "bubu.db") as store:
        p = preview(store, _session(tmp_path), 0)
    acts = {f.path: f.action for f in p.files}
    assert acts == {"src/a.py": "restore", "created.txt": "delete", "big.bin": "restore"}
    assert p.snapshots
    assert any("listed above (from its snapshots)" in line for line in p.lines())
