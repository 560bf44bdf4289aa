"""Limits a sandboxed command runs under: processes, memory and the size of one file.

Two mechanisms, each used where it binds:

- a **cgroup** per command (v1 ``pids`` and ``memory`` hierarchies that this process may write),
  which the keeper joins before it starts the command: ``pids.max`` and the memory limit bind
  every process of the tree, root's too, and their counters say afterwards which was reached;
- **rlimits**: ``RLIMIT_FSIZE`` (binds everyone) and, where there is no memory cgroup,
  ``RLIMIT_DATA`` per process, set by the keeper and inherited; where there is no pids cgroup,
  ``RLIMIT_NPROC`` set inside the sandbox after bubblewrap made its user namespace (``ulimit``
  in the shell that then runs the command), which binds a normal user (counted per user
  namespace, so only the sandbox's processes count) but never root.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import re
import signal
import threading
import time
from dataclasses import dataclass

from bubu import sizes
from bubu.errors import ConfigError

DEFAULT_PROCS = 1024
DEFAULT_MEMORY = "50%"
DEFAULT_FILE_SIZE = "4G"
CGROUP_ROOT = "/sys/fs/cgroup"
JOIN_VAR = "BUBU_KEEPER_CGROUPS"
"""Tells the keeper which ``cgroup.procs`` files to join (one per line) before it starts."""
RLIMIT_VAR = "BUBU_KEEPER_RLIMITS"
"""Tells the keeper which rlimits to set (``FSIZE=BYTES DATA=BYTES``) before it starts."""


def parse_size(text: str, *, option: str, share: bool = False) -> int:
    """Bytes named by `text` (``512M``, ``4G``, a plain number of bytes, or with `share` a
    percentage of this machine's memory); a one-line ConfigError otherwise."""
    return sizes.parse_size(text, option=option, percent_of=sizes.memory_total if share else None)


def parse_procs(text: str | int, *, option: str = "--max-procs") -> int:
    """A process count above 0, or a one-line ConfigError."""
    try:
        count = int(str(text).strip())
    except ValueError:
        count = 0
    if count <= 0:
        raise ConfigError(f"{option} takes a whole number of processes above 0, got {text!r}")
    return count


def human(size: int) -> str:
    """A byte count as people read it (4 GiB, 512 MiB)."""
    for unit, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit:
            return f"{size / unit:.3g} {name}"
    return f"{size} bytes"


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """What one sandboxed command may use: processes (threads count), memory, one file's size."""

    procs: int = 0
    """Processes and threads (0: the default)."""
    memory: int = 0
    """Bytes (0: the default share of this machine's memory)."""
    file_size: int = 0
    """Bytes (0: the default)."""

    def proc_count(self) -> int:
        """The process limit."""
        return self.procs or DEFAULT_PROCS

    def memory_bytes(self) -> int:
        """The memory limit in bytes."""
        return self.memory or parse_size(DEFAULT_MEMORY, option="--max-memory", share=True)

    def file_bytes(self) -> int:
        """The file-size limit in bytes."""
        return self.file_size or parse_size(DEFAULT_FILE_SIZE, option="--max-file-size")


def tighter(recorded: Limits, given: Limits) -> Limits:
    """The `recorded` limits, lowered where `given` names a lower one (a limit `given` leaves at
    its default, or names higher, changes nothing)."""

    def low(r: int, g: int, effective: int) -> int:
        return r if not g or g >= effective else g

    return Limits(
        procs=low(recorded.procs, given.procs, recorded.proc_count()),
        memory=low(recorded.memory, given.memory, recorded.memory_bytes()),
        file_size=low(recorded.file_size, given.file_size, recorded.file_bytes()),
    )


def keeper_rlimits(limits: Limits, cgroup: Cgroup | None) -> str:
    """The rlimits the keeper sets on itself before it starts bubblewrap, which the command
    inherits: the file size, and a per-process data limit where no memory cgroup binds."""
    out = [f"FSIZE={limits.file_bytes()}"]
    if cgroup is None or cgroup.memory is None:
        out.append(f"DATA={limits.memory_bytes()}")
    return " ".join(out)


def nproc_argv(limits: Limits, cgroup: Cgroup | None, argv: list[str]) -> list[str]:
    """`argv` run by a bash that first sets RLIMIT_NPROC, where no pids cgroup binds: inside the
    sandbox, after bubblewrap made its user namespace, so only the sandbox's processes count
    (set before, the kernel would count every process of the user against it)."""
    if cgroup is not None and cgroup.pids is not None:
        return argv
    script = f'ulimit -u {limits.proc_count()} || exit 126; exec "$@"'
    return [argv[0], "-c", script, "bubu-limits", *argv]


@functools.cache
def _own(hierarchy: str) -> str | None:
    """This process's cgroup directory in the v1 `hierarchy`, if it may create cgroups there."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if hierarchy in controllers.split(","):
            full = os.path.join(CGROUP_ROOT, hierarchy, path.lstrip("/"))
            if os.access(full, os.W_OK) and os.path.exists(os.path.join(full, "cgroup.procs")):
                return full
    return None


_counter = itertools.count(1)
_swept = threading.Event()


def _sweep(parent: str) -> None:
    """Remove cgroups left by a Bubu process that is gone (SIGKILLed before it could)."""
    with contextlib.suppress(OSError), os.scandir(parent) as listing:
        for e in listing:
            m = re.fullmatch(r"bubu-(\d+)-\d+", e.name)
            if m and not os.path.exists(f"/proc/{m.group(1)}"):
                with contextlib.suppress(OSError):
                    os.rmdir(e.path)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cgroup:
    """One command's cgroups: the pids one and the memory one (either may be missing)."""

    pids: str | None
    memory: str | None
    limits: Limits

    def procs_files(self) -> str:
        """The ``cgroup.procs`` files the keeper joins, one per line."""
        return "\n".join(os.path.join(d, "cgroup.procs") for d in (self.pids, self.memory) if d)

    def hit(self) -> list[str]:
        """Which limits the command reached, in words."""
        out: list[str] = []
        if self.pids is not None:
            events = _read(os.path.join(self.pids, "pids.events"))
            m = re.search(r"max (\d+)", events)
            if m and int(m.group(1)) > 0:
                n = int(m.group(1))
                out.append(
                    f"the process limit ({self.limits.proc_count():,} processes and threads) was "
                    f"reached: {n:,} {'fork was' if n == 1 else 'forks were'} refused"
                )
        if self.memory is not None:
            oom = re.search(
                r"oom_kill (\d+)", _read(os.path.join(self.memory, "memory.oom_control"))
            )
            if oom and int(oom.group(1)) > 0:
                out.append(
                    f"the memory limit ({human(self.limits.memory_bytes())}) was reached: "
                    "the kernel killed a process of the command"
                )
            elif _read(os.path.join(self.memory, "memory.failcnt")).strip() not in ("", "0"):
                out.append(f"the memory limit ({human(self.limits.memory_bytes())}) was reached")
        return out

    def remove(self) -> None:
        """Remove the cgroups; one still busy (its keeper is exiting) is removed by a later
        command, at exit, or by the sweep of the next Bubu process."""
        for d in (self.pids, self.memory):
            if d is not None and not _rmdir(d):
                with _pending_lock:
                    _pending.append(d)


_pending: list[str] = []
_pending_lock = threading.Lock()


def _rmdir(path: str) -> bool:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _retry_pending(wait_s: float = 0.0) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        with _pending_lock:
            _pending[:] = [d for d in _pending if not _rmdir(d)]
            if not _pending or time.monotonic() >= deadline:
                return
        time.sleep(0.01)


atexit.register(_retry_pending, 1.0)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def cgroup_for(limits: Limits) -> Cgroup | None:
    """Fresh cgroups holding `limits` for one command, or None where this process cannot make
    them (the rlimits then apply alone)."""
    _retry_pending()
    pids_parent, mem_parent = _own("pids"), _own("memory")
    if pids_parent is None and mem_parent is None:
        return None
    if not _swept.is_set():
        _swept.set()
        for parent in (pids_parent, mem_parent):
            if parent is not None:
                _sweep(parent)
    name = f"bubu-{os.getpid()}-{next(_counter)}"
    made: dict[str, str | None] = {"pids": None, "memory": None}
    for kind, parent, file, value in (
        ("pids", pids_parent, "pids.max", str(limits.proc_count())),
        ("memory", mem_parent, "memory.limit_in_bytes", str(limits.memory_bytes())),
    ):
        if parent is None:
            continue
        path = os.path.join(parent, name)
        try:
            os.mkdir(path)
        except OSError:
            continue
        try:
            _write(os.path.join(path, file), value)
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            continue
        made[kind] = path
    if made["pids"] is None and made["memory"] is None:
        return None
    return Cgroup(pids=made["pids"], memory=made["memory"], limits=limits)


def file_size_hit(returncode: int, limits: Limits) -> str | None:
    """The words for a command that a file-size limit stopped (SIGXFSZ), else None."""
    if returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        return (
            f"a file probably reached the file-size limit ({human(limits.file_bytes())}): "
            "the command ended by SIGXFSZ"
        )
    return None
