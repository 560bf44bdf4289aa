"""A running session's memory against its length: RSS at 10,000 and at 100,000 steps.

One turn of N steps, each one model response calling `probe`, an in-process read-only tool that
prints 1,500 bytes of its own (distinct arguments and output every step), driven through the real
engine (`Host`, `new_session`, `start_turn`) on a SQLite file, with compaction on (a window small
enough that the history is summarized every few hundred steps). The model is instant and
in-process; it keeps nothing of the requests it sees. The resident set size is read from
/proc/self/status (after a garbage collection) at fixed steps of the same process, so the figure
is what the folds keep, not what the interpreter started with.

Targets: RSS at 100,000 steps <= 1.2x RSS at 10,000 steps, and <= 150 MB.

Usage: python bench/memory.py [--steps N] [--at STEP ...] [--window TOKENS].
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bubu.context.policy import ContextPolicy
from bubu.engine.driver import RunConfig
from bubu.engine.session import Host, new_session, start_turn
from bubu.events import EffectClass
from bubu.log.sqlite import SQLiteStore
from bubu.providers.base import (
    DeltaSink,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    Usage,
)
from bubu.providers.scripted import summary_response
from bubu.tools.base import ToolContext, ToolResult, WriteIntent

MIB = 1 << 20


def rss_bytes() -> int:
    """This process's resident set size, after a collection."""
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Probe:
    """probe{step}: prints 1,500 bytes that name the step."""

    name = "probe"
    description = "Print one step's output."
    parameters: dict[str, Any] = {  # noqa: RUF012 (the Tool protocol declares a plain attribute)
        "type": "object",
        "properties": {"step": {"type": "integer"}},
        "required": ["step"],
    }
    effect: EffectClass = "read_only"

    def permission(self, args: dict[str, Any], ctx: ToolContext) -> str | None:
        """Never asks."""
        return None

    def prepare(self, args: dict[str, Any], ctx: ToolContext) -> WriteIntent | None:
        """Not a write."""
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext, intent: WriteIntent | None) -> ToolResult:
        """The step's output."""
        step = int(args["step"])
        return ToolResult(output="".join(f"{step:07d}:{i:03d} output line\n" for i in range(60)))


class InstantModel:
    """Calls `probe` once per step for `steps` steps, then ends; samples RSS at `at`."""

    spec = "bench:instant"

    def __init__(self, steps: int, at: list[int], window: int) -> None:
        self.steps, self.at, self.context_window = steps, set(at), window
        self.rss: dict[int, int] = {}
        self.times: dict[int, float] = {}
        self.summaries = 0

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Answer at once; measure at the sampled steps."""
        if request.purpose == "summary":
            self.summaries += 1
            return summary_response(request)
        n = request.ordinal
        if n in self.at:
            self.rss[n] = rss_bytes()
            self.times[n] = time.perf_counter()
        if n >= self.steps:
            return ModelResponse(parts=(TextPart(text="done"),), usage=Usage(output_tokens=1))
        call = ToolCallPart(call_id=f"c{n}", name="probe", arguments={"step": n})
        size = sum(len(str(m)) for m in request.messages[-4:])
        return ModelResponse(parts=(call,), usage=Usage(input_tokens=size // 4, output_tokens=8))


def run(steps: int, at: list[int], window: int, tmp: Path) -> dict[str, Any]:
    """Drive the session and return the figures."""
    model = InstantModel(steps, at, window)
    store = SQLiteStore(tmp / "bubu.db")
    config = RunConfig(
        max_steps=steps + 5, loop_limit=None, context_window=window, context=ContextPolicy()
    )
    host = Host(store=store, provider=model, tools={"probe": Probe()}, config=config)
    info = new_session(store, task="run probe once per step", workspace=tmp, model=model.spec)
    start = rss_bytes()
    t0 = time.perf_counter()
    reason = start_turn(host, info, "run probe once per step")
    wall = time.perf_counter() - t0
    assert reason == "completed", reason
    compactions = len(store.read(info.id, kinds=("compaction",)))
    store.close()
    return {
        "steps": steps,
        "window": window,
        "compactions": compactions,
        "rss_start_mb": round(start / MIB, 1),
        "rss_mb": {str(k): round(v / MIB, 1) for k, v in sorted(model.rss.items())},
        "wall_s": round(wall, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    """Run and print the figures; the last line is one JSON object."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--at", type=int, nargs="*", default=None, help="steps to sample RSS at")
    ap.add_argument("--window", type=int, default=32_000, help="the model's window in tokens")
    ap.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep the database in DIR (for timing the reading commands on it)",
    )
    args = ap.parse_args()
    at = args.at or sorted({min(s, args.steps) for s in (1_000, 10_000, args.steps)})
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        r = run(args.steps, at, args.window, args.keep)
    else:
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
            r = run(args.steps, at, args.window, Path(d))
    rss = r["rss_mb"]
    print(f"steps {r['steps']:,}; {r['compactions']} compactions; wall {r['wall_s']} s")
    print("RSS: " + ", ".join(f"step {k}: {v} MB" for k, v in rss.items()))
    if "10000" in rss and str(args.steps) in rss and args.steps > 10_000:
        ratio = rss[str(args.steps)] / rss["10000"]
        r["ratio_to_10k"] = round(ratio, 3)
        print(f"RSS({args.steps}) / RSS(10000): {ratio:.3f}  (target <= 1.2; <= 150 MB)")
    print(json.dumps(r, sort_keys=True))


if __name__ == "__main__":
    main()
