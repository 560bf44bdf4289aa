"""The keeper of one command's process tree: the runner's direct child (``python -I -S``).

It makes itself a child subreaper, so every descendant of the command — ``setsid`` and
double-forked ones included — stays in its tree instead of escaping to init. It starts the
command, reports its exit, and kills the whole tree when the runner asks, or at once when the
runner dies: its control pipe reaches end of file (the kernel closes it whatever killed the
runner, SIGKILL included) or the parent-death signal arrives. It imports nothing of Bubu, so it
starts in about ten milliseconds.

Lines on fd 3 (runner to keeper): ``kill GRACE`` (SIGTERM, then SIGKILL after GRACE seconds),
``detach`` (the command ended cleanly: keep background processes until the runner dies).
Before it starts the command it joins the cgroups named in ``BUBU_KEEPER_CGROUPS``, which the
runner made to limit it, and sets the rlimits named in ``BUBU_KEEPER_RLIMITS``.
Lines on fd 4 (keeper to runner): ``started PID``, ``exit CODE``, ``done LEFT`` (LEFT: how many
processes of the tree could not be confirmed dead), ``lingering COUNT`` (after ``detach``, when
background processes remain), ``error ERRNO PATH`` (the command could not be started). The keeper's
exit closes fd 4.

`serve` is the same keeper for a long-lived server that talks over its stdin and stdout (an MCP
server): no control pipes, the server's tree killed when the runner dies or when it is told to
stop.
"""

from __future__ import annotations

# Every import here is start-up time paid by every command: `_signal` and `_ctypes` are the C
# modules under `signal` (which imports enum) and `ctypes` (which builds every C type); together
# the two wrappers would cost about as much as the interpreter's own start.
import _ctypes
import os
import select
import sys
import time

TYPE_CHECKING = False  # typing costs start-up time; type checkers read this as True

if TYPE_CHECKING:
    import signal
else:
    import _signal as signal

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CTL_FD = 3
STATUS_FD = 4
CGROUP_VAR = "BUBU_KEEPER_CGROUPS"
"""The ``cgroup.procs`` files to join before the command starts, one per line
(`limits.JOIN_VAR`)."""
RLIMIT_VAR = "BUBU_KEEPER_RLIMITS"
"""The rlimits to set before the command starts, ``NAME=VALUE`` apart (`limits.RLIMIT_VAR`)."""
CONFIRM_S = 3.0
"""How long SIGKILLed processes have to disappear (a loaded machine schedules them late)."""

_DEFAULTED = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP)
"""Signals the started command gets back at their defaults (this process handles or ignores
them)."""

_dying = False
_tree_pgid = 0  # the command's process group: what is killed where /proc cannot be read


class _ULong(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "L"


class _Int(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "i"


class _CFunction(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


class _Libc:
    """What ctypes' C core needs of a library: its handle."""

    def __init__(self) -> None:
        self._handle = _ctypes.dlopen(None, os.RTLD_NOW)  # type: ignore[arg-type]


def _prctl(option: int, value: int) -> bool:
    """prctl(2) from libc, through ctypes' C core."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = _CFunction(("prctl", _Libc()))  # type: ignore[arg-type]
        prctl.argtypes = (_Int, _ULong, _ULong, _ULong, _ULong)
        return bool(prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError, TypeError):
        return False


def _say(line: str) -> None:
    try:  # noqa: SIM105 (contextlib costs start-up time)
        os.write(STATUS_FD, (line + "\n").encode())
    except OSError:
        pass  # a runner that is gone cannot read it; the tree is killed all the same


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids.extend(int(k) for k in f.read().split())
        except OSError:
            continue
    return kids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")


def _by_parent() -> dict[int, list[int]]:
    """Every process by its parent, for kernels without /proc/PID/task/TID/children."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        kids.setdefault(int(fields[1]), []).append(int(name))
    return kids


_HAS_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def descendants() -> list[int]:
    """Every live process below the keeper (a negative number: a whole process group)."""
    me = os.getpid()
    if not os.path.isdir(f"/proc/{me}"):
        try:
            os.killpg(_tree_pgid, 0)
        except OSError:
            return []
        return [-_tree_pgid] if _tree_pgid else []
    table = None if _HAS_CHILDREN_FILE else _by_parent()
    found: list[int] = []
    stack = [me]
    seen = {me}
    while stack:
        pid = stack.pop()
        for kid in _children(pid) if table is None else table.get(pid, []):
            if kid in seen:
                continue
            seen.add(kid)
            stack.append(kid)
            if _alive(kid):
                found.append(kid)
    return found


def reap(main: int) -> None:
    """Reap every exited child (orphans of the tree are ours too); report the main command's."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == main:
            _say(f"exit {os.waitstatus_to_exitcode(status)}")


def kill_tree(main: int, grace: float) -> int:
    """SIGTERM the tree, SIGKILL what is left after `grace`; how many could not be confirmed
    dead."""
    if grace > 0 and descendants():
        for pid in descendants():
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            reap(main)
            if not descendants():
                return 0
            time.sleep(0.02)
    # Killed in rounds: a process forked between a scan and the kill is found by the next one
    # (a subreaper adopts it when its parent dies).
    deadline = time.monotonic() + CONFIRM_S
    while True:
        reap(main)
        left = descendants()
        if not left or time.monotonic() > deadline:
            return len(left)
        for pid in left:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.005)


def _signal(pid: int, sig: int) -> None:
    try:  # noqa: SIM105 (contextlib costs start-up time)
        os.kill(pid, sig)
    except OSError:
        pass  # gone already


def _on_term(signum: int, frame: object) -> None:
    global _dying
    _dying = True


def _arm(parent: int) -> int:
    """Become the tree's subreaper, take SIGTERM and SIGHUP as "stop" and the runner's death as
    SIGTERM, and wake on signals; the read end of the wake-up pipe, or -1 when the runner
    `parent` is already gone."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGHUP, _on_term)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    return wake_r if os.getppid() == parent else -1


def main(argv: list[str]) -> int:
    """Start the command in argv[2:] in directory argv[1] for the runner whose pid is argv[0]."""
    global _tree_pgid
    parent, cwd, command = int(argv[0]), argv[1], argv[3:]
    # The command must not hold these: the runner reads the end of fd 4 as the keeper's end.
    for fd in (CTL_FD, STATUS_FD):
        try:  # noqa: SIM105 (contextlib costs start-up time)
            os.set_inheritable(fd, False)
        except OSError:
            pass  # not open: started by hand, without a runner
    wake_r = _arm(parent)
    if wake_r < 0:
        return 0  # the runner died before the parent-death signal was armed: start nothing
    try:
        os.chdir(cwd)
    except OSError as e:
        _say(f"error {e.errno} {cwd}")
        return 1
    # The cgroups that limit the command: joined here, before it starts, so that every process
    # of its tree is born in them (the runner made them and wrote the limits).
    for procs in os.environ.pop(CGROUP_VAR, "").splitlines():
        try:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        except OSError as e:
            _say(f"error {e.errno} {procs}")
            return 1
    limits = os.environ.pop(RLIMIT_VAR, "")
    if limits:
        import resource  # only for a sandboxed command (a small C module)

        for spec in limits.split():
            name, _, value = spec.partition("=")
            which = getattr(resource, f"RLIMIT_{name}")
            hard = resource.getrlimit(which)[1]
            # Soft and hard alike, so the command cannot raise it; never above a hard limit
            # the user has already set lower.
            wanted = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
            resource.setrlimit(which, (wanted, wanted))
    try:
        main_pid = os.posix_spawnp(
            command[0],
            command,
            dict(os.environ),
            setpgroup=0,
            setsigdef=_DEFAULTED,
        )
    except OSError as e:
        _say(f"error {e.errno} {command[0]}")
        return 1
    _tree_pgid = main_pid
    # The command's output pipe must reach end of file when the tree closes it, not when we do.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.dup2(null, 2)
    _say(f"started {main_pid}")
    detached = False
    pending = b""
    while True:
        reap(main_pid)
        if _dying:
            kill_tree(main_pid, 0)
            return 0
        if detached and not descendants():
            return 0
        ready, _, _ = select.select([CTL_FD, wake_r], [], [], 1.0 if detached else 0.5)
        if wake_r in ready:
            os.read(wake_r, 512)
        if CTL_FD not in ready:
            continue
        data = os.read(CTL_FD, 512)
        if not data:
            kill_tree(main_pid, 0)  # the runner died: nobody will record an outcome, kill now
            return 0
        pending += data
        while b"\n" in pending:
            line, _, pending = pending.partition(b"\n")
            word, _, arg = line.decode().partition(" ")
            if word == "kill":
                _say(f"done {kill_tree(main_pid, float(arg or 0))}")
                return 0
            if word == "detach":
                # From now on only the runner's own death ends the tree, not a thread of it
                # exiting (the parent-death signal follows the thread that started us).
                _prctl(PR_SET_PDEATHSIG, 0)
                left = descendants()
                if not left:
                    return 0
                detached = True
                _say(f"lingering {len(left)}")


SERVER_GRACE_S = 1.0
"""How long a server's tree has after SIGTERM, once its runner is gone, before SIGKILL."""


def serve(argv: list[str]) -> int:
    """Hold a long-lived server (an MCP server, on this process's stdin and stdout) in argv[1:]
    for the runner whose pid is argv[0]: start it as a child that inherits the pipes, and kill
    its whole tree when the runner dies (the parent-death signal: a SIGKILLed runner included)
    or when this process is told to stop (SIGTERM, SIGHUP), or once the server itself exits.
    The server stays in this process's group, which the runner kills as the server's; the exit
    code is the server's."""
    parent, command = int(argv[0]), argv[1:]
    wake_r = _arm(parent)
    if wake_r < 0:
        return 0  # the runner died before the parent-death signal was armed: start nothing
    try:
        main_pid = os.posix_spawnp(
            command[0],
            command,
            dict(os.environ),
            setsigdef=_DEFAULTED,
        )
    except OSError as e:
        os.write(2, f"bubu: cannot start the server {command[0]}: {e.strerror}\n".encode())
        return 127
    # The server's pipes must reach end of file when it closes them, not when this process does.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        code = _exited(main_pid)
        if _dying or code is not None:
            kill_tree(main_pid, SERVER_GRACE_S if _dying else 0.0)
            return 0 if code is None else code
        ready, _, _ = select.select([wake_r], [], [], 0.5)
        if ready:
            os.read(wake_r, 512)


def _exited(main: int) -> int | None:
    """Reap every exited child; the main one's exit code once it has exited, else None."""
    code = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return code
        if pid == 0:
            return code
        if pid == main:
            code = os.waitstatus_to_exitcode(status)


def run() -> None:
    """The entry point: exit without the interpreter's finalization (it only costs time here)."""
    os._exit(main(sys.argv[1:]))


def run_server() -> None:
    """The entry point of `serve`."""
    os._exit(serve(sys.argv[1:]))


if __name__ == "__main__":
    run()
