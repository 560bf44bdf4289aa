"""The engine's side of background processes: their notes in the log, and their recovery.

While a turn runs, the session's `Processes` (`bubu.tools.background`) record through the
runner's lease: a reader thread appends a chunk of output as it arrives, in a transaction of its
own, and the runner folds such appends in as it does a notice dismissal (`choices.BENIGN_NOTES`).

When a run starts, the log is compared with what runs here: a process the log says is running
but that no longer runs (its Bubu crashed, or ended while it was kept for the session) died with
that Bubu — its keeper killed it, and recovery killed whatever carried the session's marker — so
a visible note tells the model, with its last output; one marked restartable is started again.
When the turn ends its processes are stopped, except those kept for the session.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from bubu import clock
from bubu.errors import AppendConflict, BubuError
from bubu.events import Note, ProcessEnded, SystemNote, make
from bubu.projections.processes import PROCESS_KINDS, Process, fold_processes
from bubu.tools import background
from bubu.tools.background import TAIL_BYTES, Processes, Start

if TYPE_CHECKING:
    from bubu.engine.driver import Runner
    from bubu.log.store import Store

_STAGED_WAIT_S = 2.0
"""How long a chunk waits for the runner to commit what it staged before it is appended anyway
(the runner then folds the log afresh)."""


class LogRecorder:
    """Appends process notes through `runner`'s lease, from any thread."""

    def __init__(self, runner: Runner, procs: Processes) -> None:
        self.runner = runner
        self.procs = procs
        self._lock = threading.Lock()

    def record(self, notes: Sequence[Note], *, blobs: Sequence[bytes] = ()) -> None:
        """Append `notes` now; if the lease is gone they wait for the next run."""
        with self._lock:
            try:
                self.append_now(notes, blobs)
            except BubuError:
                self.procs.waiting.record(notes, blobs=blobs)

    def append_now(
        self, notes: Sequence[Note], blobs: Sequence[bytes] = (), *, visible: bool = False
    ) -> None:
        """Append `notes` in a transaction of their own (raises what the store raises)."""
        r = self.runner
        deadline = clock.monotonic() + _STAGED_WAIT_S
        while r._staged and clock.monotonic() < deadline:
            r.stop_event.wait(0.02)
        events = [
            make(
                session=r.session.id,
                turn=r.turn.turn,
                run=r.run,
                role="system",
                author="tool",
                ts=clock.now_ms(),
                content=SystemNote(note=n),
                visibility="visible" if visible else "hidden",
            )
            for n in notes
        ]
        while True:
            head = r.store.head(r.session.id).high_water
            try:
                r.store.append(r.session.id, events, expect=head, lease=r.lease, blobs=blobs)
                return
            except AppendConflict:
                continue


def attach(runner: Runner) -> list[str]:
    """Bind the session's processes to `runner` for its run: the limit, what the log knows, the
    notes that waited, and the processes that died since (restarting the restartable ones).
    Returns one line per process that died, for the recovery notice."""
    sid = runner.session.id
    procs = background.processes(sid)
    procs.limit = runner.config.max_background
    procs.may_store = _store_check(runner)
    recorder = LogRecorder(runner, procs)
    for notes, blobs in procs.waiting.take():
        recorder.record(notes, blobs=blobs)
    fold = fold_processes(runner.store.read(sid, kinds=PROCESS_KINDS))
    procs.take_handles(_numbered(list(fold.procs)))
    procs.past = lambda handle: _past(runner, handle)
    # A restarted process records its start after the note that it died.
    restarting = background.Waiting()
    procs.recorder = restarting
    lines = [
        _died(runner, recorder, procs, p) for p in fold.running() if p.handle not in procs.live
    ]
    procs.recorder = recorder
    for notes, blobs in restarting.take():
        recorder.record(notes, blobs=blobs)
    return lines


def _numbered(handles: Sequence[str]) -> int:
    out = 0
    for h in handles:
        tail = h.rsplit("-", 1)[-1]
        if tail.isdigit():
            out = max(out, int(tail))
    return out


def _died(runner: Runner, recorder: LogRecorder, procs: Processes, p: Process) -> str:
    """Record that `p` died with its Bubu (visible to the model), and start it again when it is
    restartable; the line for the recovery notice."""
    data = _output(runner, p)
    tail = data[-TAIL_BYTES:].decode("utf-8", "replace") if data else None
    restarted = False
    why = None
    if p.restart:
        try:
            procs.restart(_start_of(runner, p), offset=p.size)
            restarted = True
        except (BubuError, OSError) as e:
            why = f"it could not be started again: {e}"
    reason = "Bubu stopped while it ran (its processes were killed with it)"
    if why:
        reason += f"; {why}"
    note = ProcessEnded(
        handle=p.handle,
        how="died",
        command=p.command,
        reason=reason,
        tail=tail,
        restarted=restarted,
    )
    try:
        recorder.append_now([note], visible=True)
    except BubuError:
        procs.waiting.record([note])
    again = ", started again" if restarted else ""
    return f"background process {p.handle} ({p.command}): died with Bubu{again}"


def _start_of(runner: Runner, p: Process) -> Start:
    tc = runner.tool_calls
    return Start(
        handle=p.handle,
        call_id=p.call_id,
        command=p.command,
        cwd=runner.session.workspace,
        marker=f"{runner.session.id}/{runner.run}/{p.call_id}",
        keep=p.keep,
        restart=True,
        restarts=p.restarts + 1,
        sandbox=tc.confinement(),
        pass_env=tc.effective_policy.pass_env,
    )


def _output(runner: Runner, p: Process) -> bytes:
    parts = []
    for _, ref in p.chunks:
        data = runner.store.blob(ref.sha256)
        if data is not None:
            parts.append(data)
    return b"".join(parts)


def _store_check(runner: Runner) -> Callable[[int], str | None]:
    """Whether more output of a background process may be stored whole under the session's
    store quota: what the runner has folded, or at least what it had plus what was recorded
    since (chunks appended from the processes' threads are folded later)."""
    quota = runner.config.context.store_quota
    base = runner.stored.total
    since = 0

    def check(size: int) -> str | None:
        nonlocal since
        if quota is None:
            return None
        used = max(runner.stored.total, base + since)
        if used + size > quota:
            return (
                f"the session already stores {used:,} bytes of whole results and output, and "
                f"its quota, store_quota, is {quota:,}"
            )
        since += size
        return None

    return check


def _past(runner: Runner, handle: str) -> tuple[Process, bytes] | None:
    fold = fold_processes(runner.store.read(runner.session.id, kinds=PROCESS_KINDS))
    p = fold.procs.get(handle)
    return None if p is None else (p, _output(runner, p))


def end_of_turn(runner: Runner) -> None:
    """The turn ends: stop its processes (those kept for the session go on)."""
    procs = background.known(runner.session.id)
    if procs is not None and procs.live:
        _commit_staged(runner)
        procs.stop(["turn"], "the turn ended")


def _commit_staged(runner: Runner) -> None:
    """What the runner staged is committed first: the notes of stopped processes follow it."""
    if runner._staged:
        runner.append(())


def release(runner: Runner) -> None:
    """The run ends: nothing of its turn may outlive it; later notes wait for the next run."""
    procs = background.known(runner.session.id)
    if procs is None:
        return
    if any(p.start.keep == "turn" for p in procs.running()):
        with contextlib.suppress(BubuError):  # the notes then wait for the next run
            _commit_staged(runner)
        procs.stop(["turn"], "the run ended")
    if isinstance(procs.recorder, LogRecorder) and procs.recorder.runner is runner:
        procs.recorder = procs.waiting


def end_session(session: str, store: Store | None = None, owner: str = "") -> None:
    """The session ends in this Bubu process: stop every process it still runs; with `store`,
    what they recorded since the last turn is appended under a lease of its own (`owner`)."""
    procs = background.known(session)
    if procs is None:
        return
    procs.stop(["turn", "session"], "the session ended")
    waiting = procs.waiting.take()
    if store is None or not waiting:
        return
    with contextlib.suppress(BubuError):  # someone else runs it now: they write what is theirs
        lease = store.acquire_lease(session, owner or "bubu", 30.0)
        try:
            events = [
                make(
                    session=session,
                    role="system",
                    author="tool",
                    ts=clock.now_ms(),
                    content=SystemNote(note=n),
                    visibility="hidden",
                )
                for notes, _ in waiting
                for n in notes
            ]
            blobs = [b for _, bs in waiting for b in bs]
            head = store.head(session).high_water
            store.append(session, events, expect=head, lease=lease, blobs=blobs)
        finally:
            store.release_lease(lease)
