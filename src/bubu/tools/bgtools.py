"""The tools of background processes: process_output, process_wait, process_kill, and the start
of one by ``run_command{…, background: true}`` (`bubu.tools.background` runs them).

    process_output{handle, offset?, limit?}   read_only       a page of its output
    process_wait{handle, timeout}              read_only       wait for it to exit
    process_kill{handle}                       side_effecting  stop its whole tree

Output is paged by byte offsets: without `offset`, a page shows the newest output; each page
says which bytes it holds and where the next one starts, like the pages of an offloaded result.
"""

from __future__ import annotations

import threading
from typing import Annotated

from msgspec import UNSET, Meta, UnsetType

from bubu.errors import ToolError
from bubu.events import ProcessKeep
from bubu.projections.processes import Process
from bubu.tools.background import Proc, Processes, Start
from bubu.tools.base import ToolContext, ToolResult
from bubu.tools.decorator import tool
from bubu.tools.results import PAGE_BYTES
from bubu.tools.schema import Arguments, given
from bubu.tools.workspace import workspace_root

MAX_WAIT_S = 3600.0
"""The longest one process_wait waits."""


def _processes(ctx: ToolContext) -> Processes:
    if ctx.processes is None:
        raise ToolError("background processes cannot run here; run the command in the foreground")
    return ctx.processes


def start_background(
    command: str, ctx: ToolContext, *, keep: ProcessKeep, restart: bool
) -> ToolResult:
    """Start `command` in the background for the call of `ctx` and say how to use its handle."""
    procs = _processes(ctx)
    call = ctx.marker.rsplit("/", 1)[-1] if ctx.marker else ""
    proc = procs.start(
        Start(
            handle="",
            call_id=call,
            command=command,
            cwd=workspace_root(ctx),
            marker=ctx.marker,
            keep=keep,
            restart=restart,
            sandbox=ctx.sandbox,
            pass_env=ctx.pass_env,
        )
    )
    h = proc.start.handle
    until = "the session ends" if keep == "session" else "this turn ends"
    again = " If Bubu crashes it is started again on recovery." if restart else ""
    return ToolResult(
        output=(
            f"started in the background as {h} (pid {proc.pid}); it runs until it exits, is "
            f"killed, or {until}.{again} Read its output with "
            f'process_output{{"handle": "{h}"}}, wait for it with process_wait, stop it with '
            "process_kill."
        )
    )


def _state(p: Proc | Process) -> str:
    match p.state:
        case "running":
            return f"running (pid {p.pid})"
        case "exited":
            return f"exited with code {p.code}"
        case "killed":
            why = p.kill_reason if isinstance(p, Proc) else p.reason
            return f"killed ({why})" if why else "killed"
        case _:
            return "died with the Bubu that ran it"


def _find(ctx: ToolContext, raw: str) -> tuple[Proc | None, Process | None, str]:
    handle = raw.strip()
    procs = _processes(ctx)
    live = procs.get(handle)
    if live is not None:
        return live, None, handle
    past = procs.past(handle)
    if past is not None:
        return None, past[0], handle
    raise ToolError(
        f"no background process has the handle {raw!r}; run_command with background: true "
        "returns one (bg-1, bg-2 …)"
    )


class ProcessOutputArgs(Arguments):
    """The arguments of process_output."""

    handle: Annotated[str, "From run_command (bg-1 …)."]
    offset: Annotated[
        Annotated[int, Meta(ge=0)] | UnsetType, "First byte (0-based); default: the newest."
    ] = UNSET
    limit: Annotated[Annotated[int, Meta(ge=1, le=PAGE_BYTES)], "How many bytes."] = PAGE_BYTES


@tool(
    effect="read_only",
    name="process_output",
    description=(
        "Read a background process's output (stdout and stderr): the newest, or from byte "
        f"`offset` (`limit` at most {PAGE_BYTES:,} bytes); says if it still runs."
    ),
)
def process_output(args: ProcessOutputArgs, ctx: ToolContext) -> ToolResult:
    """process_output{handle, offset?, limit?}: a page of a background process's output."""
    live, past, handle = _find(ctx, args.handle)
    if live is not None:
        live.sync()
        total, first = live.total, live.first
        state = _state(live)
    else:
        assert past is not None
        total, first, state = past.size, 0, _state(past)
    offset = given(args.offset)
    start = max(first, total - args.limit) if offset is None else offset
    end = min(total, start + args.limit)
    if total == 0 or (offset is None and start >= end):
        return ToolResult(output=f"{handle}: {state}; no output yet.")
    if start >= total:
        raise ToolError(
            f"offset {start:,} is past the end: {handle} has printed {total:,} bytes so far"
        )
    data = _read(ctx, live, handle, start, end)
    header = f"{handle}: {state}; output bytes {start:,}–{end - 1:,} of {total:,}"
    if start > first and offset is None:
        header += f' (earlier: process_output{{"handle": "{handle}", "offset": 0}})'
    footer = (
        f'next page: process_output{{"handle": "{handle}", "offset": {end}}}'
        if end < total
        else "(end of the output so far)"
    )
    text = data.decode("utf-8", "replace").removesuffix("\n")
    return ToolResult(output="\n".join([header, text, footer]))


def _read(ctx: ToolContext, live: Proc | None, handle: str, start: int, end: int) -> bytes:
    if live is not None and start >= live.first:
        return live.read(start, end)
    found = _processes(ctx).past(handle)
    if found is None:
        raise ToolError(f"the output of {handle} before its restart is not kept here")
    return found[1][start:end]


class ProcessWaitArgs(Arguments):
    """The arguments of process_wait."""

    handle: Annotated[str, "From run_command (bg-1 …)."]
    timeout: Annotated[Annotated[float, Meta(gt=0)], f"Seconds, at most {MAX_WAIT_S:g}."]


@tool(
    effect="read_only",
    name="process_wait",
    description=(
        "Wait until a background process exits or `timeout` seconds pass; returns its newest "
        "output."
    ),
)
def process_wait(args: ProcessWaitArgs, ctx: ToolContext) -> ToolResult:
    """process_wait{handle, timeout}: wait for a background process to end."""
    live, _, handle = _find(ctx, args.handle)
    if live is not None:
        timeout = min(args.timeout, MAX_WAIT_S)
        if ctx.time_left_s is not None:  # the turn's time limit binds inside the step
            timeout = min(timeout, max(ctx.time_left_s, 0.05))
        _wait(live.done, timeout, ctx.cancel)
    page = process_output(ProcessOutputArgs(handle=handle), ctx)
    still = live is not None and not live.done.is_set()
    prefix = f"still running after {args.timeout:g}s; " if still else ""
    return ToolResult(output=prefix + page.output)


def _wait(done: threading.Event, timeout: float, cancel: threading.Event) -> None:
    """Wait for `done`, at most `timeout` seconds, ending early on `cancel`."""
    import time

    deadline = time.monotonic() + timeout
    while not done.is_set() and not cancel.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        done.wait(min(left, 0.1))


class ProcessKillArgs(Arguments):
    """The arguments of process_kill."""

    handle: Annotated[str, "From run_command (bg-1 …)."]


@tool(
    effect="side_effecting",
    name="process_kill",
    description=("Stop a background process and all it started; returns its newest output."),
)
def process_kill(args: ProcessKillArgs, ctx: ToolContext) -> ToolResult:
    """process_kill{handle}: stop a background process's whole tree."""
    live, _, handle = _find(ctx, args.handle)
    if live is None or live.done.is_set():
        page = process_output(ProcessOutputArgs(handle=handle), ctx)
        return ToolResult(output=f"{handle} was not running; " + page.output)
    live.kill("stopped by process_kill")
    page = process_output(ProcessOutputArgs(handle=handle), ctx)
    return ToolResult(output=page.output)
