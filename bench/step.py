"""The runtime's own cost per agent step, against the durable-append floor, in one run.

A step is one model response with one tool call (~200 B of arguments) and one tool result
(~2 KB), driven through the real engine (`Runner`: two commits a step, the response with its
synced dispatch and the outcome with the next request's note, and the folds) with an instant
in-process model and a no-op side-effecting tool, so that what is measured is everything except
model and tool time. The floor is bench/append.py's
durable-append floor, measured in the same run: the step's call and result inserted raw into
SQLite (WAL, synchronous=FULL), each in its own transaction. Storage per step is each database's
file and WAL after the closing checkpoint, divided by the steps.

The two sides run in alternating rounds (floor then Bubu, then Bubu then floor, ...), each round
on fresh files, and the figures are the medians of the rounds (the ratio is the median of each
round's ratio), so a machine whose load changes during the run slows both sides alike.

Usage: python bench/step.py [--steps N] [--rounds R]. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from append import FloorSide, on_disk, step_events  # type: ignore[import-not-found]  # a sibling script
from bubu.engine.driver import RunConfig
from bubu.engine.session import Host, new_session, start_turn
from bubu.events import EffectClass
from bubu.log import codec
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

ARGS = {"path": "src/module.py", "note": "x" * 160}
RESULT = ("line of tool output " * 8 + "\n") * 13  # about 2 KB


class InstantModel:
    """Answers every call at once with one tool call, then ends after `steps` calls (the same
    call and result every step, so the runs below turn the loop limit off)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.seconds = 0.0

    spec = "bench:instant"
    context_window = 1_000_000

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        t0 = time.perf_counter()
        if request.purpose == "summary":
            text = (
                "## Goal\nbench\n## Progress\n"
                + "step done. " * 40
                + "\n## Next steps\nmore\n## Critical context\nnone\n"
            )
            out = ModelResponse(parts=(TextPart(text=text),), usage=Usage(output_tokens=1))
        elif request.ordinal >= self.steps:
            out = ModelResponse(parts=(TextPart(text="done"),), usage=Usage(output_tokens=1))
        else:
            call = ToolCallPart(call_id=f"c{request.ordinal}", name="noop", arguments=ARGS)
            out = ModelResponse(parts=(call,), usage=Usage(output_tokens=1), stop_reason="tool_use")
        self.seconds += time.perf_counter() - t0
        return out


class NoopTool:
    """A side-effecting tool (so its dispatch is fully synced) that does nothing."""

    def __init__(self) -> None:
        self.name = "noop"
        self.description = "does nothing"
        self.parameters: dict[str, Any] = {"type": "object"}
        self.effect: EffectClass = "side_effecting"
        self.seconds = 0.0

    def permission(self, args: dict[str, Any], ctx: ToolContext) -> str | None:
        return None

    def prepare(self, args: dict[str, Any], ctx: ToolContext) -> WriteIntent | None:
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext, intent: WriteIntent | None) -> ToolResult:
        t0 = time.perf_counter()
        out = ToolResult(output=RESULT)
        self.seconds += time.perf_counter() - t0
        return out


def bubu_steps(tmp: Path, steps: int) -> tuple[float, float, float, float]:
    """Mean and total runtime seconds per step through the engine (model and tool time removed),
    the database's bytes per step (file and WAL after the closing checkpoint) and the CPU seconds
    per step."""
    store = SQLiteStore(tmp / "bubu.db")
    model, tool = InstantModel(steps), NoopTool()
    host = Host(
        store=store,
        provider=model,
        tools={"noop": tool},
        config=RunConfig(max_steps=steps + 5, loop_limit=None),
    )
    info = new_session(store, task="bench", workspace=tmp, model=model.spec)
    t0, cpu0 = time.perf_counter(), time.process_time()
    reason = start_turn(host, info, "bench")
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert reason == "completed", reason
    runtime = wall - model.seconds - tool.seconds
    store.close()
    return runtime / steps, wall, on_disk(tmp / "bubu.db") / steps, cpu / steps


def floor_steps(tmp: Path, steps: int) -> tuple[list[float], float]:
    """Per-step seconds of bench/append.py's durable-append floor: the same call and result
    bytes inserted raw, each in its own fully synced transaction (what any durable agent pays)."""
    session = "ses_bench"
    payloads = [tuple(codec.encode(e) for e in step_events(session, n)) for n in range(steps)]
    floor = FloorSide(tmp / "floor.db", payloads)
    try:
        times = [floor.step(n) / 1e9 for n in range(steps)]
    finally:
        floor.close()
    return times, on_disk(tmp / "floor.db") / steps


def main() -> None:
    """Run both sides in alternating rounds and print the medians of the rounds."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=500, help="Steps per round and side.")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    steps = args.steps
    floors, bubus, ratios, cpus, walls = [], [], [], [], []
    floor_bytes = bubu_bytes = 0.0
    with tempfile.TemporaryDirectory() as d:
        for n in range(args.rounds):
            tmp = Path(d) / f"round{n}"
            (tmp / "floor").mkdir(parents=True)
            (tmp / "bubu").mkdir()
            if n % 2 == 0:
                floor, floor_bytes = floor_steps(tmp / "floor", steps)
                per_step, wall, bubu_bytes, cpu = bubu_steps(tmp / "bubu", steps)
            else:
                per_step, wall, bubu_bytes, cpu = bubu_steps(tmp / "bubu", steps)
                floor, floor_bytes = floor_steps(tmp / "floor", steps)
            floor_mean = statistics.fmean(floor)
            floors.append(floor_mean)
            bubus.append(per_step)
            ratios.append(per_step / floor_mean)
            cpus.append(cpu)
            walls.append(wall)
            print(
                f"round {n + 1}: floor {floor_mean * 1000:.3f} ms, bubu {per_step * 1000:.3f} ms, "
                f"{per_step / floor_mean:.2f}x"
            )
    floor_ms = statistics.median(floors) * 1000
    bubu_ms = statistics.median(bubus) * 1000
    ratio = statistics.median(ratios)
    print(f"steps: {steps} per round and side, {args.rounds} rounds")
    print(
        "floor (bench/append.py: call and result, each a synced raw commit): "
        f"median {floor_ms:.3f} ms"
    )
    print(f"bubu runtime per step (model and tool time removed): median {bubu_ms:.3f} ms")
    print(
        f"ratio: median {ratio:.2f}x of the rounds ({min(ratios):.2f}-{max(ratios):.2f}x)  "
        "(target <= 3x)"
    )
    print(f"bubu CPU per step: median {statistics.median(cpus) * 1000:.3f} ms")
    print(
        f"storage per step: bubu {bubu_bytes:,.0f} B, floor {floor_bytes:,.0f} B, "
        f"{bubu_bytes / floor_bytes:.2f}x  (target <= 1.2x)"
    )
    print(
        json.dumps(
            {
                "steps": steps,
                "rounds": args.rounds,
                "runtime_step_ms": round(bubu_ms, 4),
                "floor_step_ms": round(floor_ms, 4),
                "ratio": round(ratio, 3),
                "ratios": [round(r, 3) for r in ratios],
                "cpu_step_ms": round(statistics.median(cpus) * 1000, 4),
                "bytes_per_step": round(bubu_bytes),
                "floor_bytes_per_step": round(floor_bytes),
                "storage_ratio": round(bubu_bytes / floor_bytes, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
