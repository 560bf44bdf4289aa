"""The cost of resolving paths beneath the workspace descriptor, against opening by name.

Reads: `read_file` opens a file beneath the workspace (`bubu.tools.guard.open_beneath`: one
`openat` with ``O_NOFOLLOW | O_DIRECTORY`` per directory, a `readlink` probe of the last
component); the floor is what the tool did before: `os.path.realpath` and `open` by name. Writes:
`write_file`'s path (walk, hash check under the write lock, temporary file, fsync, rename, fsync
of the directory, all through descriptors) against the same atomic write by name without the walk
or the lock. Both run interleaved in one temporary directory, at depth 1 and at depth 6.

Usage: python bench/paths.py [--n N]. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bubu.tools import ToolContext, builtin_tools
from bubu.tools.files import atomic_write
from bubu.tools.guard import Root, open_beneath

_flips = [0]


def _content() -> str:
    """A new content each time: a write of the content already there does nothing."""
    _flips[0] += 1
    return f"{_flips[0]}\n"


def _median_us(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> None:
    """Measure and print the table and a JSON line."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    n = ap.parse_args().n
    out: dict[str, float] = {}
    tools = builtin_tools()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp).resolve()
        ctx = ToolContext(workspace=ws)
        for depth in (1, 6):
            rel = "/".join(f"d{i}" for i in range(depth - 1)) + ("/" if depth > 1 else "") + "f.txt"
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text("line\n" * 50)

            def by_name(rel: str = rel) -> None:
                with open(os.path.realpath(ws / rel), "rb") as f:
                    f.read()

            def beneath(rel: str = rel) -> None:
                with (
                    Root.open(str(ws)) as root,
                    os.fdopen(open_beneath(root, rel, os.O_RDONLY), "rb") as f,
                ):
                    f.read()

            def write_by_name(rel: str = rel) -> None:
                path = os.path.realpath(ws / rel)
                atomic_write(path, _content().encode(), os.stat(path))

            def write_tool(rel: str = rel) -> None:
                result = tools["write_file"].run({"path": rel, "content": _content()}, ctx, None)
                assert result.output.startswith("replaced"), result.output

            def read_tool(rel: str = rel) -> None:
                tools["read_file"].run({"path": rel}, ctx, None)

            # Interleaved rounds, so both sides see the same load.
            rounds: dict[str, list[float]] = {}
            for _ in range(5):
                for name, fn, k in (
                    ("open_by_name", by_name, n),
                    ("open_beneath", beneath, n),
                    ("read_file_tool", read_tool, n // 4),
                    ("write_by_name", write_by_name, n // 20),
                    ("write_file_tool", write_tool, n // 20),
                ):
                    rounds.setdefault(name, []).append(_median_us(fn, k))
            for name, values in rounds.items():
                out[f"{name}_us_d{depth}"] = round(statistics.median(values), 1)
            out[f"open_ratio_d{depth}"] = round(
                out[f"open_beneath_us_d{depth}"] / out[f"open_by_name_us_d{depth}"], 2
            )
            out[f"write_ratio_d{depth}"] = round(
                out[f"write_file_tool_us_d{depth}"] / out[f"write_by_name_us_d{depth}"], 2
            )
    for depth in (1, 6):
        print(
            f"depth {depth}: open {out[f'open_by_name_us_d{depth}']:.1f} µs by name, "
            f"{out[f'open_beneath_us_d{depth}']:.1f} µs beneath (×{out[f'open_ratio_d{depth}']}); "
            f"read_file {out[f'read_file_tool_us_d{depth}']:.1f} µs; atomic write "
            f"{out[f'write_by_name_us_d{depth}']:.0f} µs by name, write_file "
            f"{out[f'write_file_tool_us_d{depth}']:.0f} µs (×{out[f'write_ratio_d{depth}']})"
        )
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
