"""run_command: a shell command in the workspace, in its own process group, with bounded output.

The command runs under ``bash -c`` (``sh -c`` when there is no bash) with stdin from /dev/null, in
a new session so that the whole group — background children included — can be signalled. On a
timeout or a stop the group gets SIGTERM, then SIGKILL after a short grace, so a command that
ignores SIGTERM still dies. Output (stdout and stderr merged) is read as it comes and only its head
and tail are kept, so memory stays bounded whatever the command prints.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from bubu import clock
from bubu.errors import ToolError
from bubu.events import EffectClass
from bubu.secrets import command_env
from bubu.tools.base import JSON, ToolContext, ToolResult, WriteIntent
from bubu.tools.sandbox import Sandbox, wrap
from bubu.tools.workspace import (
    Args,
    BuiltinTool,
    decode,
    drop_partial_utf8,
    schema,
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

Ending = Literal["exited", "timed_out", "stopped", "held"]


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


def _shell() -> str:
    return shutil.which("bash") or "/bin/sh"


def _exited(pid: int) -> bool:
    """Whether the process has exited, without reaping it (so its pid, the group id, stays ours)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies do not count)."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit() and _in_group(entry.name, pgid):
                return True
    return False


def _in_group(pid: str, pgid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # The fields after the command name, which is in parentheses and may contain anything.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X")


def _kill_group(pgid: int) -> None:
    """SIGTERM the group, then SIGKILL whatever is still alive after the grace."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
        deadline = clock.monotonic() + KILL_GRACE_S
        while clock.monotonic() < deadline:
            if not _group_alive(pgid):
                return
            time.sleep(_POLL_S)
        os.killpg(pgid, signal.SIGKILL)
        # SIGKILL lands when each process is next scheduled; on a loaded machine that takes a
        # moment, and the result should only say "killed" once they are gone.
        deadline = clock.monotonic() + 2.0
        while _group_alive(pgid) and clock.monotonic() < deadline:
            time.sleep(_POLL_S / 5)


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


def run_shell(
    command: str,
    cwd: str,
    timeout_s: float,
    cancel: threading.Event,
    *,
    sandbox: Sandbox | None = None,
    pass_env: Sequence[str] = (),
) -> Completed:
    """Run `command` (in `sandbox` unless None) and wait for it, its timeout, or `cancel`; the
    group is killed when needed.
    Secret variables are withheld from its environment unless named in `pass_env`."""
    try:
        proc = subprocess.Popen(
            wrap([_shell(), "-c", command], cwd, sandbox),
            cwd=cwd,
            env=command_env(pass_env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except UnicodeEncodeError as err:
        raise ToolError("the command contains characters that cannot be passed to a shell") from err
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    capture = _Capture()
    ending: Ending = "exited"
    deadline = clock.monotonic() + timeout_s
    exited_at: float | None = None
    pipe_open = True
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = clock.monotonic()
            if exited_at is None and _exited(proc.pid):
                exited_at = now
            if exited_at is not None and not pipe_open:
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
            if not pipe_open:
                cancel.wait(wait)
            elif sel.select(wait):
                pipe_open = not _drain(fd, capture)
        if ending != "exited":
            _kill_group(proc.pid)
            # Whatever was written before the kill; bounded, in case something escaped the group.
            end = clock.monotonic() + _POLL_S * 4
            while pipe_open and clock.monotonic() < end:
                if sel.select(_POLL_S):
                    pipe_open = not _drain(fd, capture)
    proc.stdout.close()
    returncode = proc.wait()
    return Completed(
        ending=ending,
        returncode=returncode,
        output=capture.text(),
        total_bytes=capture.total,
        full=capture.full(),
    )


def _signal_name(number: int) -> str:
    try:
        return f" ({signal.Signals(number).name})"
    except ValueError:  # real-time signals have no name
        return ""


def _status(done: Completed, timeout_s: float, stopped_by: str) -> str:
    match done.ending:
        case "timed_out":
            return f"timed out after {timeout_s:g}s; the command and its processes were killed"
        case "stopped":
            return f"{stopped_by}; the command and its processes were killed"
        case "exited" | "held":
            code = done.returncode
            if code < 0:
                text = f"killed by signal {-code}{_signal_name(-code)}"
            else:
                text = f"exit code {code}"
            if done.ending == "held":
                text += "; background processes kept the output open and were stopped"
            return text


class RunCommand(BuiltinTool):
    """run_command{command, timeout_s?}: a shell command in the workspace.

    A command that ran to its end is a normal result whatever its exit code (the code is in the
    text, and a failing test run is information, not a tool failure); `is_error` is True only when
    the command could not start, timed out or was stopped.
    """

    name = "run_command"
    effect: EffectClass = "side_effecting"
    path_arg = None
    description = (
        "Run a shell command (bash -c) in the workspace and return its output (stdout and stderr "
        "together) and exit code. stdin is empty, so interactive programs fail rather than wait. "
        "Long output keeps its beginning and end. `timeout_s` limits the run (default from the "
        f"session, at most {MAX_TIMEOUT_S:g}); on timeout the command and everything it started "
        "are killed. Background processes that keep the output open are stopped when it ends."
    )
    parameters = schema(
        {
            "command": {"type": "string", "description": "The shell command line to run."},
            "timeout_s": {"type": "number", "description": "Seconds before the command is killed."},
        },
        ["command"],
    )

    def permission(self, args: dict[str, JSON], ctx: ToolContext) -> str | None:
        """Always a reason — the command itself; the engine's policy decides whether to ask."""
        command = args.get("command")
        return command if isinstance(command, str) and command else "run_command (no command given)"

    def execute(self, args: Args, ctx: ToolContext, intent: WriteIntent | None) -> ToolResult:
        command = args.text("command")
        if not command.strip():
            raise ToolError("the command is empty; give a shell command line")
        timeout_s = min(args.number("timeout_s", ctx.timeout_s), MAX_TIMEOUT_S)
        if ctx.cancel.is_set():
            raise ToolError("the turn was stopped before the command started; it did not run")
        done = run_shell(
            command,
            workspace_root(ctx),
            timeout_s,
            ctx.cancel,
            sandbox=ctx.sandbox,
            pass_env=ctx.pass_env,
        )
        body = done.output.rstrip("\n") if done.total_bytes else "(no output)"
        status = _status(done, timeout_s, ctx.stopped_by())
        return ToolResult(
            output=f"{body}\n{status}",
            is_error=done.ending in ("timed_out", "stopped"),
            full=None if done.full is None else done.full + f"\n{status}\n".encode(),
        )
