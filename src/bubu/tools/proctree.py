"""A command's process tree, held by a keeper so that nothing of it outlives the runner.

Every command is started through `keeper.py`, a small supervisor that is the runner's direct child
(see its docstring for why and how). This module is the runner's side of it: start a command
under a keeper, learn when it exits, have its tree killed or kept, and — for recovery and for a
keeper that vanished — find and kill processes by the marker every command carries in its
environment (``BUBU_CALL=session/run/call``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bubu import clock
from bubu.errors import ToolError

MARKER_VAR = "BUBU_CALL"
"""The environment variable that names the session, run and call a process belongs to."""

KEEPER = str(Path(__file__).with_name("keeper.py"))


def keeper_argv(*args: str, entry: str = "run") -> list[str]:
    """The command line of a keeper: imported rather than run as a script, so that its compiled
    form is cached (its directory last on the path: it must not shadow the standard library);
    isolated (-I) and without site (-S), so that it starts in a few milliseconds. `entry` is
    `run` for a command, `run_server` for a long-lived server (`keeper.serve`)."""
    boot = (
        f"import sys; sys.path.append({str(Path(KEEPER).parent)!r}); import keeper; "
        f"keeper.{entry}()"
    )
    return [sys.executable, "-I", "-S", "-c", boot, *args]


def server_argv(argv: Sequence[str]) -> list[str]:
    """A long-lived server's command line under a keeper that kills its tree when this process
    dies, however it dies (`keeper.serve`)."""
    return keeper_argv(str(os.getpid()), *argv, entry="run_server")


ANSWER_S = 10.0
"""How long the keeper may take to answer beyond the grace it was given."""

_lingering: dict[int, tuple[int, str]] = {}
"""Keepers of commands that ended but left background processes: pid → (control fd, marker)."""
_lingering_lock = threading.Lock()  # commands of one response run on several threads


@dataclass(slots=True, kw_only=True)
class Tree:
    """A running command under its keeper."""

    keeper: int
    marker: str
    ctl: int
    status: int
    pid: int | None = None
    returncode: int | None = None
    left: int | None = None
    lingering: bool = False
    ended: bool = False
    """The keeper closed its status pipe: it has exited or is exiting."""
    error: str | None = None
    _pending: bytes = field(default=b"")

    def fileno(self) -> int:
        """The status pipe, for a selector."""
        return self.status

    def read_status(self) -> bool:
        """Take the keeper's lines that have arrived; False once it has closed the pipe."""
        while True:
            try:
                data = os.read(self.status, 4096)
            except BlockingIOError:
                return True
            if not data:
                self.ended = True
                return False
            self._pending += data
            while b"\n" in self._pending:
                line, _, self._pending = self._pending.partition(b"\n")
                word, _, arg = line.decode(errors="replace").partition(" ")
                if word == "started":
                    self.pid = int(arg)
                elif word == "exit":
                    self.returncode = int(arg)
                elif word == "done":
                    self.left = int(arg)
                elif word == "lingering":
                    self.lingering = True
                elif word == "error":
                    self.error = arg

    def _send(self, line: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self.ctl, (line + "\n").encode())

    def _answer(self, within: float, until: Callable[[], bool]) -> bool:
        """Wait until `until()` or the keeper's end; False when neither came in time."""
        deadline = clock.monotonic() + within
        while not until() and clock.monotonic() < deadline:
            ready, _, _ = select.select([self.status], [], [], 0.05)
            if ready and not self.read_status():
                return True
        return until()

    def kill(self, grace: float) -> int:
        """Kill the whole tree (SIGTERM, SIGKILL after `grace`); how many could not be confirmed
        dead. A keeper that vanished or does not answer is replaced by a search for the marker."""
        self._send(f"kill {grace:g}")
        answered = self._answer(grace + ANSWER_S, lambda: self.left is not None)
        answered = answered and self.left is not None
        self._close(wait=answered)
        left = self.left if answered and self.left is not None else None
        # Whatever escaped the keeper (it was killed, or it could not see the tree) still carries
        # the marker.
        killed = kill_marked(lambda m: m == self.marker)
        return len(killed.alive) if left is None else left + len(killed.alive)

    def finish(self) -> None:
        """The command ended cleanly: background processes it left keep running until the
        runner dies, and are killed then."""
        self._send("detach")
        self._answer(ANSWER_S, lambda: self.lingering)
        if self.lingering:
            os.close(self.status)
            with _lingering_lock:
                _lingering[self.keeper] = (self.ctl, self.marker)
            return
        self._close(wait=self.ended)

    def _close(self, *, wait: bool) -> None:
        with contextlib.suppress(OSError):
            os.close(self.status)
        with contextlib.suppress(OSError):
            os.close(self.ctl)  # end of file: a keeper that is still there kills what is left
        if wait:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.keeper, 0)
        elif not _reaped(self.keeper):
            with _lingering_lock:
                _lingering[self.keeper] = (-1, "")  # reaped later; its marker is not spared


def _reaped(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done != 0


def _reap_lingering() -> None:
    with _lingering_lock:
        for pid, (ctl, _) in list(_lingering.items()):
            if _reaped(pid):
                del _lingering[pid]
                if ctl >= 0:
                    os.close(ctl)


def own_markers() -> set[str]:
    """Markers of this process's own background trees, which a search must never kill."""
    _reap_lingering()
    with _lingering_lock:
        return {marker for _, marker in _lingering.values()}


def _high(fd: int) -> int:
    """A close-on-exec copy of `fd` above the numbers the keeper is given, and `fd` closed."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


def start(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    output: int,
    stdin: int | None = None,
    errors: int | None = None,
) -> Tree:
    """Start `argv` under a keeper, its stdout and stderr on `output` (stderr on `errors` when
    given), stdin empty (or read from the file `stdin`)."""
    _reap_lingering()
    marker = env.get(MARKER_VAR, "")
    try:
        for arg in argv:
            os.fsencode(arg)
    except UnicodeEncodeError as err:
        raise ToolError("the command contains characters that cannot be passed to a shell") from err
    ctl_r, ctl_w = (_high(fd) for fd in os.pipe())
    st_r, st_w = (_high(fd) for fd in os.pipe())
    out = fcntl.fcntl(output, fcntl.F_DUPFD_CLOEXEC, 10)
    err_fd = out if errors is None else fcntl.fcntl(errors, fcntl.F_DUPFD_CLOEXEC, 10)
    inp = None if stdin is None else fcntl.fcntl(stdin, fcntl.F_DUPFD_CLOEXEC, 10)
    first = (
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
        if inp is None
        else (os.POSIX_SPAWN_DUP2, inp, 0)
    )
    extra = tuple(fd for fd in (inp, None if err_fd == out else err_fd) if fd is not None)
    try:
        keeper = os.posix_spawn(
            sys.executable,
            keeper_argv(str(os.getpid()), cwd, "--", *argv),
            dict(env),
            file_actions=[
                first,
                (os.POSIX_SPAWN_DUP2, out, 1),
                (os.POSIX_SPAWN_DUP2, err_fd, 2),
                (os.POSIX_SPAWN_DUP2, ctl_r, 3),
                (os.POSIX_SPAWN_DUP2, st_w, 4),
            ],
            setsid=True,
        )
    except OSError as err:
        for fd in (ctl_r, ctl_w, st_r, st_w, out, *extra):
            os.close(fd)
        raise ToolError(f"the command could not be started: {err}") from err
    for fd in (ctl_r, st_w, out, *extra):
        os.close(fd)
    os.set_blocking(st_r, False)
    return Tree(keeper=keeper, marker=marker, ctl=ctl_w, status=st_r)


@dataclass(frozen=True, slots=True, kw_only=True)
class Killed:
    """What a search for marked processes found: those now gone, and those still alive."""

    gone: dict[str, int] = field(default_factory=dict)
    """How many processes were killed, by marker."""
    alive: list[int] = field(default_factory=list)
    """Processes that could not be confirmed dead."""


def _marker_of(pid: str, uid: int) -> str | None:
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return None  # another user's processes are never ours to kill
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return None
    key = MARKER_VAR.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(key):
            return entry[len(key) :].decode(errors="replace")
    return None


def _start_time(pid: int) -> bytes | None:
    """The process's start time, which tells it from a later process that reuses its pid;
    None once it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return None if fields[0] in (b"Z", b"X") else fields[19]


def marked(match: Callable[[str], bool]) -> dict[int, str]:
    """This user's live processes whose marker `match` accepts, except this process's own."""
    if not os.path.isdir("/proc/self"):
        return {}
    uid, me, own = os.getuid(), os.getpid(), own_markers()
    found: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        marker = _marker_of(name, uid)
        if marker is not None and marker not in own and match(marker):
            found[int(name)] = marker
    return found


def kill_marked(match: Callable[[str], bool], *, confirm_s: float = 3.0) -> Killed:
    """SIGKILL every process `marked` finds, in rounds until none is left, and confirm each gone."""
    gone: dict[str, int] = {}
    started: dict[int, tuple[bytes, str]] = {}
    deadline = clock.monotonic() + confirm_s
    while True:
        for pid, marker in marked(match).items():
            born = _start_time(pid)
            if born is not None and pid not in started:
                started[pid] = (born, marker)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        for pid, (born, marker) in list(started.items()):
            if _start_time(pid) != born:
                del started[pid]
                gone[marker] = gone.get(marker, 0) + 1
        if (not started and not marked(match)) or clock.monotonic() > deadline:
            return Killed(gone=gone, alive=sorted(started))
        time.sleep(0.01)


def session_match(session: str) -> Callable[[str], bool]:
    """A marker test for every process of `session`, whatever run or call started it."""
    return lambda marker: marker.startswith(session + "/")


def call_of(marker: str) -> str:
    """The call id in a marker (``session/run/call``)."""
    return marker.split("/", 2)[-1]
