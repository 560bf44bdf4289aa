"""The cost of the sandbox per command: `true` in and out of bubblewrap, in one run.

Four series, interleaved round by round so that load changes hit them alike: `true` run through
Bubu's shell tool (`run_command`: bash -c, the output capture, the group handling) unconfined and
in the workspace-write sandbox, and the bare floor, `true` spawned directly and as
``bwrap <the same flags> true``. Each figure is a median wall time; the ratios are what to read.

Usage: python bench/sandbox.py [--rounds N]. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bubu.tools.sandbox import confinement, wrap
from bubu.tools.shell import run_shell


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    rounds = parser.parse_args().rounds
    box = confinement("workspace-write", False)
    if box is None:
        sys.exit("bench/sandbox.py: bubblewrap cannot run here, so there is nothing to compare")
    with tempfile.TemporaryDirectory() as tmp:
        ws = str(Path(tmp).resolve())
        cancel = threading.Event()
        bare = ["true"]
        boxed = wrap(bare, ws, box)

        def spawn(argv: list[str]) -> Callable[[], object]:
            return lambda: subprocess.run(argv, cwd=ws, stdin=subprocess.DEVNULL, check=True)

        series: dict[str, Callable[[], object]] = {
            "tool_off": lambda: run_shell("true", ws, 30, cancel),
            "tool_sandboxed": lambda: run_shell("true", ws, 30, cancel, sandbox=box),
            "bare_true": spawn(bare),
            "bare_bwrap_true": spawn(boxed),
        }
        for fn in series.values():  # warm the page cache and the probe
            fn()
        times: dict[str, list[float]] = {name: [] for name in series}
        for _ in range(rounds):
            for name, fn in series.items():
                times[name].append(_timed(fn))
    med = {name: statistics.median(ts) for name, ts in times.items()}
    out = {
        "rounds": rounds,
        "load_avg": round(os.getloadavg()[0], 2),
        **{f"{name}_ms_p50": round(ms, 2) for name, ms in med.items()},
        "tool_ratio": round(med["tool_sandboxed"] / med["tool_off"], 2),
        "bare_ratio": round(med["bare_bwrap_true"] / med["bare_true"], 2),
        "sandbox_cost_ms": round(med["tool_sandboxed"] - med["tool_off"], 2),
    }
    for name, ms in med.items():
        print(f"{name:16} p50 {ms:7.2f} ms")
    print(
        f"through the tool: sandboxed {out['tool_ratio']}× unconfined "
        f"(+{out['sandbox_cost_ms']} ms); bare: bwrap true {out['bare_ratio']}× true"
    )
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
