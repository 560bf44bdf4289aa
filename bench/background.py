"""What background processes cost: starting one, a command joining the session's shared network
namespace, and recording a chatty process's output in the log, in one run.

Series, interleaved round by round so that load changes hit them alike:

- ``fg_sandboxed``: `true` through `run_command` in the sandbox, its own network namespace (the
  baseline);
- ``fg_shared_net``: the same command joining a session's shared namespace (``nsenter`` first);
- ``bg_start``: starting `sleep 60` in the background until its handle is returned, then killing
  it (not timed).

Then one process prints 8 MiB of lines in the background into a real SQLite log: the time from
its start to its end being recorded, against the same output captured by a foreground command.

Usage: python bench/background.py [--rounds N]. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bubu.engine.processes import LogRecorder
from bubu.engine.session import new_session
from bubu.log.sqlite import SQLiteStore
from bubu.tools.background import Processes, Start
from bubu.tools.sandbox import confinement
from bubu.tools.shell import run_shell

CHATTY = (
    'python3 -c "import sys; '
    "[sys.stdout.write('line %07d ' % i + 'x' * 60 + '\\n') for i in range(120_000)]\""
)
"""About 8.6 MB of output in 120,000 lines."""


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


class _Runner:
    """What `LogRecorder` needs of a runner, for a session of a real store."""

    def __init__(self, store: SQLiteStore, session: str) -> None:
        from bubu.projections.turn import TurnFold

        self.store, self.session, self.lease = store, store.session(session), None
        self.turn, self.run = TurnFold(), "run_bench"
        self._staged: list[object] = []
        self.stop_event = threading.Event()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    rounds = parser.parse_args().rounds
    box = confinement("workspace-write", False)
    if box is None:
        sys.exit("bench/background.py: bubblewrap cannot run here")
    with tempfile.TemporaryDirectory() as tmp:
        ws = str(Path(tmp).resolve())
        cancel = threading.Event()
        procs = Processes("ses_bench")
        shared = procs.confine(box, create=True)
        if shared is None or shared.shared_net is None:
            sys.exit("bench/background.py: no shared network namespace can be made here")
        n = iter(range(1_000_000))

        def bg_start() -> float:
            start = Start(
                handle="",
                call_id=f"c{next(n)}",
                command="exec sleep 60",
                cwd=ws,
                marker=f"ses_bench/run/c{next(n)}",
                sandbox=box,
            )
            t0 = time.perf_counter()
            p = procs.start(start)
            took = (time.perf_counter() - t0) * 1000
            p.kill("bench", grace=0)
            return took

        series: dict[str, Callable[[], float]] = {
            "fg_sandboxed": lambda: _timed(lambda: run_shell("true", ws, 30, cancel, sandbox=box)),
            "fg_shared_net": lambda: _timed(
                lambda: run_shell("true", ws, 30, cancel, sandbox=shared)
            ),
            "bg_start": bg_start,
        }
        for fn in series.values():
            fn()
        times: dict[str, list[float]] = {name: [] for name in series}
        for _ in range(rounds):
            for name, fn in series.items():
                times[name].append(fn())
        med = {name: statistics.median(v) for name, v in times.items()}

        with SQLiteStore(Path(tmp) / "bubu.db") as store:
            info = new_session(store, task="bench", workspace=ws, model="scripted:x")
            logged = Processes(info.id)
            logged.recorder = LogRecorder(_Runner(store, info.id), logged)  # type: ignore[arg-type]
            t0 = time.perf_counter()
            p = logged.start(
                Start(handle="", call_id="c", command=CHATTY, cwd=ws, marker=f"{info.id}/run/c")
            )
            p.done.wait(120)
            bg_ms = (time.perf_counter() - t0) * 1000
            chunks = len(store.read(info.id, kinds=["process_output"]))
            waiting = len(logged.waiting.take())
            fg_ms = _timed(lambda: run_shell(CHATTY, ws, 120, cancel))
        procs.stop(["turn", "session"], "bench over")
    out = {
        "fg_sandboxed_ms": round(med["fg_sandboxed"], 2),
        "fg_shared_net_ms": round(med["fg_shared_net"], 2),
        "shared_net_ratio": round(med["fg_shared_net"] / med["fg_sandboxed"], 3),
        "bg_start_ms": round(med["bg_start"], 2),
        "bg_start_ratio": round(med["bg_start"] / med["fg_sandboxed"], 3),
        "chatty_bg_logged_ms": round(bg_ms, 1),
        "chatty_fg_ms": round(fg_ms, 1),
        "chatty_ratio": round(bg_ms / fg_ms, 3),
        "chatty_chunks": chunks,
        "chatty_not_logged": waiting,
    }
    for k, v in out.items():
        print(f"{k:>22}: {v}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
