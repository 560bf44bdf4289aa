"""The per-session quota of bytes stored whole: real commands, a real SQLite file, `bubu` as a
subprocess; past the quota a large result keeps its head and tail with a note, after a restart
too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bubu.context.quota import StoredWhole, bounded, over_quota, parse_size, quota_of
from bubu.errors import ConfigError
from bubu.events import FunctionResponse
from bubu.log.sqlite import SQLiteStore

QUOTA = "300KB"
"""Room for one of the outputs below, not two."""


def _cmd(n: int) -> dict[str, Any]:
    """A step that prints `seq 1 N`: about 230 KB for N ≈ 40,000, and a different result per N."""
    return {"tool_calls": [{"name": "run_command", "arguments": {"command": f"seq 1 {n}"}}]}


def bubu(home: Path, ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`bubu ARGS…` in `ws`, with BUBU_HOME (its config file and database) at `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUBU_")}
    env["BUBU_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "bubu", *args],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _responses(db: Path) -> list[FunctionResponse]:
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        assert store.verify(info.id).ok
        return [
            c for r in store.read(info.id) if isinstance(c := r.event.content, FunctionResponse)
        ]


@pytest.mark.heavy
def test_past_the_quota_a_result_keeps_its_head_and_tail_with_a_note_and_a_restart_keeps_count(
    tmp_path: Path,
) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    (home / "config.toml").write_text(f'store_quota = "{QUOTA}"\n')
    script = tmp_path / "m.jsonl"
    lines = [
        _cmd(40000),
        _cmd(40001),
        {"text": "one"},
        _cmd(40002),
        {"text": "two"},
        _cmd(40003),
        {"text": "three"},
    ]
    script.write_text("".join(json.dumps(x) + "\n" for x in lines))
    model = f"scripted:{script}"

    done = bubu(home, ws, "run", "print", "-m", model)
    assert done.returncode == 0, done.stderr
    first, second = _responses(home / "bubu.db")
    # The first output fits the quota: stored whole, as a blob behind a placeholder.
    assert first.blob is not None
    assert first.blob.size > 200_000
    # The second would pass it: its head and tail only, inline, and a note saying why.
    assert second.blob is None
    assert second.result.startswith("[large result of run_command kept bounded, past the ")
    assert "]\n1\n2\n3\n" in second.result
    assert second.result.endswith("\n40001")
    assert "store_quota, is 300,000" in second.result
    assert "stored nowhere" in second.result
    assert len(second.result) < 8192

    # A new process (a restart) counts what the log already stores: the quota still holds.
    done = bubu(home, ws, "run", "-c", "again", "-m", model)
    assert done.returncode == 0, done.stderr
    third = _responses(home / "bubu.db")[2]
    assert third.blob is None
    assert "store quota" in third.result
    assert third.result.endswith("\n40002")

    # The flag beats the file, and `off` lifts the quota.
    done = bubu(home, ws, "run", "-c", "once more", "-m", model, "--store-quota", "off")
    assert done.returncode == 0, done.stderr
    fourth = _responses(home / "bubu.db")[3]
    assert fourth.blob is not None

    # What a person reads says so too.
    with SQLiteStore(home / "bubu.db") as store:
        (info,) = store.sessions()
    shown = bubu(home, ws, "show", info.id)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("kept bounded, past the session's store quota") == 2


def test_a_bad_quota_is_refused_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = bubu(home, tmp_path, "run", "x", "-m", "scripted:/dev/null", "--store-quota", "lots")
    assert done.returncode != 0
    assert "--store-quota takes a size such as 256MiB" in done.stderr
    (home / "config.toml").write_text('store_quota = "-3MB"\n')
    done = bubu(home, tmp_path, "config")
    assert done.returncode != 0
    assert "store_quota" in done.stderr


def test_sizes_and_the_default() -> None:
    assert parse_size("256MiB") == 256 << 20
    assert parse_size("1 GiB") == 1 << 30
    assert parse_size("500MB") == 500_000_000
    assert parse_size("4096") == 4096
    assert parse_size("off") == 0
    assert quota_of(None) == 256 << 20
    assert quota_of(0) is None
    for bad in ("", "0", "1.5x", "-1MB"):
        with pytest.raises(ConfigError):
            parse_size(bad)


def test_the_count_is_a_fold_of_the_log() -> None:
    """Each blob counts once (content-addressed); a small inline result never counts."""
    from bubu import clock
    from bubu.events import BlobRef, Record, make

    def rec(seq: int, result: str, blob: BlobRef | None = None) -> Record:
        ev = make(
            session="s",
            role="tool",
            author="tool",
            ts=clock.now_ms(),
            content=FunctionResponse(call_id=f"c{seq}", name="x", result=result, blob=blob),
        )
        return Record(seq=seq, hash="", event=ev)

    ref = BlobRef(sha256="a" * 64, size=10_000, lines=1)
    fold = StoredWhole(inline_over=100)
    for r in (rec(1, "p", ref), rec(2, "p", ref), rec(3, "small"), rec(4, "y" * 500)):
        fold.apply(r)
    assert fold.total == 10_500
    assert not over_quota(None, 10**12, 10**9, inline_over=100)
    assert not over_quota(1000, 990, 50, inline_over=100)
    assert over_quota(1000, 990, 101, inline_over=100)
    text, dropped = bounded("t", b"a" * 1000 + b"b" * 1000, keep=10, quota=5, used=4)
    assert dropped == 1980
    assert text.startswith("[large result of t kept bounded, past the session's store quota: 2,000")
    assert text.endswith("]\n" + "a" * 10 + "\n…\n" + "b" * 10)


@pytest.mark.heavy
def test_a_background_processs_output_counts_and_stops_being_stored_at_the_quota(
    tmp_path: Path,
) -> None:
    """Each background process keeps up to 64 MiB of output in the log, and the model may start
    as many as it likes one after another: without the quota a runaway one filled the disk."""
    from bubu.events import ProcessOutput, SystemNote

    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    script = tmp_path / "m.jsonl"
    start = {"name": "run_command", "arguments": {"command": "seq 1 400000", "background": True}}
    lines = [
        {"tool_calls": [start]},
        {"tool_calls": [{"name": "process_wait", "arguments": {"handle": "bg-1", "timeout": 60}}]},
        {"text": "done"},
    ]
    script.write_text("".join(json.dumps(x) + "\n" for x in lines))
    done = bubu(home, ws, "run", "print", "-m", f"scripted:{script}", "--store-quota", QUOTA)
    assert done.returncode == 0, done.stderr
    with SQLiteStore(home / "bubu.db") as store:
        (info,) = store.sessions()
        assert store.verify(info.id).ok
        chunks = [
            c.note.chunk
            for r in store.read(info.id)
            if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, ProcessOutput)
        ]
        last = store.blob(chunks[-1].sha256)
    stored = sum(c.size for c in chunks)
    # seq prints about 2.7 MB; the log keeps what fits the quota and a line saying the rest is not.
    assert stored <= parse_size(QUOTA), stored
    assert last is not None
    assert b"the rest of this output is not stored in the log" in last
    assert b"store_quota, is 300,000" in last
    # The session's count holds the process's output, as it holds results.
    with SQLiteStore(home / "bubu.db") as store:
        counted = StoredWhole(inline_over=10**9)
        for r in store.read(info.id):
            counted.apply(r)
    assert counted.total == stored
