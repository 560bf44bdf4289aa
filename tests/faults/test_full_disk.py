"""A disk that is really full (a 2 MB tmpfs filled to the last block): every command that must
write names the cause and the free space; the reads still work; nothing committed is lost."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import (
    Snapshot,
    assert_kept,
    bubu,
    call,
    error_line,
    only_session,
    snapshot,
    write_script,
)


@contextlib.contextmanager
def _small_disk(where: Path) -> Iterator[Path]:
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "--lazy", str(where)], check=True)


def _fill(disk: Path) -> None:
    """Write until the file system refuses a single byte more."""
    with (disk / "filler").open("wb", buffering=0) as f:
        for size in (1 << 16, 1 << 12, 1 << 9, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * size)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[tuple[Path, Path, Path, str, Snapshot]]:
    """A database on a small disk with one crashed session (an open turn), then the disk filled."""
    ws = tmp_path / "ws"
    ws.mkdir()
    script = write_script(
        tmp_path / "s.jsonl",
        [{"tool_calls": [call("run_command", command="echo hi")]}, {"text": "All done."}],
    )
    with _small_disk(tmp_path / "disk") as disk:
        db = disk / "bubu.db"
        run = bubu(
            db,
            "run",
            "crash",
            "-w",
            str(ws),
            "-m",
            f"scripted:{script}",
            "--yes",
            env={"BUBU_FAILPOINT": "mid_tool"},
        )
        assert run.returncode == -9, run.stdout + run.stderr
        session = only_session(db)
        before = snapshot(db)
        _fill(disk)
        yield db, ws, script, session, before


@pytest.mark.slow
def test_a_full_disk_is_named_by_every_command_that_writes(
    full_disk: tuple[Path, Path, Path, str, Snapshot],
) -> None:
    db, ws, script, session, before = full_disk
    expected = (
        f"bubu: error: the disk holding {db} is full: 0 bytes free on {db.parent}; free space "
        "and retry"
    )
    for args in (
        ["recover"],
        ["recover", session],
        ["run", "new task", "-w", str(ws), "-m", f"scripted:{script}"],
        ["resume", session],
    ):
        done = bubu(db, *args)
        assert done.returncode != 0, args
        assert error_line(done.stderr) == expected, (args, done.stderr)
    for args in (["sessions"], ["verify"], ["show", session], ["status", session]):
        done = bubu(db, *args)
        assert done.returncode == 0, (args, done.stderr)
    (db.parent / "filler").unlink()
    assert_kept(before, db)
    done = bubu(db, "recover", session)
    assert done.returncode == 0, done.stderr
    assert "turn completed" in done.stdout
