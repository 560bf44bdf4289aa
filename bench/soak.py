"""A long day with crashes: N steps of side-effecting commands, compactions, and a real SIGKILL
every ~2,000 steps, each crash recovered by a new `bubu recover` process.

Every step is one scripted model response calling `run_command` with `echo STEP >> ledger.txt`
(a real shell, sandbox off, `--yes`), so each side effect leaves one line in the workspace. The
first process is `bubu run`; each one is started with `BUBU_FAILPOINT=NAME@K` (a failpoint of the
step path chosen in turn, K about 2,000 hits later), so it SIGKILLs itself mid-step; the next is
`bubu recover SESSION`, until the turn completes. The window is small, so the history is
compacted every few hundred steps.

Reported:
- lost side effects: steps whose command the log says ran to its end but whose line is missing,
  or steps with neither a line nor an outcome; repeated: steps whose line appears twice or more
  (target 0 and 0). Commands cut by a crash are counted apart (the log says they may or may not
  have run, and the model was told so);
- each process's peak RSS (its rusage), the median step time (between model responses, from the
  log's timestamps) and the reload time (process start to its run's `run_started` event), for
  the first and the last 10% of the processes and steps (target last <= 1.2x first).

- the runner's reload of the final log in the soak's own process: from the last snapshot of its
  folds plus the events after it, against a fold of the whole log (target <= 150 ms at 100,000
  events), and whether both give the same state.

SIGTERM or SIGINT stops the soak after a real SIGKILL of the current child, and it reports what
it ran (`stopped_early`). Progress (one line per process) goes to stderr.

Usage: python bench/soak.py [--steps N] [--every K] [--window TOKENS]. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bubu.events import (
    Compaction,
    FunctionCall,
    FunctionResponse,
    RunStarted,
    SystemNote,
    TurnEnded,
)
from bubu.log.sqlite import SQLiteStore

FAILPOINTS = (
    "after_dispatch",
    "mid_tool",
    "after_tool",
    "after_outcome",
    "before_model_call",
    "after_model_response",
)
"""Where the processes die, in turn: each is hit about once a step."""


def script(path: Path, steps: int) -> None:
    """One line per step: run `echo STEP >> ledger.txt`; then a last answer."""
    with path.open("w") as f:
        for i in range(steps):
            call = {"name": "run_command", "arguments": {"command": f"echo {i} >> ledger.txt"}}
            f.write(json.dumps({"tool_calls": [call]}) + "\n")
        f.write(json.dumps({"text": "All done."}) + "\n")


def child_env(home: Path, failpoint: str | None) -> dict[str, str]:
    """A clean environment for a child: no inherited Bubu settings or model keys."""
    drop = ("BUBU_", "OPENAI_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["BUBU_HOME"] = str(home)
    if failpoint is not None:
        env["BUBU_FAILPOINT"] = failpoint
    return env


_stop = False
"""Set by SIGTERM or SIGINT: the soak stops after the current child and reports what it ran."""
_child: subprocess.Popen[bytes] | None = None


def _on_stop(signum: int, frame: object) -> None:
    global _stop
    _stop = True
    if _child is not None and _child.poll() is None:
        _child.kill()  # a real SIGKILL, like every other crash of the soak


def start(args: list[str], env: dict[str, str]) -> tuple[int, float, int]:
    """Run one child to its end; its exit status, start time (epoch ms) and peak RSS (bytes)."""
    global _child
    t0 = time.time() * 1000
    proc = subprocess.Popen(
        args,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _child = proc
    while True:
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            break
        except InterruptedError:
            continue
    _child = None
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if "Traceback" in err:
        raise SystemExit(f"a child failed with a traceback:\n{err[-2000:]}")
    return proc.returncode, t0, usage.ru_maxrss * 1024


def run(steps: int, every: int, window: int, tmp: Path, seed: int) -> dict[str, Any]:
    """Drive the soak and return the figures."""
    rng = random.Random(seed)
    ws = tmp / "ws"
    ws.mkdir()
    db = tmp / "bubu.db"
    script(tmp / "s.jsonl", steps)
    base = [sys.executable, "-m", "bubu", "--db", str(db)]
    flags = ["-m", f"scripted:{tmp / 's.jsonl'}", "--context-window", str(window)]
    first = [*base, "run", "soak", "-w", str(ws), *flags, "--sandbox", "off", "--yes"]
    procs: list[dict[str, Any]] = []
    session: str | None = None
    t_start = time.perf_counter()
    while True:
        n = len(procs)
        fp = f"{FAILPOINTS[n % len(FAILPOINTS)]}@{max(1, int(rng.gauss(every, every / 10)))}"
        args = first if session is None else [*base, "recover", session, *flags]
        code, t0, rss = start(args, child_env(tmp, fp))
        procs.append({"failpoint": fp, "code": code, "started_ms": t0, "rss": rss})
        if session is None:
            with SQLiteStore(db) as store:
                session = store.sessions()[0].id
        done = ledger_lines(ws / "ledger.txt")
        print(
            f"process {n + 1}: exit {code}, {done:,} side effects, "
            f"{time.perf_counter() - t_start:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        if code != -9 or _stop:
            break
        if len(procs) > 4 * steps // every + 20:
            raise SystemExit("the soak does not end: too many processes")
    wall = time.perf_counter() - t_start
    with SQLiteStore(db) as store:
        records = store.read(session)
        verified = store.verify(session).ok
        reload_figures = reloads(store, session)
    out = figures(records, procs, ws / "ledger.txt", steps, wall=wall, verified=verified)
    out.update(reload_figures, stopped_early=_stop)
    return out


def ledger_lines(path: Path) -> int:
    """The side effects the workspace holds so far."""
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def reloads(store: SQLiteStore, session: str) -> dict[str, Any]:
    """The runner's reload of the final log, in this process: from its last snapshot and the
    events after it (median of 5), and by folding the whole log (no snapshot), for the ratio."""
    from bubu.context.policy import ContextPolicy
    from bubu.engine import reload
    from bubu.tools import builtin_tools

    builtin_tools()  # a runner's process: its tools declare the commands the folds count
    policy = ContextPolicy()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        state, suffix = reload.load(store, session, policy)
        times.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    whole = reload.RunnerFolds(policy=policy)
    whole.fold(store.read(session))
    full_ms = (time.perf_counter() - t) * 1000
    return {
        "reload_state_ms": round(statistics.median(times), 1),
        "reload_suffix_events": len(suffix),
        "full_fold_ms": round(full_ms, 1),
        "reload_same_as_full_fold": reload.same(state, whole),
    }


def figures(
    records: list[Any],
    procs: list[dict[str, Any]],
    ledger: Path,
    steps: int,
    *,
    wall: float,
    verified: bool,
) -> dict[str, Any]:
    """Lost and repeated side effects, RSS, step and reload times, first and last 10%."""
    lines = Counter(int(x) for x in ledger.read_text().split()) if ledger.exists() else Counter()
    calls: dict[str, int] = {}
    outcome: dict[int, str] = {}
    runs: list[int] = []
    responses: list[int] = []
    ended = None
    for r in records:
        c = r.event.content
        if isinstance(c, FunctionCall) and r.event.role == "model":
            step = int(str(c.arguments.get("command", "echo -1")).split()[1])
            calls[c.call_id] = step
            responses.append(r.event.ts)
        elif isinstance(c, FunctionResponse) and c.call_id in calls:
            was_cut = c.result.startswith("interrupted") or "may or may not" in c.result
            kind = "cut" if was_cut else ("error" if c.is_error else "ran")
            outcome.setdefault(calls[c.call_id], kind)
        elif isinstance(c, SystemNote) and isinstance(c.note, RunStarted):
            runs.append(r.event.ts)
        elif isinstance(c, SystemNote) and isinstance(c.note, TurnEnded):
            ended = c.note.reason
    called = set(calls.values())
    lost = [s for s in called if lines[s] == 0 and outcome.get(s) in ("ran", None)]
    repeated = [s for s, k in lines.items() if k > 1]
    cut = [s for s in called if outcome.get(s) == "cut"]
    reload_ms = [ts - p["started_ms"] for p, ts in zip(procs, runs, strict=False)]
    gaps = [b - a for a, b in itertools.pairwise(responses)]
    tenth = max(1, len(gaps) // 10)
    ptenth = max(1, len(procs) // 10)
    rss = [p["rss"] / (1 << 20) for p in procs]

    def med(xs: Sequence[float]) -> float | None:
        return round(statistics.median(xs), 2) if xs else None

    out: dict[str, Any] = {
        "steps": steps,
        "steps_called": len(called),
        "turn_ended": ended,
        "processes": len(procs),
        "killed": sum(1 for p in procs if p["code"] == -9),
        "compactions": sum(
            1
            for r in records
            if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, Compaction)
        ),
        "lost": len(lost),
        "repeated": len(repeated),
        "cut_by_crash": len(cut),
        "cut_and_ran": sum(1 for s in cut if lines[s] == 1),
        "step_ms_first": med(gaps[:tenth]),
        "step_ms_last": med(gaps[-tenth:]),
        "reload_ms_first": med(reload_ms[:ptenth]),
        "reload_ms_last": med(reload_ms[-ptenth:]),
        "rss_mb_first": med(rss[:ptenth]),
        "rss_mb_last": med(rss[-ptenth:]),
        "events": len(records),
        "verified": verified,
        "wall_s": round(wall, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    for k in ("step_ms", "reload_ms", "rss_mb"):
        a, b = out[f"{k}_first"], out[f"{k}_last"]
        out[f"{k}_ratio"] = round(b / a, 3) if a and b else None
    return out


def main() -> None:
    """Run the soak and print the figures; the last line is one JSON object."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--every", type=int, default=2_000, help="failpoint hits between kills")
    ap.add_argument("--window", type=int, default=16_000, help="the model's window in tokens")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="run in DIR (a new directory) and keep it",
    )
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, _on_stop)
    signal.signal(signal.SIGINT, _on_stop)
    if args.keep is not None:
        args.keep.mkdir(parents=True)
        r = run(args.steps, args.every, args.window, args.keep, args.seed)
    else:
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
            r = run(args.steps, args.every, args.window, Path(d), args.seed)
    print(
        f"steps {r['steps']:,} in {r['processes']} processes ({r['killed']} SIGKILLed), "
        f"{r['compactions']} compactions, turn {r['turn_ended']}, wall {r['wall_s']} s"
    )
    print(
        f"side effects: lost {r['lost']}, repeated {r['repeated']} (target 0, 0); cut by a "
        f"crash and reported {r['cut_by_crash']} (of which had run: {r['cut_and_ran']})"
    )
    if r["stopped_early"]:
        print(f"stopped early (SIGTERM/SIGINT) after {r['steps_called']:,} steps")
    print(
        f"runner reload of the final {r['events']:,} events: {r['reload_state_ms']} ms from the "
        f"last snapshot and {r['reload_suffix_events']} events after it, {r['full_fold_ms']} ms "
        f"folding the whole log (same state: {r['reload_same_as_full_fold']})"
    )
    for k, unit in (("step_ms", "ms"), ("reload_ms", "ms"), ("rss_mb", "MB")):
        print(
            f"{k}: first 10% {r[f'{k}_first']} {unit}, last 10% {r[f'{k}_last']} {unit} "
            f"(ratio {r[f'{k}_ratio']}; target <= 1.2)"
        )
    print(json.dumps(r, sort_keys=True))


if __name__ == "__main__":
    main()
