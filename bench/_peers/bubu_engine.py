"""Bubu through its real engine path: `start_turn` drives the runner with an instant in-process
model (one tool call per model call) and a no-op side-effecting tool returning about 2 KB.

The engine runs the loop, so a step is timed from the model's side: the wall time between two
consecutive model calls is one step (commit the response, synced dispatch, run the tool, commit the
outcome, fold, build and digest the next request, append its note), minus the time spent inside the
model and the tool (about zero, and subtracted anyway, with the storage sampling done there).

The model declares a common window (200k tokens), so the engine compacts as a long task would:
the summarizer is the same instant model (its time subtracted too), the rest of the compaction
(choosing the watermark, rendering the span, storing the checkpoint, the note) is the step's.
Resuming is timed as `bubu resume` does it before its next model call.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench._peers.common import (
    ARGS,
    CALL_NAME,
    Measured,
    expect,
    final_bytes,
    logical_bytes,
    median_reload,
    rss_mb,
    sample_points,
)
from bench.step import InstantModel, NoopTool

from bubu.engine.driver import RunConfig, Runner, owner_id
from bubu.engine.session import Host, new_session, start_turn
from bubu.events import Compaction, SystemNote
from bubu.log.sqlite import SQLiteStore
from bubu.providers.base import (
    DeltaSink,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    Usage,
)
from bubu.tools.base import ToolContext, ToolResult, WriteIntent

WINDOW = 200_000
"""The model's context window in tokens: a common size, so that the engine compacts as it would."""

VOCABULARY = (
    "apple breeze canyon dolphin ember falcon glacier harbor island jasmine kettle lantern meadow "
    "nectar orchard pebble quartz river saffron timber umber velvet willow yonder zephyr"
)
SUMMARY = "\n\n".join(
    f"{section}\n"
    + f"{section[3:]}: the benchmark's no-op steps, nothing else to keep. " * 10
    + f"Words of its own: {VOCABULARY}."
    for section in ("## Goal", "## Progress", "## Next steps", "## Critical context")
)
"""A summary that passes the engine's validation (four sections, about 2.5 KB, and words of its
own beyond the prompt's, as a real summary has)."""


class TimedModel(InstantModel):
    """`InstantModel` that stamps each call, samples storage there, answers compaction requests
    with a valid summary, and ends at `steps` tool calls or at the time bound."""

    context_window = WINDOW

    def __init__(self, steps: int, bound_s: float, path: Path | None) -> None:
        super().__init__(steps)
        self.bound_s = bound_s
        self.path = path
        self.entries: list[float] = []
        self.inside: list[float] = []
        """Per step: time inside the model, the step's compaction summary included."""
        self.storage: list[tuple[int, int]] = []
        self.stopped = False
        self.summaries = 0
        self._points = sample_points(steps)

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """One tool call per call until `steps` calls or the time bound, then a final text."""
        t0 = time.perf_counter()
        if request.purpose == "summary":
            # Asked while step len(entries)-1 is under way: its time is the model's, not ours.
            self.summaries += 1
            out = ModelResponse(parts=(TextPart(text=SUMMARY),), usage=Usage(output_tokens=600))
            self.inside[-1] += time.perf_counter() - t0
            return out
        self.entries.append(t0)
        done = len(self.entries) - 1  # steps fully persisted before this call
        out_of_time = done > 0 and t0 - self.entries[0] > self.bound_s
        if self.path is not None and (done in self._points or (out_of_time and done < self.steps)):
            self.storage.append((done, logical_bytes(self.path)))
        if done >= self.steps or out_of_time:
            self.stopped = done < self.steps
            out = ModelResponse(parts=(TextPart(text="done"),), usage=Usage(output_tokens=1))
        else:
            # input_tokens=0 (unknown) leaves the engine's token calibration at 1: an instant
            # model has no real count, and a made-up one would skew when compaction fires.
            call = ToolCallPart(call_id=f"c{done}", name=CALL_NAME, arguments=dict(ARGS))
            out = ModelResponse(parts=(call,), usage=Usage(output_tokens=1), stop_reason="tool_use")
        self.inside.append(time.perf_counter() - t0)
        return out


class TimedTool(NoopTool):
    """`NoopTool` that keeps each call's duration."""

    def __init__(self) -> None:
        super().__init__()
        self.durations: list[float] = []

    def run(self, args: dict[str, Any], ctx: ToolContext, intent: WriteIntent | None) -> ToolResult:
        """Return the ~2 KB result, timed."""
        t0 = time.perf_counter()
        out = super().run(args, ctx, intent)
        self.durations.append(time.perf_counter() - t0)
        return out


def _resume(path: Path) -> int:
    """What `bubu resume` does before its next model call: open the store, take the session's
    lease, catch a runner up on the whole log (turn, context and compaction folds) and build the
    next request. Returns the calls plus results the turn holds."""
    store = SQLiteStore(path)
    try:
        info = store.sessions()[0]
        lease = store.acquire_lease(info.id, owner_id(), 30.0)
        try:
            runner = Runner(
                store=store,
                session=info,
                provider=TimedModel(0, 0.0, None),
                tools={CALL_NAME: NoopTool()},
                lease=lease,
            )
            runner.request_builder.next()
        finally:
            store.release_lease(lease)
        calls = runner.turn.calls.values()
        return len(calls) + sum(c.outcome_seq is not None for c in calls)
    finally:
        store.close()


def _compactions(path: Path) -> tuple[int, int]:
    """How many compactions the engine made, and how many of them failed."""
    store = SQLiteStore(path)
    try:
        notes = [
            r.event.content.note
            for r in store.read(store.sessions()[0].id, kinds=["compaction"])
            if isinstance(r.event.content, SystemNote)
        ]
    finally:
        store.close()
    return len(notes), sum(isinstance(n, Compaction) and not n.ok for n in notes)


def run(steps: int, workdir: Path, bound_s: float) -> Measured:
    """Drive one turn of `steps` tool steps through the engine and reload the session."""
    path = workdir / "bubu.db"
    store = SQLiteStore(path)
    model, tool = TimedModel(steps, bound_s, path), TimedTool()
    host = Host(
        store=store,
        provider=model,
        tools={CALL_NAME: tool},
        config=RunConfig(max_steps=steps + 5, loop_limit=None),
    )
    info = new_session(store, task="bench", workspace=workdir, model=model.spec)
    base = rss_mb()
    reason = start_turn(host, info, "bench")
    store.close()
    expect(reason == "completed", f"bubu's turn ended {reason!r}")
    done = len(model.entries) - 1
    expect(len(tool.durations) == done, f"bubu ran {len(tool.durations)} tools for {done} steps")
    step_s = [
        model.entries[i + 1] - model.entries[i] - model.inside[i] - tool.durations[i]
        for i in range(done)
    ]
    compactions, failed = _compactions(path)
    expect(failed == 0, f"{failed} of bubu's {compactions} compactions failed")
    reload_s, items = median_reload(lambda: _resume(path))
    expect(items == 2 * done, f"bubu resumed with {items} calls and results, wrote {2 * done}")
    return Measured(
        system="bubu",
        steps=steps,
        steps_done=done,
        stopped=model.stopped,
        step_s=step_s,
        storage=model.storage,
        final_bytes=final_bytes(path),
        reload_s=reload_s,
        reload_items=items,
        base_mb=base,
        peak_mb=rss_mb(),
        config=f"SQLiteStore defaults: WAL, the dispatch fully synced (synchronous=FULL), the "
        "other appends synchronous=NORMAL; per step the engine appends a request note, the "
        "response, the dispatch and the outcome, with a hash chain; a "
        f"{WINDOW:,}-token window, so it compacted {compactions} times (instant valid summaries)",
    )
