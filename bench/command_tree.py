"""What holding a command's whole tree costs: `true` through run_command, against a bare spawn.

The baseline is how commands were started before they had a keeper: `bash -c true` in a new
session with its output on a pipe, read to the end and waited for (what run_command did then).
The measured side is the run_command tool itself: the keeper (a subreaper with a parent-death
signal, started with `python -I -S`), the marker in the environment, the status protocol and the
check that nothing of the tree is left. The floor of the keeper is the interpreter's own start
(`python -I -S -c pass`), measured too. All run alternately in the same process, so the ratios
hold on a busy machine.

Usage: python bench/command_tree.py [--runs N]. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bubu.tools import ToolContext, builtin_tools

SHELL = shutil.which("bash") or "/bin/sh"


def bare(cwd: str) -> None:
    """The spawn without a keeper (the baseline)."""
    proc = subprocess.Popen(
        [SHELL, "-c", "true"],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    proc.stdout.read()
    proc.stdout.close()
    proc.wait()


def main() -> None:
    """Time both sides, alternating, and print their medians and ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    tool = builtin_tools()["run_command"]
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp).resolve()
        ctx = ToolContext(workspace=ws, marker="ses_bench/run_bench/call_bench")
        base: list[float] = []
        kept: list[float] = []
        interp: list[float] = []
        for _ in range(5):  # warm the page cache and the interpreter's imports
            bare(str(ws))
            tool.run({"command": "true"}, ctx, None)
        for _ in range(runs):
            t0 = time.perf_counter()
            bare(str(ws))
            t1 = time.perf_counter()
            result = tool.run({"command": "true"}, ctx, None)
            t2 = time.perf_counter()
            assert result.output == "(no output)\nexit code 0", result.output
            subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
            t3 = time.perf_counter()
            base.append((t1 - t0) * 1000)
            kept.append((t2 - t1) * 1000)
            interp.append((t3 - t2) * 1000)
    row = {
        "runs": runs,
        "cpus": os.cpu_count(),
        "bare_ms_p50": round(statistics.median(base), 2),
        "run_command_ms_p50": round(statistics.median(kept), 2),
        "ratio": round(statistics.median(kept) / statistics.median(base), 2),
        "interpreter_ms_p50": round(statistics.median(interp), 2),
        "python": sys.version.split()[0],
    }
    print(
        f"true, bare spawn (before):      {row['bare_ms_p50']:.2f} ms median\n"
        f"true, run_command with keeper:  {row['run_command_ms_p50']:.2f} ms median\n"
        f"ratio: {row['ratio']:.2f}x over {runs} runs each\n"
        f"of which the interpreter's start (python -I -S -c pass): "
        f"{row['interpreter_ms_p50']:.2f} ms median"
    )
    print(json.dumps(row))


if __name__ == "__main__":
    main()
