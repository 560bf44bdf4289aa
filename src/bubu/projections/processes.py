"""The background processes of a session, folded from their lifecycle notes (pure).

A background process is a resource in the log: `process_started` opens it, `process_output`
notes name the chunks of its output (blobs, in order), `process_ended` closes it (exited, killed,
or died with the Bubu that ran it). What is running, what each printed and how each ended is a
projection of those notes; the status line, `bubu status --json`, the web UI and recovery read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from bubu.events import (
    BlobRef,
    ProcessEnded,
    ProcessKeep,
    ProcessOutput,
    ProcessStarted,
    Record,
    SystemNote,
)

PROCESS_KINDS = ("process_started", "process_output", "process_ended")
"""The event kinds `ProcessFold` looks at; a store can read just these."""

ProcessState = Literal["running", "exited", "killed", "died"]


class Process(msgspec.Struct, kw_only=True):
    """One background process as the log tells it."""

    handle: str
    call_id: str
    command: str
    keep: ProcessKeep = "turn"
    restart: bool = False
    restarts: int = 0
    pid: int | None = None
    state: ProcessState = "running"
    code: int | None = None
    reason: str | None = None
    started_seq: int = 0
    turn: str | None = None
    """The turn it was (last) started in."""
    chunks: list[tuple[int, BlobRef]] = msgspec.field(default_factory=list)
    """(offset, blob) of each chunk of its output, in order."""

    @property
    def size(self) -> int:
        """Bytes of output the log holds."""
        if not self.chunks:
            return 0
        offset, last = self.chunks[-1]
        return offset + last.size

    def json(self) -> dict[str, object]:
        """The stable keys of `bubu status --json`."""
        return {
            "handle": self.handle,
            "command": self.command,
            "state": self.state,
            "pid": self.pid,
            "keep": self.keep,
            "restart": self.restart,
            "exit_code": self.code,
            "output_bytes": self.size,
        }


class ProcessFold(msgspec.Struct):
    """Every background process of a session, by handle, in the order they were started."""

    procs: dict[str, Process] = msgspec.field(default_factory=dict)

    def apply(self, r: Record) -> None:
        """Fold one record in."""
        c = r.event.content
        if not isinstance(c, SystemNote):
            return
        n = c.note
        if isinstance(n, ProcessStarted):
            old = self.procs.get(n.handle)
            self.procs[n.handle] = Process(
                handle=n.handle,
                call_id=n.call_id,
                command=n.command,
                keep=n.keep,
                restart=n.restart,
                restarts=n.restarts,
                pid=n.pid,
                started_seq=r.seq,
                turn=r.event.turn,
                chunks=old.chunks if old is not None else [],
            )
        elif isinstance(n, ProcessOutput):
            p = self.procs.get(n.handle)
            if p is not None:
                p.chunks.append((n.offset, n.chunk))
        elif isinstance(n, ProcessEnded):
            p = self.procs.get(n.handle)
            if p is not None and p.state == "running":
                p.state, p.code, p.reason = n.how, n.code, n.reason

    def running(self) -> list[Process]:
        """The processes the log says are still running."""
        return [p for p in self.procs.values() if p.state == "running"]


def fold_processes(records: Iterable[Record], start: ProcessFold | None = None) -> ProcessFold:
    """Fold records into `start` (mutated) or a fresh fold."""
    f = start if start is not None else ProcessFold()
    for r in records:
        f.apply(r)
    return f


def died_text(n: ProcessEnded) -> str:
    """What the model is told about a background process that died with the Bubu that ran it."""
    again = (
        f" It is restartable and was started again as {n.handle}."
        if n.restarted
        else " It is not running now; start it again if it is still needed."
    )
    tail = f"\nIts last output:\n{n.tail}" if n.tail else "\nIt printed nothing."
    return (
        f"[Bubu] The background process {n.handle} (`{n.command or '?'}`) died: "
        f"{n.reason or 'Bubu stopped while it ran'}.{again}{tail}"
    )


def lifecycle_text(n: ProcessStarted | ProcessEnded) -> str:
    """A background process's start or end as a person reads it in the transcript."""
    if isinstance(n, ProcessStarted):
        again = f" again (restart {n.restarts})" if n.restarts else ""
        return f"background process {n.handle} started{again}: {n.command}"
    how = {"exited": f"exited with code {n.code}", "killed": "killed", "died": "died with Bubu"}
    why = f" ({n.reason})" if n.reason and n.how != "died" else ""
    return f"background process {n.handle} {how[n.how]}{why}"


def status_line(procs: Iterable[Process]) -> str:
    """The running processes as the status line shows them ("" when none)."""
    running = [p for p in procs if p.state == "running"]
    if not running:
        return ""
    names = ", ".join(f"{p.handle} {_short(p.command)}" for p in running[:3])
    more = f" +{len(running) - 3}" if len(running) > 3 else ""
    return f"bg: {names}{more}"


def _short(command: str) -> str:
    one = " ".join(command.split())
    return one if len(one) <= 24 else one[:23] + "…"
