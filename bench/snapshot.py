"""Workspace snapshots against git on the same tree, in one run.

A 10,000-file, 100 MB workspace (100 directories of 100 files of 10 KB of text):

- first snapshot: Bubu's first snapshot into a fresh store, against git's first `git add -A`
  (and `git write-tree`) in a fresh repository;
- incremental: 10 files changed, then Bubu's snapshot, against `git add -A && git write-tree`
  with a warm index (median of `--rounds` rounds each); Bubu's with its change feed (inotify,
  the default where the kernel has it) and with it off (`BUBU_SNAPSHOT_WATCH=off`: a stat of
  every file, as git does), in the same rounds;
- storage after 100 snapshots of a changing tree (10 files changed between each): the bytes of
  Bubu's stored objects against git's packed objects for the same history (a commit per
  snapshot, then `git gc`);
- a command step: the real engine running `run_command true` steps (unsandboxed, so that the
  figure is the snapshot's and not bubblewrap's) in that workspace, with and without snapshots
  (with: after the workspace's first snapshot, which is measured on its own above), and with
  snapshots but the change feed off.

Targets: incremental <= 20 ms and <= 1.5x git; first <= 1.5x git; storage <= 1.2x
git's pack; a command step <= 10% more than without snapshots.

Usage: python bench/snapshot.py [--files N] [--rounds N] [--history N] [--steps N].
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bubu.engine.driver import RunConfig
from bubu.engine.permissions import Policy
from bubu.engine.session import Host, new_session, start_turn
from bubu.log.sqlite import SQLiteStore
from bubu.providers.base import (
    DeltaSink,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    Usage,
)
from bubu.snapshot.take import Snapshotter, snapshotter
from bubu.tools import builtin_tools

WORDS = [
    "def",
    "return",
    "self",
    "value",
    "import",
    "class",
    "for",
    "in",
    "if",
    "else",
    "None",
    "True",
    "data",
    "path",
]


def make_tree(root: Path, files: int, size: int, rng: random.Random) -> list[Path]:
    """`files` text files of `size` bytes in directories of 100."""
    out = []
    for i in range(files):
        d = root / f"pkg{i // 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"mod{i % 100:03d}.py"
        words = []
        n = 0
        while n < size:
            w = rng.choice(WORDS) + (f"{rng.randrange(10_000)}" if rng.random() < 0.3 else "")
            words.append(w)
            n += len(w) + 1
        p.write_text(" ".join(words)[:size])
        out.append(p)
    return out


def change(paths: list[Path], rng: random.Random, n: int = 10) -> None:
    """Append a line to `n` files, as an edit would (and keep their mtimes moving)."""
    for p in rng.sample(paths, n):
        with p.open("a") as f:
            f.write(f"\nline {rng.randrange(1 << 30)} changed\n")


def git(ws: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(ws), *args], check=True, capture_output=True)


def git_snapshot(ws: Path) -> None:
    """git's counterpart of a snapshot: stage the tree and write its tree object."""
    git(ws, "add", "-A")
    git(ws, "write-tree")


def timed(fn: Callable[[], object]) -> float:
    """Seconds `fn` takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class Commands:
    """A model that asks for `run_command true` `steps` times, then ends."""

    spec = "bench:commands"
    context_window = 1_000_000

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        if request.ordinal >= self.steps:
            return ModelResponse(parts=(TextPart(text="done"),), usage=Usage(output_tokens=1))
        call = ToolCallPart(
            call_id=f"c{request.ordinal}", name="run_command", arguments={"command": "true"}
        )
        return ModelResponse(parts=(call,), usage=Usage(output_tokens=1), stop_reason="tool_use")


def command_step(ws: Path, db: Path, steps: int, *, snapshots: bool, feed: bool = True) -> float:
    """Seconds per `run_command true` step through the engine in `ws`."""
    os.environ["BUBU_SNAPSHOTS"] = "on" if snapshots else "off"
    os.environ["BUBU_SNAPSHOT_WATCH"] = "on" if feed else "off"
    store = SQLiteStore(db)
    if snapshots:  # the steady state: the workspace's first snapshot is measured above
        snapshotter(store, ws).take()
        time.sleep(0.05)
    host = Host(
        store=store,
        provider=Commands(steps),
        tools=builtin_tools(),
        policy=Policy(yes=True, sandbox="off"),
        config=RunConfig(max_steps=steps + 5, loop_limit=None),
    )
    info = new_session(store, task="bench", workspace=ws, model="bench:commands")
    t0 = time.perf_counter()
    assert start_turn(host, info, "bench") == "completed"
    per = (time.perf_counter() - t0) / steps
    store.close()
    os.environ.pop("BUBU_SNAPSHOTS", None)
    os.environ.pop("BUBU_SNAPSHOT_WATCH", None)
    return per


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--history", type=int, default=100)
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    rng = random.Random(29)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ws = tmp / "ws"
        paths = make_tree(ws, a.files, a.size, rng)
        git(ws, "init", "-q")
        git(ws, "config", "user.email", "bench@example.invalid")
        git(ws, "config", "user.name", "bench")
        git(ws, "config", "gc.auto", "0")
        store = SQLiteStore(tmp / "bubu.db")
        snap = Snapshotter(store, ws)
        bubu_first = timed(snap.take)
        git_first = timed(lambda: git_snapshot(ws))
        os.environ["BUBU_SNAPSHOT_WATCH"] = "off"
        walk = Snapshotter(store, ws)  # the same store: it finds the objects held
        walk.take()
        os.environ.pop("BUBU_SNAPSHOT_WATCH")
        time.sleep(0.05)  # past the racy window of the files the first snapshot read
        snap.take()
        walk.take()
        git(ws, "add", "-A")
        bubu_inc, walk_inc, git_inc = [], [], []
        for _ in range(a.rounds):
            change(paths, rng)
            bubu_inc.append(timed(snap.take))
            walk_inc.append(timed(walk.take))
            git_inc.append(timed(lambda: git_snapshot(ws)))
        # Storage: the same history for both, from here.
        git(ws, "commit", "-q", "-m", "base")
        for n in range(a.history):
            change(paths, rng)
            snap.take()
            git(ws, "add", "-A")
            git(ws, "commit", "-q", "-m", f"s{n}")
        git(ws, "gc", "-q", "--prune=now")
        pack = sum(p.stat().st_size for p in (ws / ".git" / "objects" / "pack").iterdir())
        stored = store._db.execute("SELECT sum(length(data)) FROM objects").fetchone()[0]
        store.close()
        (ws / ".git").rename(tmp / "git-aside")  # the step bench measures Bubu's cost alone
        command_step(ws, tmp / "warm.db", 5, snapshots=False)  # imports and caches, not counted
        # Without snapshots before and after the others (the load moves): their mean.
        off = command_step(ws, tmp / "off.db", a.steps, snapshots=False)
        on = command_step(ws, tmp / "on.db", a.steps, snapshots=True)
        on_walk = command_step(ws, tmp / "walk.db", a.steps, snapshots=True, feed=False)
        off = (off + command_step(ws, tmp / "off2.db", a.steps, snapshots=False)) / 2
    inc_b, inc_g = statistics.median(bubu_inc), statistics.median(git_inc)
    inc_w = statistics.median(walk_inc)
    print(f"tree: {a.files:,} files, {a.files * a.size / 1e6:.0f} MB; 10 files changed per round")
    print(
        f"first snapshot: bubu {bubu_first * 1000:.0f} ms, git add -A {git_first * 1000:.0f} ms, "
        f"{bubu_first / git_first:.2f}x  (target <= 1.5x)"
    )
    print(
        f"incremental: bubu {inc_b * 1000:.1f} ms, git add -A && write-tree {inc_g * 1000:.1f} ms, "
        f"{inc_b / inc_g:.2f}x  (targets <= 20 ms, <= 1.5x); without the change feed "
        f"{inc_w * 1000:.1f} ms, {inc_w / inc_g:.2f}x"
    )
    print(
        f"storage after {a.history} snapshots: bubu {stored:,} B, git pack {pack:,} B, "
        f"{stored / pack:.2f}x  (target <= 1.2x)"
    )
    print(
        f"command step: {on * 1000:.1f} ms with snapshots, {off * 1000:.1f} ms without, "
        f"{(on / off - 1) * 100:+.1f}%  (target <= +10%); without the change feed "
        f"{on_walk * 1000:.1f} ms, {(on_walk / off - 1) * 100:+.1f}%"
    )
    print(
        json.dumps(
            {
                "files": a.files,
                "first_ms": round(bubu_first * 1000, 1),
                "git_first_ms": round(git_first * 1000, 1),
                "incremental_ms": round(inc_b * 1000, 2),
                "git_incremental_ms": round(inc_g * 1000, 2),
                "walk_incremental_ms": round(inc_w * 1000, 2),
                "stored_bytes": stored,
                "git_pack_bytes": pack,
                "storage_ratio": round(stored / pack, 3),
                "step_ms_on": round(on * 1000, 2),
                "step_ms_off": round(off * 1000, 2),
                "step_overhead": round(on / off - 1, 4),
                "step_ms_walk": round(on_walk * 1000, 2),
                "step_overhead_walk": round(on_walk / off - 1, 4),
            }
        )
    )


if __name__ == "__main__":
    main()
