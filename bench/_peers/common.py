"""What every system's run shares: the step's bytes, the timing harness, storage and memory probes.

A system module exposes `run(steps, workdir, bound_s) -> Measured`, called in a process of its own
so that its peak memory is its own. Per-step times exclude everything but persisting the step;
storage is sampled between steps (outside the timed region) on a grid that is dense at the start,
so that it can be drawn against steps on a log scale.
"""

from __future__ import annotations

import json
import resource
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec
from bench.step import ARGS, RESULT

SystemName = Literal[
    "floor",
    "bubu",
    "openai-agents",
    "google-adk",
    "langgraph",
    "openai-agents-loop",
    "google-adk-loop",
    "langgraph-loop",
    "pydantic-ai-loop",
]
SYSTEMS: tuple[SystemName, ...] = (
    "floor",
    "bubu",
    "openai-agents",
    "google-adk",
    "langgraph",
    "openai-agents-loop",
    "google-adk-loop",
    "langgraph-loop",
    "pydantic-ai-loop",
)
LOOPS: tuple[SystemName, ...] = tuple(s for s in SYSTEMS if s.endswith("-loop"))
"""The peers' own agent loops (instant model, no-op tool, their persistence on)."""

CALL_NAME = "noop"
ARGS_JSON = json.dumps(ARGS)
"""The tool call's arguments as the wire carries them (about 200 B)."""

__all__ = ["ARGS", "ARGS_JSON", "CALL_NAME", "RESULT"]


class RecoveryPoint(msgspec.Struct, frozen=True, kw_only=True):
    """Bubu's recovery plan after a crash, at one log size."""

    events: int
    plan_ms: float
    """Read the session and build the plan (what `bubu recover` decides from)."""
    plan_verified_ms: float
    """The same plus recomputing the hash chain, as `recover_session` does."""
    decision: str


class Measured(msgspec.Struct, kw_only=True):
    """Everything one system's run produced; the parent turns it into a row and plots."""

    system: str
    steps: int
    steps_done: int
    stopped: bool
    step_s: list[float]
    storage: list[tuple[int, int]]
    """(steps persisted, bytes) samples taken between steps."""
    final_bytes: int
    reload_s: float
    reload_items: int
    base_mb: float
    peak_mb: float
    config: str
    """How the system's storage is set up (journal mode, sync), for the notes under the table."""
    recovery: list[RecoveryPoint] = msgspec.field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)
    """The machine's 1-minute load average when the run started and ended (other work adds
    noise)."""


def sample_points(steps: int) -> set[int]:
    """Step counts at which storage is sampled: 1, 2, 5, 10, 20, 50 … and 50 even points."""
    points = {steps}
    k = 1
    while k < steps:
        points.update(p for p in (k, 2 * k, 5 * k) if p <= steps)
        k *= 10
    every = max(1, steps // 50)
    points.update(range(every, steps + 1, every))
    return points


def logical_bytes(path: Path) -> int:
    """The database's size as a reader sees it (pages in the file and the WAL), without a
    checkpoint."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        pages = int(db.execute("PRAGMA page_count").fetchone()[0])
        size = int(db.execute("PRAGMA page_size").fetchone()[0])
    finally:
        db.close()
    return pages * size


def journal_mode(path: Path) -> str:
    """The journal mode the system left its database in (WAL persists; anything else reads as
    delete)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(db.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        db.close()


def final_bytes(path: Path) -> int:
    """The database file plus its WAL after a full checkpoint, once every writer is closed."""
    db = sqlite3.connect(path)
    try:
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
        if mode == "wal":
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    wal = Path(f"{path}-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def rss_mb() -> float:
    """This process's peak resident memory so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def median_reload(load: Callable[[], int], *, repeat: int = 3) -> tuple[float, int]:
    """Median seconds of `repeat` fresh reloads, and how many items the last one returned."""
    times = []
    items = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        items = load()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), items


async def amedian_reload(
    load: Callable[[], Awaitable[int]], *, repeat: int = 3
) -> tuple[float, int]:
    """`median_reload` for a system whose load is a coroutine, timed inside one event loop."""
    times = []
    items = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        items = await load()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), items


@dataclass(slots=True)
class LoopClock:
    """Times a peer's own agent loop from the model's side, as bench/_peers/bubu_engine.py does.

    The peer's loop calls an instant model that asks `model_enter` whether to answer with one more
    tool call; a step is the wall time between two consecutive model calls, minus the time spent
    inside the model and the no-op tool (storage is sampled inside the model, so it is not
    counted). After `steps` calls, or once `bound_s` has passed, the model answers with a final
    text and the loop ends.
    """

    steps: int
    bound_s: float
    storage_of: Callable[[], int] | None
    entries: list[float] = field(default_factory=list)
    inside: list[float] = field(default_factory=list)
    tools: list[float] = field(default_factory=list)
    storage: list[tuple[int, int]] = field(default_factory=list)
    stopped: bool = False
    _points: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._points = sample_points(self.steps)

    def model_enter(self) -> tuple[float, int | None]:
        """Stamp a model call: its start, and the number of the tool call to make (None: end)."""
        t0 = time.perf_counter()
        self.entries.append(t0)
        done = len(self.entries) - 1  # steps fully through the loop before this call
        out_of_time = done > 0 and t0 - self.entries[0] > self.bound_s
        if self.storage_of is not None and (
            done in self._points or (out_of_time and done < self.steps)
        ):
            self.storage.append((done, self.storage_of()))
        if done >= self.steps or out_of_time:
            self.stopped = done < self.steps
            return t0, None
        return t0, done

    def model_leave(self, t0: float) -> None:
        """The model call that started at `t0` returns."""
        self.inside.append(time.perf_counter() - t0)

    def tool(self, seconds: float) -> None:
        """One no-op tool call took `seconds`."""
        self.tools.append(seconds)

    @property
    def done(self) -> int:
        """Steps completed: tool calls answered and followed by another model call."""
        return len(self.entries) - 1

    def step_s(self, system: str) -> list[float]:
        """Per-step loop times, once the loop is checked to have run one tool per step."""
        done = self.done
        expect(done >= 1, f"{system} ran no step")
        expect(len(self.tools) == done, f"{system} ran {len(self.tools)} tools for {done} steps")
        expect(len(self.inside) == done + 1, f"{system} left a model call unfinished")
        return [
            self.entries[i + 1] - self.entries[i] - self.inside[i] - self.tools[i]
            for i in range(done)
        ]

    def measured(
        self,
        *,
        system: str,
        final: int,
        reload: tuple[float, int],
        base_mb: float,
        config: str,
    ) -> Measured:
        """The run's result, once the reload is checked to give back every call and result."""
        step_s = self.step_s(system)
        reload_s, items = reload
        expect(
            items == 2 * self.done,
            f"{system} reloaded {items} calls and results, ran {2 * self.done}",
        )
        return Measured(
            system=system,
            steps=self.steps,
            steps_done=self.done,
            stopped=self.stopped,
            step_s=step_s,
            storage=self.storage,
            final_bytes=final,
            reload_s=reload_s,
            reload_items=items,
            base_mb=base_mb,
            peak_mb=rss_mb(),
            config=config,
        )


@dataclass(slots=True)
class Tally:
    """Per-step times and storage samples of a loop-driven system, and its time bound."""

    steps: int
    bound_s: float
    storage_of: Callable[[], int]
    times: list[float] = field(default_factory=list)
    storage: list[tuple[int, int]] = field(default_factory=list)
    stopped: bool = False
    _points: set[int] = field(default_factory=set)
    _start: float = 0.0

    def __post_init__(self) -> None:
        self._points = sample_points(self.steps)
        self._start = time.perf_counter()

    def record(self, seconds: float) -> bool:
        """Record one step's time; False when the loop must stop (all done, or out of time)."""
        self.times.append(seconds)
        done = len(self.times)
        if done in self._points:
            self.storage.append((done, self.storage_of()))
        if done >= self.steps:
            return False
        if time.perf_counter() - self._start > self.bound_s:
            self.stopped = True
            if done not in self._points:
                self.storage.append((done, self.storage_of()))
            return False
        return True

    def measured(
        self,
        *,
        system: str,
        path: Path,
        reload: tuple[float, int],
        unit: str,
        base_mb: float,
        config: str,
    ) -> Measured:
        """The run's result, once the reload is checked to give back every item written."""
        reload_s, items = reload
        done = len(self.times)
        expect(items == 2 * done, f"{system} reloaded {items} {unit}, wrote {2 * done}")
        return Measured(
            system=system,
            steps=self.steps,
            steps_done=done,
            stopped=self.stopped,
            step_s=self.times,
            storage=self.storage,
            final_bytes=final_bytes(path),
            reload_s=reload_s,
            reload_items=items,
            base_mb=base_mb,
            peak_mb=rss_mb(),
            config=config,
        )


def expect(cond: bool, what: str) -> None:
    """Fail the run loudly when a system did not keep what it was given (a broken measurement)."""
    if not cond:
        raise RuntimeError(what)
