"""Bubu alone: the time to build a recovery plan after a crash, at a given number of events.

A child process drives the real engine (the same instant model, window and no-op side-effecting tool
as the per-step run, compactions included) and is SIGKILLed by the `after_dispatch` failpoint at the
step that brings the log to about the requested size, so the last dispatch is left dangling exactly
as a crash leaves it. This process then times what `bubu recover` decides from: read the session and
build the plan (and, separately, the same with the hash chain recomputed, as `recover_session`
does).
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench._peers.bubu_engine import TimedModel
from bench._peers.common import CALL_NAME, RecoveryPoint, expect
from bench.step import NoopTool

from bubu.engine.driver import RunConfig
from bubu.engine.recovery import observe
from bubu.engine.session import Host, new_session, start_turn
from bubu.log.sqlite import SQLiteStore
from bubu.projections.recovery import Plan, paths_to_observe, plan_recovery

EVENTS_BEFORE_FIRST_STEP = 3  # the request, the turn's start, the run's start
EVENTS_PER_STEP = 4  # request note, response with the call, dispatch, outcome


def crash_step(events: int) -> int:
    """The step whose dispatch the crash leaves dangling, for a log of about `events` events."""
    return max(1, round((events - EVENTS_BEFORE_FIRST_STEP) / EVENTS_PER_STEP))


def build_crashed(events: int, db: Path) -> None:
    """Run the engine until the failpoint (armed by the caller's environment) kills this process."""
    steps = crash_step(events)
    store = SQLiteStore(db)
    model = TimedModel(steps + 10, math.inf, None)
    host = Host(
        store=store,
        provider=model,
        tools={CALL_NAME: NoopTool()},
        config=RunConfig(max_steps=steps + 20, loop_limit=None),
    )
    info = new_session(store, task="bench", workspace=db.parent, model=model.spec)
    start_turn(host, info, "bench")
    raise RuntimeError("the after_dispatch failpoint did not fire; the crashed log was not built")


def _median(fn: Callable[[], Plan], repeat: int = 3) -> tuple[float, Plan]:
    times = []
    plan = fn()  # warm the page cache and the decoder, like a second `bubu recover` would find it
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), plan


def measure(events: int, workdir: Path, script: Path) -> RecoveryPoint:
    """Build a crashed log of about `events` events in a child, then time its recovery plan."""
    db = workdir / f"crashed-{events}.db"
    env = {**os.environ, "BUBU_FAILPOINT": f"after_dispatch@{crash_step(events)}"}
    child = subprocess.run(
        [
            sys.executable,
            str(script),
            "--child",
            "bubu-crash",
            "--events",
            str(events),
            "--db",
            str(db),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    expect(
        child.returncode == -signal.SIGKILL,
        f"the crash child exited {child.returncode}, not by SIGKILL: {child.stderr[-2000:]}",
    )
    store = SQLiteStore(db)
    try:
        session = store.sessions()[0].id
        effects = {CALL_NAME: NoopTool().effect}

        def plan(verify: bool) -> Plan:
            records = store.read(session)
            problem = None
            if verify:
                report = store.verify(session)
                problem = None if report.ok else report.problem
            paths = observe(paths_to_observe(records))
            return plan_recovery(records, effects, paths, chain_problem=problem)

        plan_s, p = _median(lambda: plan(False))
        verified_s, _ = _median(lambda: plan(True))
        count = store.head(session).high_water
    finally:
        store.close()
    expect(
        p.kind == "ready" and len(p.calls) == 1,
        f"the crashed log's plan is {p.kind} with {len(p.calls)} dangling calls, not one",
    )
    return RecoveryPoint(
        events=count,
        plan_ms=float(f"{plan_s * 1000:.4g}"),
        plan_verified_ms=float(f"{verified_s * 1000:.4g}"),
        decision=p.calls[0].decision,
    )
