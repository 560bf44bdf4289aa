"""run_command: a shell command in the workspace, its whole process tree held, with bounded output.

The command runs under ``bash -c`` (``sh -c`` when there is no bash) with stdin from /dev/null,
below a keeper process (`bubu.tools.proctree`) that holds its whole tree — ``setsid`` and
double-forked children included — and kills it when the runner dies, even by SIGKILL. On a
timeout or a stop the tree gets SIGTERM, then SIGKILL after a short grace, so a command that
ignores SIGTERM still dies; "killed" is said only once every process of it is confirmed gone.
Every process carries ``BUBU_CALL=session/run/call`` in its environment, so that recovery can find
what a dead run left behind. Output (stdout and stderr merged) is read as it comes and only its
head and tail are kept, so memory stays bounded whatever the command prints.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal

from msgspec import UNSET, Meta, UnsetType

from bubu import clock, ids
from bubu.errors import ToolError
from bubu.secrets import command_env
from bubu.toolfacts import ToolFacts
from bubu.tools import controlfiles, limits, proctree, sockets
from bubu.tools.base import ToolContext, ToolResult
from bubu.tools.decorator import tool
from bubu.tools.sandbox import Sandbox, wrap
from bubu.tools.schema import Arguments, given
from bubu.tools.workspace import (
    decode,
    drop_partial_utf8,
    workspace_root,
)

MAX_TIMEOUT_S = 3600.0
"""The longest a command may run, whatever it asks for."""

KILL_GRACE_S = 2.0
"""How long the group has between SIGTERM and SIGKILL."""

PIPE_GRACE_S = 1.0
"""After the command exits, how long background processes may keep its output open."""

FULL_BYTES = 64 << 20
"""Output beyond this is not kept whole (a runaway command must not fill the disk)."""

HEAD_BYTES = 15_000
TAIL_BYTES = 15_000
"""The output kept for the model: its beginning and its end; the middle is counted, not kept."""

_POLL_S = 0.05
_READS_PER_TURN = 16  # a firehose must not keep the loop from checking the clock and the stop flag
_CHUNK = 1 << 16

Ending = Literal["exited", "timed_out", "stopped", "held", "lost"]


@dataclass(slots=True)
class _Capture:
    """The head and tail of a stream of bytes, and how many bytes went by."""

    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0
    spool: tempfile.SpooledTemporaryFile[bytes] = field(
        # Closed by full(), which every capture reaches once the command is done.
        default_factory=lambda: tempfile.SpooledTemporaryFile(max_size=1 << 20)  # noqa: SIM115
    )

    def feed(self, data: bytes) -> None:
        # The whole output is kept on disk too (up to FULL_BYTES) so the engine can offload it
        # and the model can page through every byte; past that only the head and tail remain.
        if self.total < FULL_BYTES:
            self.spool.write(data[: FULL_BYTES - self.total])
        self.total += len(data)
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        # Trimmed only when twice the cap, so trimming costs O(1) per byte amortized.
        if len(self.tail) > 2 * TAIL_BYTES:
            del self.tail[:-TAIL_BYTES]

    def full(self) -> bytes | None:
        """Every byte of the output when it was cut for the model and fits FULL_BYTES, else None."""
        cut = self.total > len(self.head) + min(len(self.tail), TAIL_BYTES)
        if not cut or self.total > FULL_BYTES:
            self.spool.close()
            return None
        self.spool.seek(0)
        data = self.spool.read()
        self.spool.close()
        return data

    def omitted(self) -> int:
        """Bytes of the output in neither the head nor the tail."""
        return self.total - len(self.head) - min(len(self.tail), TAIL_BYTES)

    def text(self) -> str:
        tail = bytes(self.tail[-TAIL_BYTES:])
        omitted = self.total - len(self.head) - len(tail)
        if omitted == 0:
            return decode(bytes(self.head) + tail)
        # Cut on character boundaries, so the cut itself adds no replacement characters.
        head = drop_partial_utf8(bytes(self.head))
        skip = 0
        while skip < min(3, len(tail)) and tail[skip] & 0xC0 == 0x80:
            skip += 1
        return f"{decode(head)}\n… [{omitted:,} bytes omitted] …\n{decode(tail[skip:])}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Completed:
    """How a command ended and what it printed (head and tail)."""

    ending: Ending
    returncode: int
    output: str
    total_bytes: int
    full: bytes | None = None
    """Every byte, when the output was cut and is at most FULL_BYTES (for offloading)."""
    omitted: int = 0
    """Bytes of the output between the head and the tail kept for the model."""
    left: int = 0
    """Processes of the command that were to be killed but could not be confirmed dead."""
    notes: tuple[str, ...] = ()
    """What the sandbox saw: limits reached, control files the command changed and Bubu put
    back."""


def _shell() -> str:
    return shutil.which("bash") or "/bin/sh"


def _drain(fd: int, capture: _Capture) -> bool:
    """Read what is available; True at end of file."""
    for _ in range(_READS_PER_TURN):
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return False
        if not data:
            return True
        capture.feed(data)
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class Spawn:
    """What is started for a command: its argv, directory and environment, and, in a sandbox,
    the control entries it started with and the cgroup that limits it."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    controls: controlfiles.Scan | None = None
    cgroup: limits.Cgroup | None = None


def spawn_spec(
    command: str,
    cwd: str,
    marker: str,
    *,
    sandbox: Sandbox | None = None,
    pass_env: Sequence[str] = (),
) -> Spawn:
    """The one place a command's argv, directory and environment are built: the argv wrapped in
    `sandbox` unless None (its control entries read-only, its limits set), secret variables
    withheld unless named in `pass_env`, the marker set last so that no filter drops it."""
    env = command_env(pass_env)
    env[proctree.MARKER_VAR] = marker
    shell = _shell()
    argv = [shell, "-c", command]
    if sandbox is None:
        return Spawn(argv=argv, cwd=cwd, env=env)
    opts = sandbox.options
    if not opts.ssh_agent:
        env.pop(sockets.AGENT_VAR, None)
    controls = None
    if sandbox.mode == "workspace-write":
        controls = controlfiles.before_command(os.path.realpath(cwd))
    cgroup = limits.cgroup_for(opts.limits)
    if cgroup is not None:
        env[limits.JOIN_VAR] = cgroup.procs_files()
    env[limits.RLIMIT_VAR] = limits.keeper_rlimits(opts.limits, cgroup)
    if os.path.basename(shell) == "bash":
        argv = limits.nproc_argv(opts.limits, cgroup, argv)
    wrapped = wrap(argv, cwd, sandbox, controls=controls, env=env)
    return Spawn(argv=wrapped, cwd=cwd, env=env, controls=controls, cgroup=cgroup)


def aftermath(spec: Spawn, returncode: int | None, sandbox: Sandbox | None) -> tuple[str, ...]:
    """After a sandboxed command: the limits it reached and what it did to control entries
    (reverted here); its cgroup removed."""
    notes: list[str] = []
    if spec.cgroup is not None:
        notes += spec.cgroup.hit()
        spec.cgroup.remove()
    if sandbox is not None and returncode is not None:
        hit = limits.file_size_hit(returncode, sandbox.options.limits)
        if hit is not None:
            notes.append(hit)
    if spec.controls is not None:
        said = controlfiles.after_command(spec.controls).text()
        if said is not None:
            notes.append(said)
    return tuple(notes)


def run_shell(
    command: str,
    cwd: str,
    timeout_s: float,
    cancel: threading.Event,
    *,
    marker: str = "",
    sandbox: Sandbox | None = None,
    pass_env: Sequence[str] = (),
) -> Completed:
    """Run `command` (in `sandbox` unless None) and wait for it, its timeout, or `cancel`; the
    tree is killed when needed.

    `marker` (``session/run/call``) is put in the environment of every process of the command.
    Secret variables are withheld from its environment unless named in `pass_env`.
    """
    spec = spawn_spec(
        command,
        cwd,
        marker or f"-/-/{ids.new_id('cmd')}",
        sandbox=sandbox,
        pass_env=pass_env,
    )
    out_r, out_w = os.pipe()
    try:
        tree = proctree.start(spec.argv, cwd=spec.cwd, env=spec.env, output=out_w)
    except BaseException:  # undone, then re-raised: Ctrl-C and exits too
        os.close(out_r)
        aftermath(spec, None, sandbox)
        raise
    finally:
        os.close(out_w)
    fd = out_r
    os.set_blocking(fd, False)
    capture = _Capture()
    ending: Ending = "exited"
    deadline = clock.monotonic() + timeout_s
    exited_at: float | None = None
    pipe_open = True
    keeper_open = True
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        sel.register(tree.status, selectors.EVENT_READ)
        while True:
            now = clock.monotonic()
            if tree.error is not None:
                os.close(fd)
                tree.kill(0)
                capture.full()  # closes its spool
                aftermath(spec, None, sandbox)
                number, _, path = tree.error.partition(" ")
                raise OSError(int(number), os.strerror(int(number)), path)
            if exited_at is None and tree.returncode is not None:
                exited_at = now
            if exited_at is not None and not pipe_open:
                break
            if exited_at is None and not keeper_open:
                ending = "lost"  # the keeper was killed from outside: find the tree by its marker
                break
            if cancel.is_set():
                ending = "stopped"
                break
            if now >= deadline:
                ending = "timed_out"
                break
            if exited_at is not None and now - exited_at >= PIPE_GRACE_S:
                ending = "held"  # a background process inherited the output and keeps it open
                break
            wait = min(_POLL_S, deadline - now)
            for key, _ in sel.select(wait):
                if key.fd == fd:
                    pipe_open = not _drain(fd, capture)
                    if not pipe_open:
                        sel.unregister(fd)
                elif not tree.read_status():
                    keeper_open = False
                    sel.unregister(tree.status)
            if not pipe_open and not keeper_open:
                cancel.wait(wait)  # nothing left to select on but the clock and the stop flag
        left = 0
        if ending == "exited":
            tree.finish()
        else:
            left = tree.kill(0 if ending == "lost" else KILL_GRACE_S)
            # Whatever was written before the kill; bounded, in case something escaped the tree.
            end = clock.monotonic() + _POLL_S * 4
            while pipe_open and clock.monotonic() < end:
                if any(key.fd == fd for key, _ in sel.select(_POLL_S)):
                    pipe_open = not _drain(fd, capture)
    os.close(fd)
    returncode = tree.returncode if tree.returncode is not None else -signal.SIGKILL
    return Completed(
        ending=ending,
        returncode=returncode,
        output=capture.text(),
        total_bytes=capture.total,
        omitted=capture.omitted(),
        full=capture.full(),
        left=left,
        notes=aftermath(spec, returncode, sandbox),
    )


def _signal_name(number: int) -> str:
    try:
        return f" ({signal.Signals(number).name})"
    except ValueError:  # real-time signals have no name
        return ""


def _killed(left: int) -> str:
    if not left:
        return "the command and its processes were killed"
    some = "1 of its processes" if left == 1 else f"{left} of its processes"
    return f"the command was killed, but {some} could not be confirmed dead and may still run"


def _status(done: Completed, timeout_s: float, stopped_by: str) -> str:
    match done.ending:
        case "timed_out":
            return f"timed out after {timeout_s:g}s; {_killed(done.left)}"
        case "stopped":
            return f"{stopped_by}; {_killed(done.left)}"
        case "lost":
            return (
                f"the process that held the command was killed from outside; {_killed(done.left)}"
            )
        case "exited" | "held":
            code = done.returncode
            if code < 0:
                text = f"killed by signal {-code}{_signal_name(-code)}"
            else:
                text = f"exit code {code}"
            if done.ending == "held" and done.left:
                text += (
                    "; background processes kept the output open; "
                    f"{done.left} of them could not be confirmed dead and may still run"
                )
            elif done.ending == "held":
                text += "; background processes kept the output open and were stopped"
            return text


class RunCommandArgs(Arguments):
    """The arguments of run_command; without `timeout_s`, the session's timeout applies."""

    command: Annotated[str, "The shell command line to run."]
    timeout_s: Annotated[
        Annotated[float, Meta(gt=0)] | UnsetType, "Seconds before the command is killed."
    ] = UNSET
    background: Annotated[bool, "Return a handle at once; the command runs on."] = False
    keep: Annotated[
        Literal["turn", "session"], "With background: until the turn or session ends."
    ] = "turn"
    restart: Annotated[bool, "With background: start it again after a crash."] = False


@tool(
    effect="side_effecting",
    name="run_command",
    facts=ToolFacts(headline="command", command="command"),
    # Always a reason, the command itself: the engine's policy decides whether to ask.
    permission="command",
    description=(
        "Run a shell command (bash -c) in the workspace and return its output (stdout and stderr "
        "together) and exit code. stdin is empty, so interactive programs fail rather than wait. "
        "Long output keeps its beginning and end. `timeout_s` limits the run (default from the "
        f"session, at most {MAX_TIMEOUT_S:g}); on timeout the command and everything it started "
        "are killed. Background processes that keep the output open are stopped when it ends. "
        "`background: true` (a server, a watcher) returns a handle for process_output, "
        "process_wait and process_kill; it is stopped when the turn ends."
    ),
)
def run_command(args: RunCommandArgs, ctx: ToolContext) -> ToolResult:
    """run_command{command, timeout_s?, background?, keep?, restart?}: a shell command in the
    workspace (in the background: `bubu.tools.bgtools`).

    A command that ran to its end is a normal result whatever its exit code (the code is in the
    text, and a failing test run is information, not a tool failure); `is_error` is True only when
    the command could not start, timed out or was stopped.
    """
    command = args.command
    if not command.strip():
        raise ToolError("the command is empty; give a shell command line")
    asked = given(args.timeout_s)
    timeout_s = min(ctx.timeout_s if asked is None else asked, MAX_TIMEOUT_S)
    # The turn's time limit binds inside the step: the command gets what is left of it.
    at_limit = ctx.time_left_s is not None and ctx.time_left_s < timeout_s
    if ctx.time_left_s is not None and at_limit:
        timeout_s = max(ctx.time_left_s, 0.05)
    if ctx.cancel.is_set():
        raise ToolError("the turn was stopped before the command started; it did not run")
    if args.background:
        from bubu.tools.bgtools import start_background

        return start_background(command, ctx, keep=args.keep, restart=args.restart)
    done = run_shell(
        command,
        workspace_root(ctx),
        timeout_s,
        ctx.cancel,
        marker=ctx.marker,
        sandbox=ctx.sandbox,
        pass_env=ctx.pass_env,
    )
    body = done.output.rstrip("\n") if done.total_bytes else "(no output)"
    status = _status(done, timeout_s, ctx.stopped_by())
    if at_limit and done.ending == "timed_out":
        status = (
            f"stopped after {timeout_s:.1f}s: the turn's time limit of {ctx.time_limit} "
            f"(--max-time) was reached while it ran; {_killed(done.left)}"
        )
    status = "; ".join([status, *done.notes])
    dropped = done.omitted if done.full is None else 0
    if dropped:
        status += (
            f"; the output was {done.total_bytes:,} bytes, more than the {FULL_BYTES >> 20} MiB "
            f"kept whole: only its first and last bytes are kept, {dropped:,} bytes between "
            "them were dropped"
        )
    return ToolResult(
        output=f"{body}\n{status}",
        is_error=done.ending in ("timed_out", "stopped", "lost"),
        full=done.full,
        dropped=dropped,
        status=status,
    )
