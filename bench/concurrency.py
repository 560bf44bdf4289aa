"""Appends per second and per-step latency with 1, 4 and 16 concurrent sessions, on SQLite and on
PostgreSQL, in one run.

Each session is driven by the real engine (`Runner`: request note, response append, synced
dispatch, outcome, folds) with an instant in-process model and a no-op side-effecting tool, as in
bench/step.py, so what is measured is the runtime and the store. Sessions run as threads, each with
a store (and so a database connection) of its own: what `bubu worker --concurrency N` does. A
step's latency is the time between two consecutive model calls of a session (four appends, one of
them fully synced). Appends are counted at the store; ratios compare PostgreSQL with SQLite at the
same concurrency, and each row with one session on the same backend.

Usage: python bench/concurrency.py [--steps N] [--pg URL]. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `bench.step` importable
    sys.path.insert(0, str(ROOT))

from bench.step import InstantModel, NoopTool  # noqa: E402

from bubu.engine.driver import RunConfig  # noqa: E402
from bubu.engine.session import Host, new_session, start_turn  # noqa: E402
from bubu.events import Event  # noqa: E402
from bubu.log.postgres import PostgresStore  # noqa: E402
from bubu.log.sqlite import SQLiteStore  # noqa: E402
from bubu.log.store import Appended, Store  # noqa: E402
from bubu.providers.base import DeltaSink, ModelRequest, ModelResponse  # noqa: E402

CONCURRENCY = (1, 4, 16)
PG_URL = os.environ.get("BUBU_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

_tally = threading.Lock()


APPENDS = [0]
"""Appends that reached a store, all threads together."""


def _count() -> None:
    with _tally:
        APPENDS[0] += 1


class CountedSQLite(SQLiteStore):
    """SQLiteStore, its appends counted."""

    def append(self, session: str, events: Sequence[Event], **kw: Any) -> Appended:
        """Count, then append."""
        _count()
        return super().append(session, events, **kw)


class CountedPostgres(PostgresStore):
    """PostgresStore, its appends counted."""

    def append(self, session: str, events: Sequence[Event], **kw: Any) -> Appended:
        """Count, then append."""
        _count()
        return super().append(session, events, **kw)


class TimedModel(InstantModel):
    """The instant model, noting when each call arrives (a step ends where the next one starts)."""

    def __init__(self, steps: int) -> None:
        super().__init__(steps)
        self.calls: list[float] = []

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        self.calls.append(time.perf_counter())
        return super().complete(request, on_delta)


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One backend at one concurrency."""

    backend: str
    sessions: int
    steps: int
    appends: int
    events: int
    wall_s: float
    appends_per_s: float
    events_per_s: float
    step_p50_ms: float
    step_p99_ms: float


def _session(
    open_store: Callable[[], Store],
    steps: int,
    ws: Path,
    *,
    start: threading.Barrier,
    out: list[float],
    events: list[int],
) -> None:
    store = open_store()
    try:
        model, tool = TimedModel(steps), NoopTool()
        host = Host(
            store=store,
            provider=model,
            tools={"noop": tool},
            config=RunConfig(max_steps=steps + 5, loop_limit=None),
        )
        info = new_session(store, task="bench", workspace=ws, model=model.spec)
        start.wait()
        assert start_turn(host, info, "bench") == "completed"
        gaps = [b - a for a, b in zip(model.calls, model.calls[1:], strict=False)]
        with _tally:
            out.extend(gaps)
            events.append(store.head(info.id).high_water)
    finally:
        store.close()


def measure(backend: str, open_store: Callable[[], Store], n: int, steps: int, ws: Path) -> Row:
    """Run `n` sessions of `steps` steps at once; appends/s over the wall time, step percentiles."""
    start = threading.Barrier(n + 1)
    gaps: list[float] = []
    events: list[int] = []
    threads = [
        threading.Thread(
            target=_session,
            args=(open_store, steps, ws),
            kwargs={"start": start, "out": gaps, "events": events},
        )
        for _ in range(n)
    ]
    for t in threads:
        t.start()
    start.wait()
    before = APPENDS[0]
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    assert len(events) == n, "a session failed"
    appends = APPENDS[0] - before
    q = statistics.quantiles(gaps, n=100, method="inclusive")
    return Row(
        backend=backend,
        sessions=n,
        steps=len(gaps),
        appends=appends,
        events=sum(events),
        wall_s=round(wall, 3),
        appends_per_s=round(appends / wall, 1),
        events_per_s=round(sum(events) / wall, 1),
        step_p50_ms=round(q[49] * 1000, 3),
        step_p99_ms=round(q[98] * 1000, 3),
    )


def main() -> None:
    """Run every backend at every concurrency and print the table, then one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100, help="Steps per session.")
    ap.add_argument("--pg", default=PG_URL, help="The PostgreSQL server (a fresh schema is used).")
    args = ap.parse_args()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for n in CONCURRENCY:
            db = tmp / f"c{n}.db"
            sqlite = functools.partial(CountedSQLite, db)
            rows.append(measure("sqlite", sqlite, n, args.steps, tmp))
            schema = f"bubu_bench_{uuid.uuid4().hex[:10]}"
            CountedPostgres(args.pg, schema=schema).close()  # migrate once, outside the timing
            try:
                pg = functools.partial(CountedPostgres, args.pg, schema=schema)
                rows.append(measure("postgres", pg, n, args.steps, tmp))
            finally:
                PostgresStore(args.pg, schema=schema).drop_schema()
    by = {(r.backend, r.sessions): r for r in rows}
    print(f"steps per session: {args.steps} (each: 4 appends, the dispatch fully synced)")
    head = f"{'backend':<9}{'sessions':>9}{'appends/s':>11}{'events/s':>10}{'step p50 ms':>13}"
    print(head + f"{'step p99 ms':>13}{'vs 1 session':>14}{'vs sqlite':>11}")
    ratios: dict[str, float] = {}
    for r in rows:
        scale = r.appends_per_s / by[(r.backend, 1)].appends_per_s
        vs = r.appends_per_s / by[("sqlite", r.sessions)].appends_per_s
        ratios[f"{r.backend}_{r.sessions}_vs_1"] = round(scale, 3)
        ratios[f"{r.backend}_{r.sessions}_vs_sqlite"] = round(vs, 3)
        print(
            f"{r.backend:<9}{r.sessions:>9}{r.appends_per_s:>11.0f}{r.events_per_s:>10.0f}"
            f"{r.step_p50_ms:>13.2f}{r.step_p99_ms:>13.2f}{scale:>13.2f}x{vs:>10.2f}x"
        )
    print(
        json.dumps(
            {"steps_per_session": args.steps, "rows": [asdict(r) for r in rows], "ratios": ratios}
        )
    )


if __name__ == "__main__":
    main()
