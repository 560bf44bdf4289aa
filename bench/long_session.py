"""Bounded context over a long session: 10,000 steps and about 200 MB of tool output (DESIGN §6).

Each step is one model response calling `noise`, an in-process read-only tool that prints 20,000
bytes of its own (never repeated, so content addressing cannot share them), driven through the
real engine (`Host`, `new_session`, `start_turn`: offload into the blob table, compaction
checkpoints, request notes) on a SQLite file. The model is instant and in-process: it measures
every request it receives and answers summary requests with a valid four-section summary.

Reported, against a baseline from the same run where there is one:
- the largest request (the engine's own estimate, and canonical bytes / 4) against the budget;
- the share of requests holding every line of the user's goal (target 100%);
- the mean share of each request's messages (canonical JSON) that is a byte-identical prefix of
  the previous request's, outside compaction steps (target >= 95%);
- tokens sent per step with offload and compaction, and without (every message raw, whole);
- the time to build the next request (`Runner.build_request` + `request_digest`) at step 100
  and at the first step of the run's last tenth whose request holds as many messages, so that
  only the length of the log differs (target ratio <= 2);
- the log's size on disk against the raw tool output.

Usage: python bench/long_session.py [--steps N] [--quick] [--window TOKENS]
       [--policy FIELD=VALUE …]. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import sqlite3
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from bubu.context.compaction import SECTIONS
from bubu.context.policy import ContextPolicy
from bubu.engine.driver import RunConfig
from bubu.engine.session import Host, new_session, start_turn
from bubu.events import Compaction, EffectClass, ModelRequestNote, SystemNote
from bubu.log.sqlite import SQLiteStore
from bubu.providers.base import (
    AssistantMessage,
    DeltaSink,
    Message,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolResultsMessage,
    Usage,
    UserMessage,
)
from bubu.tools.base import ToolContext, ToolResult, WriteIntent

OUTPUT_BYTES = 20_000
"""What `noise` prints per step (10,000 steps: 200 MB)."""

TASK = (
    "Run the noise tool once per step until told to stop.\n"
    "Keep every output retrievable: never re-run a step to see its output again."
)

REPS = 101
"""Builds timed at each measured step; the fastest is reported (on a shared machine, other
processes only ever add time, so the minimum is the steadiest estimate of the cost itself)."""

_encoder = msgspec.json.Encoder(order="sorted")


def output(step: int) -> str:
    """Step `step`'s output: OUTPUT_BYTES of numbered lines of pseudo-random hex, unique per
    step."""
    rng = random.Random(step)
    hexes = rng.randbytes(OUTPUT_BYTES // 2).hex()
    lines = (f"{step:05d}.{i:03d} {hexes[i * 64 : i * 64 + 64]}" for i in range(OUTPUT_BYTES // 74))
    text = "\n".join(lines)
    return (text + "\n" + "." * OUTPUT_BYTES)[: OUTPUT_BYTES - 1] + "\n"


@dataclass
class Ledger:
    """What the model and the tool observed, step by step."""

    raw_history: int = 0
    """Canonical bytes of every message so far with every result whole: what a session without
    offload or compaction would send."""
    output_bytes: int = 0
    sent: list[int] = field(default_factory=list)
    """Canonical bytes of each turn request (system, tools, messages)."""
    raw: list[int] = field(default_factory=list)
    shares: list[tuple[float, bool]] = field(default_factory=list)
    """(prefix share, compaction happened just before) for every turn request after the first."""
    misses: list[tuple[int, int]] = field(default_factory=list)
    """(bytes past the shared prefix, bytes of the newest step) for each request outside
    compaction."""
    summary_bytes: list[int] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    build_ms: dict[int, float] = field(default_factory=dict)
    """Milliseconds to build the next request and its digest (best of REPS), by step."""
    visible: dict[int, int] = field(default_factory=dict)
    """Messages in that request, by step."""
    late: int | None = None
    """The late step whose request has as many messages as the early one's (same size, long log)."""
    goal_kept: list[bool] = field(default_factory=list)
    """For each turn request: is every line of the user's goal in it?"""


class NoiseTool:
    """noise{step}: prints that step's 20,000 bytes."""

    name = "noise"
    description = "Print the output of one step."
    parameters: dict[str, Any] = {  # noqa: RUF012 (the Tool protocol declares a plain attribute)
        "type": "object",
        "properties": {"step": {"type": "integer"}},
        "required": ["step"],
    }
    effect: EffectClass = "read_only"

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def permission(self, args: dict[str, Any], ctx: ToolContext) -> str | None:
        """Never asks."""
        return None

    def prepare(self, args: dict[str, Any], ctx: ToolContext) -> WriteIntent | None:
        """Not a write."""
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext, intent: WriteIntent | None) -> ToolResult:
        """The step's output; the ledger counts it whole, as a raw session would send it."""
        step = int(args["step"])
        text = output(step)
        part = ToolResultPart(call_id=f"c{step}", name=self.name, content=text)
        self.ledger.raw_history += len(_encoder.encode(ToolResultsMessage(results=(part,))))
        self.ledger.output_bytes += len(text)
        return ToolResult(output=text)


_STEPS = re.compile(r"Steps folded so far: (\d+)")


def summary(request: ModelRequest) -> str:
    """A valid summary: the four sections, above the minimum size, folding the previous count."""
    (message,) = request.messages
    assert isinstance(message, UserMessage)
    prior = _STEPS.search(message.text)
    done = (int(prior.group(1)) if prior else 0) + message.text.count("CALL noise")
    body = {
        SECTIONS[0]: TASK,
        SECTIONS[1]: (
            f"Steps folded so far: {done}. Every step ran noise once and printed 20,000 bytes; "
            "each output is offloaded whole and can be paged with read_result or searched with "
            "search_result by its handle. No step failed, nothing was written to the workspace."
        ),
        SECTIONS[2]: "Run the next step with noise, then the one after, until told to stop.",
        SECTIONS[3]: " ".join(
            f"Constraint {i}: outputs are numbered step.line and are never repeated across steps."
            for i in range(1, 25)
        ),
    }
    return "\n\n".join(f"{k}\n{v}" for k, v in body.items()) + "\n"


@dataclass
class InstantModel:
    """Calls `noise` once per step for `steps` steps, then ends; measures each request."""

    steps: int
    window: int
    ledger: Ledger
    early: int
    """The step whose build time is the baseline (100, or half of a shorter run)."""
    host: Host | None = None
    spec: str = "bench:instant"
    _prev: list[tuple[Message, bytes]] = field(default_factory=list)
    _summarized: bool = False
    _header: int = 0

    @property
    def context_window(self) -> int:
        """The window the model claims."""
        return self.window

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Measure the request, then answer at once."""
        if request.purpose == "summary":
            self._summarized = True
            self.ledger.summary_bytes.append(len(_encoder.encode(request)))
            text = summary(request)
            return ModelResponse(
                parts=(TextPart(text=text),), usage=Usage(output_tokens=len(text) // 4)
            )
        n = request.ordinal
        self.ledger.arrivals.append(time.perf_counter())
        said = [m.text for m in request.messages if isinstance(m, UserMessage)]
        self.ledger.goal_kept.append(
            all(any(line in t for t in said) for line in TASK.splitlines() if line.strip())
        )
        size = self._measure(request)
        self._maybe_time_build(n, len(request.messages))
        if n >= self.steps:
            parts: tuple[TextPart | ToolCallPart, ...] = (TextPart(text="done"),)
        else:
            parts = (ToolCallPart(call_id=f"c{n}", name="noise", arguments={"step": n}),)
        self.ledger.raw_history += len(_encoder.encode(AssistantMessage(parts=parts)))
        # Report what a tokenizer would count: about the estimate, so calibration stays near 1.
        usage = Usage(input_tokens=size // 4, output_tokens=10)
        return ModelResponse(
            parts=parts, usage=usage, stop_reason="tool_use" if n < self.steps else "end_turn"
        )

    def _measure(self, request: ModelRequest) -> int:
        """Record the request's size, its raw counterpart, and its shared prefix with the last
        one."""
        if not self._header:
            self._header = len(_encoder.encode([request.system, request.tools]))
            self.ledger.raw_history += len(_encoder.encode(UserMessage(text=TASK)))
        known = {id(m): b for m, b in self._prev}
        current = [(m, known.get(id(m)) or _encoder.encode(m)) for m in request.messages]
        size = self._header + sum(len(b) for _, b in current) + len(current) + 1
        self.ledger.sent.append(size)
        self.ledger.raw.append(self._header + self.ledger.raw_history)
        if self._prev:
            total = sum(len(b) for _, b in current) + max(len(current) - 1, 0) + 2
            common = _common(self._prev, current)
            self.ledger.shares.append((common / total, self._summarized))
            if not self._summarized:
                self.ledger.misses.append((total - common, _newest(current)))
        self._prev, self._summarized = current, False
        return size

    def _maybe_time_build(self, n: int, messages: int) -> None:
        """Time the build at the early step, at the last step, and at the first step of the last
        tenth of the run whose request is as large as the early one's (so that only the length
        of the log differs)."""
        ledger = self.ledger
        same = ledger.visible.get(self.early) == messages
        if n >= self.steps - max(500, self.steps // 10) and ledger.late is None and same:
            ledger.late = n
        if n in (self.early, self.steps) or n == ledger.late:
            self._time_build(n)

    def _time_build(self, n: int) -> None:
        """Time to build the next request and its digest, as the driver does before a call."""
        assert self.host is not None
        runner = self.host.runner
        assert runner is not None
        times = []
        for _ in range(REPS):
            t0 = time.perf_counter()
            nxt = runner.request_builder.next()
            times.append(time.perf_counter() - t0)
        self.ledger.build_ms[n] = min(times) * 1000
        self.ledger.visible[n] = len(nxt.request.messages)


def _newest(messages: list[tuple[Message, bytes]]) -> int:
    """Bytes of the newest step (its call and its results): content the model has never seen."""
    if len(messages) < 2 or not isinstance(messages[-1][0], ToolResultsMessage):
        return 0
    return len(messages[-1][1]) + len(messages[-2][1])


def _common(prev: list[tuple[Message, bytes]], cur: list[tuple[Message, bytes]]) -> int:
    """Bytes of the canonical array `[m1,m2,…]` of `cur` that are a prefix of `prev`'s."""
    n = 1  # "["
    for (pm, pb), (cm, cb) in zip(prev, cur, strict=False):
        if pm is cm or pb == cb:
            n += len(cb) + 1  # the message and its comma
            continue
        return n + _prefix(pb, cb)
    return n


def _prefix(a: bytes, b: bytes) -> int:
    """Length of the common prefix of two byte strings (binary search over slices)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def run(steps: int, window: int, policy: ContextPolicy, tmp: Path) -> dict[str, Any]:
    """Drive the session and return the figures."""
    ledger = Ledger()
    model = InstantModel(steps=steps, window=window, ledger=ledger, early=min(100, steps // 2))
    store = SQLiteStore(tmp / "bubu.db")
    config = RunConfig(max_steps=steps + 5, context_window=window, context=policy)
    host = Host(store=store, provider=model, tools={"noise": NoiseTool(ledger)}, config=config)
    model.host = host
    info = new_session(store, task=TASK, workspace=tmp, model=model.spec)
    t0 = time.perf_counter()
    reason = start_turn(host, info, TASK)
    wall = time.perf_counter() - t0
    assert reason == "completed", reason
    notes = [
        (r.seq, c.note)
        for r in store.read(info.id, kinds=("model_request", "compaction"))
        if isinstance(c := r.event.content, SystemNote)
    ]
    verified = store.verify(info.id).ok
    store.close()
    log_bytes = sum(p.stat().st_size for p in tmp.glob("bubu.db*"))
    with contextlib.closing(sqlite3.connect(tmp / "bubu.db")) as db:
        (blob_bytes,) = db.execute("SELECT coalesce(sum(length(data)), 0) FROM blobs").fetchone()
        (event_bytes,) = db.execute(
            "SELECT coalesce(sum(length(payload)), 0) FROM events"
        ).fetchone()

    calls = [n for _, n in notes if isinstance(n, ModelRequestNote)]
    cps = [n for _, n in notes if isinstance(n, Compaction)]
    budget = int(min(policy.compact_at * window, window - policy.reserve(window)))
    steady = [s for s, compacted in ledger.shares if not compacted]
    gaps = [b - a for a, b in zip(ledger.arrivals, ledger.arrivals[1:], strict=False)]
    first_gaps, last_gaps = gaps[50:150], gaps[-100:]
    early, last = model.early, steps
    late = ledger.late if ledger.late is not None else last
    return {
        "steps": steps,
        "window": window,
        "budget_tokens": budget,
        "max_request_tokens": max(ledger.sent) // 4,
        "max_request_estimate": max(n.estimated_tokens for n in calls),
        "max_summary_request_tokens": max(ledger.summary_bytes, default=0) // 4,
        "within_budget": max([*ledger.sent, *ledger.summary_bytes]) // 4 <= budget,
        "compactions": len(cps),
        "failed_compactions": sum(1 for c in cps if not c.ok),
        "goal_share": round(sum(ledger.goal_kept) / max(len(ledger.goal_kept), 1), 4),
        "summary_calls": len(ledger.summary_bytes),
        "prefix_share_mean": round(statistics.fmean(steady), 4),
        "prefix_share_p10": round(sorted(steady)[len(steady) // 10], 4),
        "prefix_share_mean_all": round(statistics.fmean(s for s, _ in ledger.shares), 4),
        "uncached_tokens_per_step": round(statistics.fmean(m for m, _ in ledger.misses) / 4),
        "newest_step_tokens": round(statistics.fmean(n for _, n in ledger.misses) / 4),
        "tokens_per_step": round(statistics.fmean(ledger.sent) / 4),
        "tokens_per_step_raw": round(statistics.fmean(ledger.raw) / 4),
        "tokens_total": sum(ledger.sent) // 4,
        "tokens_total_raw": sum(ledger.raw) // 4,
        "build_ms": {str(k): round(v, 4) for k, v in sorted(ledger.build_ms.items())},
        "build_messages": {str(k): v for k, v in sorted(ledger.visible.items())},
        "build_early_step": early,
        "build_late_step": late,
        "build_ratio": round(ledger.build_ms[late] / ledger.build_ms[early], 3),
        "step_ms_early": round(statistics.median(first_gaps) * 1000, 3) if first_gaps else None,
        "step_ms_late": round(statistics.median(last_gaps) * 1000, 3) if last_gaps else None,
        "output_bytes": ledger.output_bytes,
        "log_bytes": log_bytes,
        "log_over_output": round(log_bytes / max(ledger.output_bytes, 1), 4),
        "blob_bytes": blob_bytes,
        "event_bytes": event_bytes,
        "verified": verified,
        "policy": msgspec.structs.asdict(policy),
        "wall_s": round(wall, 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def report(r: dict[str, Any]) -> None:
    """The figures for people, one line each (the JSON line follows)."""
    mib = 1 << 20
    share, p10, everything = (
        r["prefix_share_mean"],
        r["prefix_share_p10"],
        r["prefix_share_mean_all"],
    )
    early, late = r["build_early_step"], r["build_late_step"]
    lines = [
        f"steps: {r['steps']:,}; tool output {r['output_bytes'] / mib:,.1f} MiB; window "
        f"{r['window']:,} tokens; wall {r['wall_s']} s (load {r['load_avg_1m']})",
        f"largest request: {r['max_request_tokens']:,} tokens as the model counts them (the "
        f"engine's estimate before calibration: {r['max_request_estimate']:,}) of a budget of "
        f"{r['budget_tokens']:,}: " + ("within" if r["within_budget"] else "OVER"),
        f"compactions: {r['compactions']} ({r['failed_compactions']} failed) in "
        f"{r['summary_calls']:,} summarizer calls (each reads its span whole, in chunks); largest "
        f"summary request {r['max_summary_request_tokens']:,} tokens",
        f"requests holding every line of the user's goal: {r['goal_share']:.2%}  (target 100%)",
        f"prefix share of the previous request: mean {share:.2%} outside compaction steps "
        f"(p10 {p10:.2%}; {everything:.2%} with them)  (target >= 95%)",
        f"past the shared prefix per step: {r['uncached_tokens_per_step']:,} tokens, of which the "
        f"newest step's own call and result (never sent before): {r['newest_step_tokens']:,}",
        f"tokens sent per step: {r['tokens_per_step']:,} with offload and compaction, "
        f"{r['tokens_per_step_raw']:,} without "
        f"({r['tokens_per_step_raw'] / r['tokens_per_step']:,.0f}x)",
        "build the next request: "
        + ", ".join(
            f"step {k}: {v:.3f} ms ({r['build_messages'][k]} messages)"
            for k, v in r["build_ms"].items()
        )
        + f"; step {late} / step {early}"
        + (
            " (same size)"
            if r["build_messages"][str(late)] == r["build_messages"][str(early)]
            else ""
        )
        + f": {r['build_ratio']:.2f}  (target <= 2)",
        f"engine step (wall, model and tool included): median {r['step_ms_early']} ms early, "
        f"{r['step_ms_late']} ms late",
        f"log {r['log_bytes'] / mib:,.1f} MiB for {r['output_bytes'] / mib:,.1f} MiB of output "
        f"({r['log_over_output']:.3f}x: blobs {r['blob_bytes'] / mib:,.1f} MiB, event rows "
        f"{r['event_bytes'] / mib:,.1f} MiB, the rest SQLite pages and indexes); chain verified: "
        f"{r['verified']}",
    ]
    print("\n".join(lines))


def _policy(overrides: list[str]) -> ContextPolicy:
    """The default policy with `FIELD=VALUE` overrides (ints or floats, as the field's default
    is)."""
    base = ContextPolicy()
    changes: dict[str, Any] = {}
    for item in overrides:
        name, _, value = item.partition("=")
        default = getattr(base, name, None)
        if not isinstance(default, int | float) or not value:
            raise SystemExit(f"--policy {item!r}: expected FIELD=VALUE with a ContextPolicy field")
        changes[name] = type(default)(value)
    return msgspec.structs.replace(base, **changes)


def main() -> None:
    """Run the session and print the figures; the last line is one JSON object."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true", help="1,000 steps (unless --steps is given)")
    ap.add_argument("--window", type=int, default=200_000, help="the model's window in tokens")
    ap.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a ContextPolicy field, e.g. hot_max_bytes=16384 (repeatable)",
    )
    args = ap.parse_args()
    steps = 1_000 if args.quick and args.steps == 10_000 else args.steps
    policy = _policy(args.policy)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
        r = run(steps, args.window, policy, Path(d))
    report(r)
    print(json.dumps(r, sort_keys=True))


if __name__ == "__main__":
    main()
