"""The runner's reload of a long session: from the last snapshot of its folds, against a fold of
the whole log, on an existing database (e.g. one kept by `bench/memory.py --keep DIR`).

In one process, with the built-in tools loaded (as a runner has them), best of `--rounds`:
- `snapshot`: `engine.reload.load` as a runner's start calls it: the stored snapshot (checked
  against the log's digest at its seq, its checksum and its policy) plus the events after it;
  the snapshot is first set `--behind` events before the end (the writer keeps it within 1,000);
- `whole log`: the same folds over every record, no snapshot (what a runner did before);
- `a runner`: a whole `Runner` built on the session (its lease taken), from the snapshot;
- `save`: what storing a snapshot costs the writer (pickle, compress, checksum, write), once per
  1,000 events;
- `integrity`: what a host checks before it runs a session, the first time in a process (every
  record verified) and later (the hash chain only): not part of the fold, measured apart.
Both reloads must give the same state (`reload.same`). Target: the snapshot reload of a
100,000-event session <= 150 ms.

Usage: python bench/reload.py DB [--session ID] [--rounds N] [--behind N]. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bubu.context.policy import ContextPolicy
from bubu.engine import reload
from bubu.engine.driver import Runner
from bubu.log.sqlite import SQLiteStore
from bubu.log.verify import verify_chain, verify_records
from bubu.providers.scripted import ScriptedProvider
from bubu.tools import builtin_tools


def best(fn: Callable[[], object], rounds: int, setup: Callable[[], object] | None = None) -> float:
    """The fastest of `rounds` calls (each after `setup`, untimed), in ms of CPU time."""
    times = []
    for _ in range(rounds):
        if setup is not None:
            setup()
        t = time.process_time()
        fn()
        times.append((time.process_time() - t) * 1000)
    return min(times)


def main() -> None:
    """Measure and print; the last line is one JSON object."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", type=Path)
    ap.add_argument("--session", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--behind", type=int, default=500, help="events the snapshot lags the end")
    args = ap.parse_args()
    tools = builtin_tools()
    policy = ContextPolicy()
    with SQLiteStore(args.db) as store:
        sid = args.session or max(store.sessions(), key=lambda s: s.high_water).id
        records = store.read(sid)
        n = len(records)
        k = max(0, n - args.behind)
        snap = reload.RunnerFolds(policy=policy)
        snap.fold(records[:k])
        digest = records[k - 1].hash if k else None

        def lagging() -> (
            None
        ):  # the snapshot `--behind` events before the end, as the writer left it
            reload.save(store, sid, snap, digest)

        t = time.process_time()
        lagging()
        save_ms = (time.process_time() - t) * 1000
        del records

        def from_snapshot() -> reload.RunnerFolds:
            return reload.load(store, sid, policy)[0]

        def whole_log() -> reload.RunnerFolds:
            s = reload.RunnerFolds(policy=policy)
            s.fold(store.read(sid))
            return s

        def runner() -> None:
            lease = store.acquire_lease(sid, "bench", 60, steal=True)
            try:
                r = Runner(
                    store=store,
                    session=store.session(sid),
                    lease=lease,
                    tools=tools,
                    provider=ScriptedProvider(os.devnull),
                )
                r.pool.shutdown()
            finally:
                store.release_lease(lease)

        same = reload.same(from_snapshot(), whole_log())
        out: dict[str, Any] = {
            "events": n,
            "snapshot_behind": n - k,
            "snapshot_ms": round(best(from_snapshot, args.rounds, lagging), 1),
            "runner_ms": round(best(runner, args.rounds, lagging), 1),
            "save_ms": round(save_ms, 1),
            "snapshot_bytes": len(reload.encode(snap)),
            "whole_log_ms": round(best(whole_log, max(1, args.rounds // 2)), 1),
            "integrity_first_ms": round(
                best(lambda: verify_records(sid, store.raw(sid)), max(1, args.rounds // 2)), 1
            ),
            "integrity_chain_ms": round(
                best(lambda: verify_chain(sid, store.raw(sid)), max(1, args.rounds // 2)), 1
            ),
            "same_state": same,
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }
    print(
        f"{n:,} events, the snapshot {n - k} behind ({out['snapshot_bytes']:,} bytes, "
        f"{out['save_ms']} ms to store): reload {out['snapshot_ms']} ms from it "
        f"({out['runner_ms']} ms a whole Runner), {out['whole_log_ms']} ms folding the whole "
        f"log (same state: {same}); integrity before a run {out['integrity_first_ms']} ms "
        f"first, {out['integrity_chain_ms']} ms the chain only"
    )
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
