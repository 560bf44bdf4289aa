"""`bubu recover` against the session's length: wall, CPU and peak RSS of one recovery process.

Builds one session of N steps in a real `bubu run` process (a scripted model; every step greps
a file, every tenth writes one, so the log holds dispatches, outcomes, workspace snapshots and
compactions), which SIGKILLs itself at the N-th dispatch (`BUBU_FAILPOINT=after_dispatch@N`),
then times `bubu recover SESSION` on a fresh copy of that database `--rounds` times: the plan,
its facts and the rest of the turn (one more model response).

Usage: python bench/recover.py [--steps N] [--rounds R] [--keep DIR] [--db DIR].
`--db DIR` reuses a DIR a previous `--keep` built. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bubu.log.sqlite import SQLiteStore


def script(path: Path, steps: int) -> None:
    with path.open("w") as f:
        for i in range(steps):
            if i % 10 == 9:
                call = {
                    "name": "write_file",
                    "arguments": {"path": f"w{i % 50}.txt", "content": f"step {i}\n"},
                }
            else:
                # A pattern of its own every step: a read the loop limit never takes for a loop.
                args = {"pattern": f"line {i % 200}$|step {i}$", "path": "a.txt"}
                call = {"name": "grep", "arguments": args}
            f.write(json.dumps({"text": f"step {i}", "tool_calls": [call]}) + "\n")
        f.write(json.dumps({"text": "All done."}) + "\n")


def env(home: Path, failpoint: str | None = None) -> dict[str, str]:
    drop = ("BUBU_", "OPENAI_", "ANTHROPIC_")
    out = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    out["BUBU_HOME"] = str(home)
    if failpoint is not None:
        out["BUBU_FAILPOINT"] = failpoint
    return out


def timed(args: list[str], e: dict[str, str]) -> dict[str, Any]:
    """Run one child; its exit status, wall and CPU seconds and peak RSS."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, env=e, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return {
        "code": os.waitstatus_to_exitcode(status),
        "wall_s": round(time.perf_counter() - t0, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "rss_mb": round(usage.ru_maxrss / 1024, 1),
    }


def build(root: Path, steps: int) -> dict[str, Any]:
    ws = root / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("".join(f"line {n}\n" for n in range(200)))
    script(root / "s.jsonl", steps)
    args = [
        *_bubu(root),
        "run",
        "bench",
        "-w",
        str(ws),
        "-m",
        f"scripted:{root / 's.jsonl'}",
        "--context-window",
        "16000",
        "--sandbox",
        "off",
        "--yes",
    ]
    return timed(args, env(root, f"after_dispatch@{steps}"))


def _bubu(root: Path, db: Path | None = None) -> list[str]:
    return [sys.executable, "-m", "bubu", "--db", str(db or root / "bubu.db")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="build in DIR (new) and keep it")
    ap.add_argument("--db", type=Path, default=None, help="reuse a DIR built with --keep")
    a = ap.parse_args()
    tmp = None
    if a.db is not None:
        root, built = a.db, None
    else:
        if a.keep is None:
            tmp = tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP"))
        root = a.keep if a.keep is not None else Path(tmp.name)  # type: ignore[union-attr]
        root.mkdir(parents=True, exist_ok=True)
        built = build(root, a.steps)
        if built["code"] != -9:
            raise SystemExit(f"the building run was not killed: {built}")
    with SQLiteStore(root / "bubu.db") as store:
        info = store.sessions()[0]
        events = store.head(info.id).high_water
    rounds = []
    for _ in range(a.rounds):
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
            db = Path(d) / "bubu.db"
            with SQLiteStore(root / "bubu.db") as src:  # a consistent copy, WAL included
                src._db.execute("VACUUM INTO ?", (str(db),))
            db.chmod(0o600)
            done = timed([*_bubu(root, db), "recover", info.id], env(Path(d)))
            with SQLiteStore(db) as store:
                done["events_after"] = store.head(info.id).high_water
            rounds.append(done)
    out = {
        "events": events,
        "build": built,
        "rounds": rounds,
        **{
            f"{k}_median": statistics.median(r[k] for r in rounds)
            for k in ("wall_s", "cpu_s", "rss_mb")
        },
        "load": os.getloadavg(),
    }
    print(
        f"bubu recover of {events:,} events: wall {out['wall_s_median']} s, "
        f"CPU {out['cpu_s_median']} s, peak RSS {out['rss_mb_median']} MB (median of {a.rounds})"
    )
    print(json.dumps(out, sort_keys=True))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
