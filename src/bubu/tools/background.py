"""Background processes: commands that run beside the turn, read, waited for and stopped by tools.

``run_command{command, background: true}`` starts the command exactly as a foreground one —
under a keeper that kills its whole tree when the runner dies, in the turn's sandbox, with the
call's marker in its environment — and returns a handle (``bg-1``) at once. A thread per process
reads its output as it arrives: every byte is kept in a local spool for `process_output`, and
chunks of it are recorded in the log (blobs named by `process_output` notes), so a long-running
server's output is durable. Its lifecycle is in the log too: started, exited with its code,
killed, or died with Bubu (written by the engine, `bubu.engine.processes`).

A session's processes are held by its `Processes` (one per session in this Bubu process), which
enforces the limit of processes at once and stops them when their turn — or, with
``keep: "session"``, their session — ends. What is recorded goes through the `Recorder` the engine
attaches while a turn runs (between turns, notes wait for the next one).
"""

from __future__ import annotations

import os
import select
import selectors
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from bubu import clock
from bubu.errors import ToolError
from bubu.events import BlobRef, Note, ProcessEnded, ProcessKeep, ProcessOutput, ProcessStarted
from bubu.log import codec, redact
from bubu.projections.processes import Process
from bubu.tools import controlfiles, netns, proctree
from bubu.tools.sandbox import Sandbox
from bubu.tools.shell import FULL_BYTES, KILL_GRACE_S, Spawn, aftermath, spawn_spec

DEFAULT_LIMIT = 4
"""Background processes one session may run at once (config key ``max_background``)."""

CHUNK_BYTES = 64 << 10
"""A chunk of output is recorded once this much has arrived…"""
FLUSH_S = 1.0
"""…or once the oldest unrecorded byte is this old."""

TAIL_BYTES = 2000
"""The last output a recovery shows the model of a process that died."""

_POLL_S = 0.05
_READ = 1 << 16
_spawner_pool: Any = None
_spawner_lock = threading.Lock()


def _spawner() -> Any:
    """The one thread that starts keepers (made on first use: a view that only lists the tools
    loads no thread pool)."""
    global _spawner_pool
    with _spawner_lock:
        if _spawner_pool is None:
            import concurrent.futures as cf

            _spawner_pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="bubu-spawner")
        return _spawner_pool


class Recorder(Protocol):
    """Where a session's process notes go: the log, through the runner's lease."""

    def record(self, notes: Sequence[Note], *, blobs: Sequence[bytes] = ()) -> None:
        """Append `notes` (and the blobs they name); never raises."""


class Waiting:
    """The recorder between turns: notes wait here for the next runner (`Processes.attach`)."""

    def __init__(self) -> None:
        self.notes: list[tuple[list[Note], list[bytes]]] = []
        self._lock = threading.Lock()

    def record(self, notes: Sequence[Note], *, blobs: Sequence[bytes] = ()) -> None:
        """Keep `notes` until a runner takes them."""
        with self._lock:
            self.notes.append((list(notes), list(blobs)))

    def take(self) -> list[tuple[list[Note], list[bytes]]]:
        """The waiting notes, in order; none are left."""
        with self._lock:
            out, self.notes = self.notes, []
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Start:
    """What a background process is started from (kept, so a restartable one can start again)."""

    handle: str
    call_id: str
    command: str
    cwd: str
    marker: str
    keep: ProcessKeep = "turn"
    restart: bool = False
    restarts: int = 0
    sandbox: Sandbox | None = None
    pass_env: tuple[str, ...] = ()


class Proc:
    """One running background process and the thread that reads it."""

    def __init__(self, start: Start, owner: Processes, *, offset: int = 0) -> None:
        self.start = start
        self.owner = owner
        self.pid: int | None = None
        self.state = "running"
        self.code: int | None = None
        self.total = offset
        """Bytes of output so far (a restarted process continues its old output)."""
        self.first = offset
        """Where this incarnation's output starts."""
        fd, path = tempfile.mkstemp(prefix="bubu-bg-")
        os.unlink(path)
        self._spool = fd
        """Every byte of this incarnation's output (up to FULL_BYTES), for `read`."""
        self._pending = bytearray()
        self._pending_since = 0.0
        self._recorded = offset
        self._last_byte = b"\n"
        self._unstored = 0
        """Bytes of output not recorded, past the session's store quota."""
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._kill: float | None = None
        self.kill_reason = ""
        self.done = threading.Event()

    # -- starting ---------------------------------------------------------------------------------

    def launch(self) -> None:
        """Start the process under its keeper and its reader thread; record it started."""
        s = self.start
        spec = spawn_spec(s.command, s.cwd, s.marker, sandbox=s.sandbox, pass_env=s.pass_env)
        out_r, out_w = os.pipe()
        try:
            # From a thread that lives as long as Bubu: the keeper's parent-death signal follows
            # the thread that started it, and a tool's thread ends before the process may.
            tree = (
                _spawner()
                .submit(proctree.start, spec.argv, cwd=spec.cwd, env=spec.env, output=out_w)
                .result()
            )
        except BaseException:  # undone, then re-raised: Ctrl-C and exits too
            os.close(out_r)
            aftermath(spec, None, s.sandbox)
            raise
        finally:
            os.close(out_w)
        os.set_blocking(out_r, False)
        deadline = clock.monotonic() + proctree.ANSWER_S
        while tree.pid is None and tree.error is None and clock.monotonic() < deadline:
            if not tree.read_status():
                break
            select.select([tree.status], [], [], _POLL_S)
        if tree.error is not None or tree.pid is None:
            os.close(out_r)
            tree.kill(0)
            aftermath(spec, None, s.sandbox)
            why = tree.error or "its keeper did not start it"
            raise ToolError(f"the background command could not be started ({why})")
        self.pid = tree.pid
        self.owner.recorder.record(
            [
                ProcessStarted(
                    handle=s.handle,
                    call_id=s.call_id,
                    command=s.command,
                    pid=self.pid,
                    keep=s.keep,
                    restart=s.restart,
                    restarts=s.restarts,
                )
            ]
        )
        reader = threading.Thread(
            target=self._read, args=(tree, out_r, spec), name=f"bubu-{s.handle}", daemon=True
        )
        reader.start()

    # -- the reader thread ------------------------------------------------------------------------

    def _read(self, tree: proctree.Tree, fd: int, spec: Spawn) -> None:
        pipe_open = keeper_open = True
        watch = None if spec.controls is None else controlfiles.Watch(spec.controls)
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            sel.register(tree.status, selectors.EVENT_READ)
            while tree.returncode is None and keeper_open and self._kill is None:
                if watch is not None and (said := watch.poll()) is not None:
                    self._say(said)
                for key, _ in sel.select(_POLL_S):
                    if key.fd == fd and pipe_open:
                        pipe_open = self._drain(fd)
                        if not pipe_open:
                            sel.unregister(fd)
                    elif key.fd == tree.status and not tree.read_status():
                        keeper_open = False
                        sel.unregister(tree.status)
                if not pipe_open and keeper_open and tree.returncode is None:
                    self.done.wait(_POLL_S)  # nothing to read: wait for the exit
                self._flush(force=False)
            killed = self._kill is not None
            # What it printed last, then nothing of its tree may outlive it.
            end = clock.monotonic() + _POLL_S * 4
            while pipe_open and not killed and clock.monotonic() < end:
                if any(key.fd == fd for key, _ in sel.select(_POLL_S)):
                    pipe_open = self._drain(fd)
            left = tree.kill(self._kill if killed and self._kill is not None else 0)
            while pipe_open and any(key.fd == fd for key, _ in sel.select(_POLL_S)):
                pipe_open = self._drain(fd)
        os.close(fd)
        for said in aftermath(spec, tree.returncode, self.start.sandbox):
            self._say(said)
        self._flush(force=True)
        self._end(tree, killed, left)

    def _drain(self, fd: int) -> bool:
        """Read what is available; False at end of file."""
        for _ in range(16):
            try:
                data = os.read(fd, _READ)
            except BlockingIOError:
                return True
            if not data:
                return False
            self._feed(data)
        return True

    def _say(self, note: str) -> None:
        """Put Bubu's own note about the process (a limit it reached, a control file reverted)
        in its output, on a line of its own, where the model and the log read it."""
        with self._lock:
            fresh = self._last_byte == b"\n"
        self._feed((b"" if fresh else b"\n") + f"[bubu: {note}]\n".encode())

    def _feed(self, data: bytes) -> None:
        with self._lock:
            if self.total < FULL_BYTES:
                keep = data[: FULL_BYTES - (self.total - self.first)]
                os.pwrite(self._spool, keep, self.total - self.first)
                if not self._pending:
                    self._pending_since = clock.monotonic()
                self._pending += keep
            self.total += len(data)
            if data:
                self._last_byte = data[-1:]

    def _flush(self, *, force: bool) -> None:
        """Record the output that arrived since the last chunk, when it is due (one flush at a
        time, so the chunks reach the log in their order)."""
        with self._flushing:
            self._flush_locked(force=force)

    def _flush_locked(self, *, force: bool) -> None:
        with self._lock:
            if not self._pending:
                return
            due = len(self._pending) >= CHUNK_BYTES
            due = due or clock.monotonic() - self._pending_since >= FLUSH_S
            if not (due or force):
                return
            # Cut after the last newline when there is one, so a line (and a secret in it) is
            # never split between two chunks.
            cut = len(self._pending)
            if not force and (nl := self._pending.rfind(b"\n")) >= 0:
                cut = nl + 1
            data = bytes(self._pending[:cut])
            del self._pending[:cut]
            self._pending_since = clock.monotonic()
            offset = self._recorded
            self._recorded += len(data)
        data = redact.data(data)
        if self._unstored:  # past the session's quota the log keeps no more of it
            self._unstored += len(data)
            return
        why = self.owner.may_store(len(data))
        if why is not None:  # the local spool still holds it, for process_output
            self._unstored = len(data)
            data = f"[bubu: the rest of this output is not stored in the log: {why}]\n".encode()
        lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        ref = BlobRef(sha256=codec.sha256_hex(data), size=len(data), lines=lines)
        note = ProcessOutput(handle=self.start.handle, offset=offset, chunk=ref)
        self.owner.recorder.record([note], blobs=[data])

    def _end(self, tree: proctree.Tree, killed: bool, left: int) -> None:
        s = self.start
        code = tree.returncode
        reason = None
        if killed:
            reason = self.kill_reason
        if left:
            more = f"{left} of its processes could not be confirmed dead and may still run"
            reason = f"{reason}; {more}" if reason else more
        note = ProcessEnded(
            handle=s.handle,
            how="killed" if killed else "exited",
            command=s.command,
            code=code,
            reason=reason,
        )
        self.state, self.code = note.how, code
        self.owner.recorder.record([note])
        self.owner.ended(self)
        self.done.set()

    # -- what the tools ask -----------------------------------------------------------------------

    def kill(self, reason: str, grace: float = KILL_GRACE_S) -> None:
        """Stop the whole tree (SIGTERM, SIGKILL after `grace`) and wait until it is recorded."""
        self.ask_kill(reason, grace)
        self.done.wait(grace + 2 * proctree.ANSWER_S)

    def ask_kill(self, reason: str, grace: float = KILL_GRACE_S) -> None:
        """Have the reader thread stop the tree (the first reason given is the one kept)."""
        if self._kill is None:
            self.kill_reason = reason
            self._kill = grace

    def sync(self) -> None:
        """Record what arrived so far now: what a tool shows the model is in the log."""
        if not self.done.is_set():
            self._flush(force=True)

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of this incarnation's output as far as it is kept."""
        with self._lock:
            if self._spool < 0:
                return b""
            return os.pread(self._spool, max(0, end - start), max(0, start - self.first))

    def tail(self, size: int = TAIL_BYTES) -> bytes:
        """The last `size` bytes of its output."""
        kept = min(self.total, self.first + FULL_BYTES)
        return self.read(max(self.first, kept - size), kept)

    def __del__(self) -> None:
        if self._spool >= 0:
            os.close(self._spool)
            self._spool = -1


class Processes:
    """The background processes of one session in this Bubu process."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.limit = DEFAULT_LIMIT
        self.waiting = Waiting()
        self.recorder: Recorder = self.waiting
        self.live: dict[str, Proc] = {}
        self.past: Callable[[str], tuple[Process, bytes] | None] = lambda handle: None
        """A handle of this session that no longer runs here: what the log says of it and its
        output (set by the engine)."""
        self.finished: dict[str, Proc] = {}
        self.may_store: Callable[[int], str | None] = lambda size: None
        """Whether `size` more bytes of output may be stored whole: None, or why not (the
        session's store quota; set by the engine)."""
        self.holder: netns.Holder | None = None
        """The network namespace the session's sandboxed commands share, once one is needed."""
        self._taken = 0
        self._lock = threading.Lock()

    def take_handles(self, count: int) -> None:
        """Handles ``bg-1`` … ``bg-COUNT`` are taken (the log names them)."""
        with self._lock:
            self._taken = max(self._taken, count)

    def confine(self, box: Sandbox | None, *, create: bool = False) -> Sandbox | None:
        """`box` joined to the session's shared network namespace (made first with `create`),
        when it has no network; unchanged where there is none."""
        if box is None or box.network:
            return box
        with self._lock:
            if create and (self.holder is None or not self.holder.alive()):
                marker = f"{self.session}/-/netns"
                self.holder = _spawner().submit(netns.start, box, marker).result()
            holder = self.holder
        if holder is None or not holder.alive():
            return box
        return replace(box, shared_net=holder.pid)

    def start(self, start: Start) -> Proc:
        """Start a background process (`start.handle` empty: the next free one); a ToolError
        when the session already runs as many as it may."""
        start = replace(start, sandbox=self.confine(start.sandbox, create=True))
        with self._lock:
            if len(self.live) >= self.limit:
                names = ", ".join(sorted(self.live))
                raise ToolError(
                    f"at most {self.limit} background processes may run at once in a session "
                    f"(config key max_background) and {names} are running; stop one with "
                    "process_kill or wait for one with process_wait first"
                )
            if not start.handle:
                self._taken += 1
                start = replace(start, handle=f"bg-{self._taken}")
            proc = Proc(start, self)
            self.live[start.handle] = proc
        try:
            proc.launch()
        except BaseException:  # undone, then re-raised: Ctrl-C and exits too
            with self._lock:
                self.live.pop(start.handle, None)
            raise
        return proc

    def restart(self, start: Start, offset: int) -> Proc:
        """Start a restartable process again under its old handle, its output continued."""
        start = replace(start, sandbox=self.confine(start.sandbox, create=True))
        proc = Proc(start, self, offset=offset)
        with self._lock:
            self.live[start.handle] = proc
        proc.launch()
        return proc

    def ended(self, proc: Proc) -> None:
        """`proc` has ended: it no longer counts against the limit."""
        with self._lock:
            if self.live.get(proc.start.handle) is proc:
                del self.live[proc.start.handle]
        self.finished[proc.start.handle] = proc

    def running(self) -> list[Proc]:
        """The processes running now (a copy: reader threads remove the ones that end)."""
        with self._lock:
            return list(self.live.values())

    def get(self, handle: str) -> Proc | None:
        """The process of `handle` run here (live or ended), or None."""
        return self.live.get(handle) or self.finished.get(handle)

    def stop(self, keep: Sequence[ProcessKeep], reason: str) -> None:
        """Kill every live process whose `keep` is in `keep`, all at once, and wait for them."""
        doomed = [p for p in self.running() if p.start.keep in keep]
        for p in doomed:
            p.ask_kill(reason)
        for p in doomed:
            p.kill(reason)
        if "session" in keep and self.holder is not None:
            self.holder.stop()
            self.holder = None


_REGISTRY: dict[str, Processes] = {}
_REGISTRY_LOCK = threading.Lock()


def processes(session: str) -> Processes:
    """The background processes of `session` in this Bubu process (made on first use)."""
    with _REGISTRY_LOCK:
        found = _REGISTRY.get(session)
        if found is None:
            found = _REGISTRY[session] = Processes(session)
        return found


def known(session: str) -> Processes | None:
    """The processes of `session` if this Bubu process has run any."""
    with _REGISTRY_LOCK:
        return _REGISTRY.get(session)
