"""The durable log's own cost: append, storage and reload, against raw SQLite in the same run.

A step is what an agent commits around one tool call: a `function_call` event (about 200 B of
arguments, with its `tool_dispatch`) appended durably, then the `function_response` (about 2 KB of
result) appended durably — two `SQLiteStore.append` calls. The floor inserts the same canonical
bytes into a bare table (`seq INTEGER PRIMARY KEY, payload BLOB`) of a fresh file with the same
pragmas (WAL, synchronous=FULL), one autocommit INSERT (its own transaction) per append. Both
run interleaved step by step, in one temporary directory, so they share the same disk under the
same load.

Reload reads a 100,000-event session back as Records (`store.read`: query, decode into Structs,
hex the chain hashes, inflate the payloads stored compressed); its floor is a raw sqlite3
SELECT of the same canonical payloads from a bare table plus `json.loads` of each.

Usage: python bench/append.py [--steps N] [--reload-events N] [--dir DIR].
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bubu.events import (
    Actions,
    Event,
    FunctionCall,
    FunctionResponse,
    ToolDispatch,
    make,
)
from bubu.log import codec
from bubu.log.sqlite import SQLiteStore

TARGET_RATIO, TARGET_STORAGE, TARGET_RELOAD = 1.3, 1.2, 2.0
WARMUP = 50
ARGS = {"path": "src/bubu/module.py", "pattern": "def [a-z_]+\\(", "note": "n" * 130}
RESULT_LINE = "src/bubu/module.py:{n}: def handler_{n}(request, response):  # line of output\n"


def step_events(session: str, n: int) -> tuple[Event, Event]:
    """The call (+dispatch) and the outcome of step `n`, as an agent would build them."""
    call_id = f"call_{n:07d}"
    args = {**ARGS, "step": n}
    call = make(
        session=session,
        role="model",
        author="agent",
        ts=1_700_000_000_000 + n,
        turn="trn_bench",
        run="run_bench",
        invocation=f"inv_{n:07d}",
        content=FunctionCall(call_id=call_id, name="grep", arguments=args),
        actions=Actions(
            tool_dispatch=ToolDispatch(
                call_id=call_id,
                tool="grep",
                effect="read_only",
                args_digest=codec.args_digest(args),
            )
        ),
    )
    result = "".join(RESULT_LINE.format(n=n * 100 + i) for i in range(26))
    response = make(
        session=session,
        role="tool",
        author="tool",
        ts=1_700_000_000_001 + n,
        turn="trn_bench",
        run="run_bench",
        invocation=f"inv_{n:07d}",
        content=FunctionResponse(call_id=call_id, name="grep", result=result, duration_ms=3),
    )
    return call, response


class StoreSide:
    """Steps through `SQLiteStore.append`, two durable appends each."""

    def __init__(self, path: Path, total: int) -> None:
        self.path = path
        self.store = SQLiteStore(path)
        self.session = self.store.create_session(title="bench", workspace="/bench").id
        self.events = [step_events(self.session, n) for n in range(total)]
        self.high_water = 0

    def step(self, n: int) -> int:
        call, response = self.events[n]
        t0 = time.perf_counter_ns()
        self.high_water = self.store.append(
            self.session, [call], expect=self.high_water, durable=True
        ).high_water
        self.high_water = self.store.append(
            self.session, [response], expect=self.high_water, durable=True
        ).high_water
        return time.perf_counter_ns() - t0

    def close(self) -> None:
        self.store.close()


class FloorSide:
    """Steps through raw sqlite3: the same bytes, the same pragmas, one commit per append."""

    def __init__(self, path: Path, payloads: list[tuple[bytes, bytes]]) -> None:
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE events(seq INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
        self.payloads = payloads

    def step(self, n: int) -> int:
        call, response = self.payloads[n]
        db = self.db
        t0 = time.perf_counter_ns()
        for payload in (call, response):
            # One statement in autocommit is its own fully synced transaction: the cheapest
            # durable insert sqlite3 has (an explicit BEGIN IMMEDIATE … COMMIT costs two more
            # statements).
            db.execute("INSERT INTO events(payload) VALUES (?)", (payload,))
        return time.perf_counter_ns() - t0

    def close(self) -> None:
        self.db.close()


def on_disk(path: Path) -> int:
    """The database's bytes including its WAL (after the closing checkpoint)."""
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def pct(values: list[int], q: float) -> float:
    """The q-quantile of nanosecond samples, in milliseconds."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] / 1e6


def run_steps(tmp: Path, steps: int) -> dict[str, float]:
    """Interleave the store and the floor in blocks; per-step times, rates and bytes."""
    total = WARMUP + steps
    store = StoreSide(tmp / "bubu.db", total)
    floor = FloorSide(
        tmp / "floor.db", [(codec.encode(c), codec.encode(r)) for c, r in store.events]
    )
    for n in range(WARMUP):
        store.step(n)
        floor.step(n)
    mine: list[int] = []
    base: list[int] = []
    gc.disable()  # collector pauses would land on whichever side happens to be running
    try:
        # Step by step, alternating who goes first: fsync latency drifts a lot on shared disks.
        for n in range(WARMUP, total):
            if n % 2:
                mine.append(store.step(n))
                base.append(floor.step(n))
            else:
                base.append(floor.step(n))
                mine.append(store.step(n))
    finally:
        gc.enable()
    store.close()
    floor.close()
    paired = sorted(m / b for m, b in zip(mine, base, strict=True))
    return {
        "paired_ratio": paired[len(paired) // 2],
        "step_p50_ms": pct(mine, 0.5),
        "step_p99_ms": pct(mine, 0.99),
        "floor_step_p50_ms": pct(base, 0.5),
        "floor_step_p99_ms": pct(base, 0.99),
        "events_per_s": 2 * len(mine) / (sum(mine) / 1e9),
        "floor_events_per_s": 2 * len(base) / (sum(base) / 1e9),
        "bytes_per_step": on_disk(store.path) / total,
        "floor_bytes_per_step": on_disk(floor.path) / total,
    }


def best_of(runs: int, fn: Callable[[], object]) -> float:
    """The fastest of `runs` timed calls, in seconds."""
    times = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def run_reload(tmp: Path, events: int) -> dict[str, float]:
    """Time reading back a session of `events` events: store.read against SELECT + json.loads."""
    path = tmp / "reload.db"
    store = SQLiteStore(path)
    sid = store.create_session(title="reload", workspace="/bench").id
    high_water, n, batch = 0, 0, 1000
    while high_water < events:
        evs: list[Event] = []
        while len(evs) < min(batch, events - high_water):
            evs.extend(step_events(sid, n))
            n += 1
        evs = evs[: events - high_water]
        high_water = store.append(sid, evs, expect=high_water).high_water
    # The floor's copy: the same canonical bytes, as they are (the store compresses large ones).
    raw = sqlite3.connect(tmp / "reload_floor.db")
    raw.execute("CREATE TABLE events(seq INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
    raw.executemany("INSERT INTO events VALUES (?,?)", [(s, p) for s, _, p in store.raw(sid)])
    raw.commit()

    def floor_read() -> None:
        rows = raw.execute("SELECT payload FROM events ORDER BY seq").fetchall()
        assert len([json.loads(p) for (p,) in rows]) == events

    def store_read() -> None:
        assert len(store.read(sid)) == events

    floor_s = store_s = float("inf")
    for _ in range(3):  # alternate, keep each side's best
        floor_s = min(floor_s, best_of(1, floor_read))
        store_s = min(store_s, best_of(1, store_read))
    raw.close()
    store.close()
    return {"reload_ms": store_s * 1000, "floor_reload_ms": floor_s * 1000}


def main() -> None:
    """Run the step and reload measurements and print them, then one JSON line."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2000, help="measured steps (default 2000)")
    ap.add_argument("--reload-events", type=int, default=100_000, help="events to read back")
    ap.add_argument(
        "--dir", default=None, help="where the temporary databases go (default: TMPDIR)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bubu-bench-", dir=args.dir) as d:
        tmp = Path(d)
        r = run_steps(tmp, args.steps)
        r.update(run_reload(tmp, args.reload_events))
    r["ratio"] = r["step_p50_ms"] / r["floor_step_p50_ms"]
    r["p99_ratio"] = r["step_p99_ms"] / r["floor_step_p99_ms"]
    r["storage_ratio"] = r["bytes_per_step"] / r["floor_bytes_per_step"]
    r["reload_ratio"] = r["reload_ms"] / r["floor_reload_ms"]

    def verdict(value: float, target: float) -> str:
        return f"{value:.2f}x (target <= {target}x: {'ok' if value <= target else 'MISSED'})"

    print(f"directory: {d}  steps: {args.steps} (+{WARMUP} warm-up), two durable appends each")
    print(
        f"per step   bubu p50 {r['step_p50_ms']:.3f} ms  p99 {r['step_p99_ms']:.3f} ms   "
        f"floor p50 {r['floor_step_p50_ms']:.3f} ms  p99 {r['floor_step_p99_ms']:.3f} ms"
    )
    print(f"events/s   bubu {r['events_per_s']:.0f}   floor {r['floor_events_per_s']:.0f}")
    print(
        f"bytes/step bubu {r['bytes_per_step']:.0f}   floor {r['floor_bytes_per_step']:.0f}   "
        "(file + WAL after checkpoint, / steps)"
    )
    print(
        f"reload of {args.reload_events} events   bubu store.read {r['reload_ms']:.0f} ms   "
        f"floor {r['floor_reload_ms']:.0f} ms (raw SELECT of the payload rows + json.loads of each)"
    )
    print(f"step ratio (p50) {verdict(r['ratio'], TARGET_RATIO)}   p99 ratio {r['p99_ratio']:.2f}x")
    print(
        f"paired ratio     {r['paired_ratio']:.2f}x (median of bubu/floor over back-to-back steps; "
        "steadier when the disk's fsync latency drifts)"
    )
    print(f"storage ratio    {verdict(r['storage_ratio'], TARGET_STORAGE)}")
    print(f"reload ratio     {verdict(r['reload_ratio'], TARGET_RELOAD)}")
    keys = [
        "step_p50_ms",
        "step_p99_ms",
        "floor_step_p50_ms",
        "floor_step_p99_ms",
        "ratio",
        "p99_ratio",
        "paired_ratio",
        "events_per_s",
        "floor_events_per_s",
        "bytes_per_step",
        "floor_bytes_per_step",
        "storage_ratio",
        "reload_ms",
        "floor_reload_ms",
        "reload_ratio",
    ]
    out: dict[str, object] = {"steps": args.steps, "reload_events": args.reload_events}
    out.update({k: round(r[k], 4) for k in keys})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
