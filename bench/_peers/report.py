"""Rows, the Markdown block and the plots of one run, and the `## Against the peers` section of
docs/performance.md that holds one block per step count (other sections are left untouched)."""

from __future__ import annotations

import datetime
import importlib.metadata
import math
import os
import platform
import re
import sqlite3
import statistics
from collections.abc import Sequence
from pathlib import Path

import msgspec
from bench._peers.common import LOOPS, Measured, RecoveryPoint

HEADING = "## Against the peers"
LABELS = {
    "floor": "raw sqlite3 (the floor)",
    "bubu": "Bubu (its whole engine loop)",
    "openai-agents": "OpenAI Agents SDK `SQLiteSession`",
    "google-adk": "Google ADK `DatabaseSessionService`",
    "langgraph": "LangGraph `SqliteSaver`",
    "openai-agents-loop": "OpenAI Agents SDK loop (`Runner.run` + `SQLiteSession`)",
    "google-adk-loop": "Google ADK loop (`Runner` + `DatabaseSessionService`)",
    "langgraph-loop": "LangGraph loop (`create_react_agent` + `SqliteSaver`)",
    "pydantic-ai-loop": "Pydantic AI loop (`Agent` + `FunctionModel`, in memory)",
}
STYLE = {
    "floor": ("#555555", "--"),
    "bubu": ("#d62728", "-"),
    "openai-agents": ("#2ca02c", "-"),
    "google-adk": ("#1f77b4", "-"),
    "langgraph": ("#9467bd", "-"),
    "openai-agents-loop": ("#2ca02c", "-."),
    "google-adk-loop": ("#1f77b4", "-."),
    "langgraph-loop": ("#9467bd", "-."),
    "pydantic-ai-loop": ("#ff7f0e", "-."),
}
PACKAGES = (
    "langgraph",
    "langgraph-prebuilt",
    "langgraph-checkpoint-sqlite",
    "google-adk",
    "openai-agents",
    "pydantic-ai-slim",
)


class Row(msgspec.Struct, kw_only=True):
    """One system's figures, as `bench/peers.py --json` prints them (times in ms, sizes in
    bytes)."""

    system: str
    steps: int
    steps_done: int
    stopped: bool
    step_ms_p50: float
    step_ms_first10_p50: float
    step_ms_last10_p50: float
    step_ms_mean: float
    step_ratio_to_floor: float | None
    bytes_per_step: float
    bytes_ratio_to_floor: float | None
    storage_bytes: int
    storage_exponent: float | None
    """The slope of log(size) against log(steps) over the second half: 1 is linear, 2 quadratic."""
    reload_ms: float
    reload_ratio_to_floor: float | None
    reload_items: int
    base_mb: float
    peak_mb: float
    config: str
    load: tuple[float, float]
    recovery: list[RecoveryPoint]


def _r(x: float) -> float:
    return float(f"{x:.4g}")


def exponent(storage: Sequence[tuple[int, int]]) -> float | None:
    """How storage grows with steps over the second half of the run (None when too few samples)."""
    if len(storage) < 2 or storage[-1][0] < 4:
        return None
    last_steps, last_bytes = storage[-1]
    mid_steps, mid_bytes = min(storage, key=lambda sb: abs(sb[0] - last_steps / 2))
    if mid_steps >= last_steps or mid_bytes <= 0:
        return None
    return _r(math.log(last_bytes / mid_bytes) / math.log(last_steps / mid_steps))


def rows(measured: Sequence[Measured]) -> list[Row]:
    """Summarize each run, with ratios to the floor when the floor ran."""
    floor = next((m for m in measured if m.system == "floor"), None)
    out = []
    for m in measured:
        ms = [s * 1000 for s in m.step_s]
        tenth = max(1, len(ms) // 10)
        p50 = statistics.median(ms)
        per_step = m.final_bytes / m.steps_done
        fl = None if floor is None else statistics.median(floor.step_s) * 1000
        fb = None if floor is None else floor.final_bytes / floor.steps_done
        fr = None if floor is None else floor.reload_s * 1000
        out.append(
            Row(
                system=m.system,
                steps=m.steps,
                steps_done=m.steps_done,
                stopped=m.stopped,
                step_ms_p50=_r(p50),
                step_ms_first10_p50=_r(statistics.median(ms[:tenth])),
                step_ms_last10_p50=_r(statistics.median(ms[-tenth:])),
                step_ms_mean=_r(statistics.fmean(ms)),
                step_ratio_to_floor=None if fl is None else _r(p50 / fl),
                bytes_per_step=_r(per_step),
                bytes_ratio_to_floor=None if fb is None else _r(per_step / fb),
                storage_bytes=m.final_bytes,
                storage_exponent=exponent(m.storage),
                reload_ms=_r(m.reload_s * 1000),
                reload_ratio_to_floor=None if fr is None else _r(m.reload_s * 1000 / fr),
                reload_items=m.reload_items,
                base_mb=_r(m.base_mb),
                peak_mb=_r(m.peak_mb),
                config=m.config,
                load=m.load,
                recovery=m.recovery,
            )
        )
    return out


def _size(b: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def _ms(x: float) -> str:
    return f"{x:.3g} ms" if x < 1000 else f"{x / 1000:.3g} s"


def _x(r: float | None) -> str:
    return "–" if r is None else f"{r:.3g}×"


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = []
    for p in PACKAGES:
        try:
            versions.append(f"{p} {importlib.metadata.version(p)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return (
        f"{cpu}, {os.cpu_count()} cores, {platform.system()}; Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}" + (f"; {', '.join(versions)}" if versions else "")
    )


def table(rs: Sequence[Row]) -> str:
    """The Markdown table of one run."""
    lines = [
        "| system | steps | a step, p50 | × floor | first 10%, p50 | last 10%, p50 "
        "| storage per step | × floor | reload | × floor | peak memory |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rs:
        steps = f"{r.steps_done:,}" + (" (stopped)" if r.stopped else "")
        lines.append(
            f"| {LABELS.get(r.system, r.system)} | {steps} | {_ms(r.step_ms_p50)} "
            f"| {_x(r.step_ratio_to_floor)} | {_ms(r.step_ms_first10_p50)} "
            f"| {_ms(r.step_ms_last10_p50)} | {_size(r.bytes_per_step)} "
            f"| {_x(r.bytes_ratio_to_floor)} | {_ms(r.reload_ms)} "
            f"| {_x(r.reload_ratio_to_floor)} | {r.peak_mb:.0f} MB |"
        )
    return "\n".join(lines)


def _findings(rs: Sequence[Row]) -> list[str]:
    by = {r.system: r for r in rs}
    out = []
    b = by.get("bubu")
    if b is not None and b.step_ratio_to_floor is not None:
        out.append(
            f"Bubu runs a step of its whole engine loop in {_ms(b.step_ms_p50)} "
            f"({_x(b.step_ratio_to_floor)} the floor) and stores {_size(b.bytes_per_step)} per "
            f"step ({_x(b.bytes_ratio_to_floor)}): four events per step, each with its hash, "
            "its ~2 KB result stored zlib-compressed (SQLite compresses payloads over 1 KiB), "
            "against the floor's two raw rows."
        )
    for name in ("openai-agents", "google-adk", "langgraph", *LOOPS):
        r = by.get(name)
        if r is None:
            continue
        growth = r.step_ms_last10_p50 / r.step_ms_first10_p50
        trend = (
            f"growing {growth:.2g}× from the first to the last 10% of the run"
            if growth >= 1.5
            else "flat over the run"
        )
        stop = f"; stopped at the time bound after {r.steps_done:,} steps" if r.stopped else ""
        vs = ""
        if name in LOOPS and b is not None:
            vs = f" ({r.step_ms_p50 / b.step_ms_p50:.3g}× Bubu's engine step in this run)"
        out.append(f"{LABELS[name]}: {_ms(r.step_ms_p50)} a step{vs}, {trend}{stop}.")
    lg = by.get("langgraph")
    if lg is not None and lg.storage_exponent is not None and lg.storage_exponent > 1.5:
        out.append(
            "LangGraph's `SqliteSaver` writes the whole message list into every checkpoint (four "
            "checkpoints per invoke here: input, start, agent, tools), so its storage grows with "
            f"about the square of the steps (exponent {lg.storage_exponent:.2g} over the second "
            f"half): {_size(lg.storage_bytes)} after {lg.steps_done:,} steps."
        )
    return out


def block(rs: Sequence[Row], images: tuple[str, str, str], bound_s: float) -> str:
    """The Markdown block of one run (one step count), delimited so that a later run replaces it."""
    steps = rs[0].steps
    lines = [
        f"<!-- peers:{steps} -->",
        f"### {steps:,} steps",
        "",
        f"Measured {datetime.date.today().isoformat()} on {_machine()}. Each system ran alone in "
        f"its own process; one still persisting after {bound_s:.0f} s was stopped there.",
        "",
        table(rs),
        "",
        *(f"- {f}" for f in _findings(rs)),
        "",
        f"![Persist time per step against step number, {steps:,} steps]({images[0]})",
        "",
        f"![Loop time per step against step number, {steps:,} steps]({images[2]})",
        "",
        f"![Storage against steps persisted, {steps:,} steps]({images[1]})",
        "",
    ]
    rec = [p for r in rs for p in r.recovery]
    if rec:
        lines += [
            "Bubu alone: building the recovery plan after a crash that left a side-effecting "
            "dispatch without its outcome (median of three, after one warm-up read).",
            "",
            "| events in the log | read + plan | read + verify the hash chain + plan | decision |",
            "|--:|--:|--:|---|",
            *(
                f"| {p.events:,} | {_ms(p.plan_ms)} | {_ms(p.plan_verified_ms)} | {p.decision} |"
                for p in rec
            ),
            "",
        ]
    lines += [
        "How each system was set up:",
        "",
        *(
            f"- {LABELS.get(r.system, r.system)}: {r.config}; the machine's load average went "
            f"{r.load[0]:.1f} → {r.load[1]:.1f} during its run."
            for r in rs
        ),
        f"<!-- /peers:{steps} -->",
    ]
    return "\n".join(lines)


INTRO = """\
The same synthetic long task is persisted through Bubu and through the persistence layers the
peers' users rely on, in one run on one machine: `python bench/peers.py --steps N` (the peers come
with `pip install -e '.[bench]'`). A step is one model message with a tool call (about 200 B of
arguments) and one tool result (about 2 KB).

- **Bubu** goes through its real engine path: `start_turn` drives the runner with an instant
  in-process model (one tool call per call) and a no-op side-effecting tool, so each step commits
  the response, a fully synced dispatch and the outcome, exactly as the agent does. A step is the
  time between two model calls, minus the time inside the model and the tool (about zero). The
  model declares a 200,000-token window, so the engine also compacts as a long task would (the
  summary comes from the same instant model; building and storing the checkpoint is counted).
- **The floor** is what any durable agent pays at least: the same bytes in one fully synced raw
  SQLite transaction (WAL, `synchronous=FULL`) per step.
- **LangGraph**: a messages graph (agent node, tools node) with `SqliteSaver`, invoked once per
  step. **Google ADK**: `DatabaseSessionService` on SQLite, a model event with the function call
  and a tool event with the function response per step. **OpenAI Agents SDK**:
  `SQLiteSession.add_items` with a `function_call` and a `function_call_output` item per step.
  Each peer runs with its own defaults.
- **The peers' own loops** (the rows ending in "loop") are what a user who picks a peer instead
  gets: its agent loop driving the same instant model and no-op tool, with its persistence on,
  timed as Bubu is (between two model calls, minus the time inside the model and the tool), one run
  of N steps ending with a final text answer. The OpenAI Agents SDK's `Runner.run` with a
  `SQLiteSession` and a `Model` of its own; LangGraph's prebuilt ReAct agent (`create_react_agent`)
  with a `SqliteSaver`, each checkpoint written before the next step (`durability="sync"`); Google
  ADK's `Runner` over an `LlmAgent` with a `BaseLlm` of its own and `DatabaseSessionService` on
  SQLite; Pydantic AI's `Agent` over a `FunctionModel`, which keeps the history in memory and
  persists nothing (its storage is that history as JSON, its reload parsing the JSON back).

A step's time is the wall time of persisting one step for the storage rows, and of one turn of the
loop for Bubu and the loop rows; storage is the database file plus its WAL after a checkpoint,
divided by the steps; reload is the time to load the session again, median of
three: for the peers their own load API (`get_items`, `get_session`, `get_state`), for the floor a
select of every row, for Bubu what `bubu resume` does before its next model call (open the store,
take the lease, fold the whole log into the turn, context and compaction state, build the next
request). Peak memory is the peak resident size of the system's own process (interpreter and
libraries included). The per-step plots show the median of each bin of steps, on a log scale.

The machine these figures come from is shared with other work and was loaded while they were taken
(each system's load average is listed under its table; two cores, often a load of several): the
absolute times are inflated and noisy, so compare systems by their ratios within one run, which
ran one after the other under the same conditions, rather than across runs. A loop stopped at the
time bound is summarized over the steps it reached, its earliest and cheapest, so its median
understates what the whole task would cost it.
"""


def section(existing: str, new_block: str) -> str:
    """`existing` (a whole performance.md) with this run's block put into the peers section."""
    head = re.match(r"<!-- peers:(\d+) -->", new_block)
    if head is None:
        raise ValueError("a peers block starts with its <!-- peers:N --> marker")
    steps = int(head.group(1))
    lines = existing.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.rstrip() == HEADING), None)
    if start is None:
        before, body, after = existing.rstrip("\n") + "\n\n", "", ""
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        before, body, after = (
            "".join(lines[:start]),
            "".join(lines[start:end]),
            "".join(lines[end:]),
        )
    blocks = {
        int(m.group(1)): m.group(0)
        for m in re.finditer(r"<!-- peers:(\d+) -->.*?<!-- /peers:\1 -->", body, re.S)
    }
    blocks[steps] = new_block
    text = f"{HEADING}\n\n{INTRO}\n" + "\n\n".join(blocks[k] for k in sorted(blocks)) + "\n"
    return before + text + ("\n" + after if after else "")


def _step_plot(measured: Sequence[Measured], png: Path, steps: int, title: str) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    width = max(1, steps // 200)
    for m in measured:
        ms = [s * 1000 for s in m.step_s]
        xs, ys = [], []
        for i in range(0, len(ms), width):
            chunk = ms[i : i + width]
            xs.append(i + (len(chunk) + 1) / 2)
            ys.append(statistics.median(chunk))
        color, dash = STYLE.get(m.system, ("#000000", "-"))
        end = " (stopped)" if m.stopped else ""
        ax.plot(xs, ys, dash, color=color, lw=1.6, label=f"{LABELS.get(m.system, m.system)}{end}")
    ax.set_yscale("log")
    ax.set_xlabel("step number")
    ax.set_ylabel("time of one step (ms, log scale)")
    note = f", median of each {width} steps" if width > 1 else ""
    ax.set_title(f"{title}, {steps:,}-step task{note}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def plots(measured: Sequence[Measured], img_dir: Path, steps: int) -> tuple[Path, Path, Path]:
    """Per-step time against step number (the storage calls, then the loops, each beside the floor
    and Bubu's engine loop) and storage against steps (log scales), as PNGs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img_dir.mkdir(parents=True, exist_ok=True)
    time_png = img_dir / f"peers-step-time-{steps}.png"
    storage_png = img_dir / f"peers-storage-{steps}.png"

    loop_png = img_dir / f"peers-loop-step-time-{steps}.png"
    both = ("floor", "bubu")
    stores = [m for m in measured if m.system not in LOOPS]
    loops = [m for m in measured if m.system in both or m.system in LOOPS]
    _step_plot(stores, time_png, steps, "Persist time per step")
    _step_plot(loops, loop_png, steps, "Agent loop time per step")

    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    for m in measured:
        color, dash = STYLE.get(m.system, ("#000000", "-"))
        xs = [s for s, _ in m.storage]
        ys = [b for _, b in m.storage]
        ax.plot(
            xs,
            ys,
            dash,
            color=color,
            lw=1.6,
            marker=".",
            ms=4,
            label=LABELS.get(m.system, m.system),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("steps persisted (log scale)")
    ax.set_ylabel("database size (bytes, log scale)")
    ax.set_title(f"Storage against steps, {steps:,}-step task")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9)
    fig.tight_layout()
    fig.savefig(storage_png)
    plt.close(fig)
    return time_png, storage_png, loop_png


def write(doc: Path, img_dir: Path, measured: Sequence[Measured], bound_s: float) -> None:
    """Draw the plots and put this run's block into `doc` (created when missing)."""
    steps = measured[0].steps
    pngs = plots(measured, img_dir, steps)
    rel = tuple(os.path.relpath(p, doc.parent) for p in pngs)
    new = block(rows(measured), (rel[0], rel[1], rel[2]), bound_s)
    existing = doc.read_text() if doc.exists() else "# Performance\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(section(existing, new))
