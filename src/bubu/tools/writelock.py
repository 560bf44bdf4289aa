"""One writer at a time per file: the before-hash check and the rename of a provable write are
atomic with respect to every other Bubu write (DESIGN §4).

Two locks are held, in this order:

1. an in-process lock per file, keyed by the device and inode of its directory and its name, so
   two threads of one process (tools of one response, two sessions in one web UI) never
   interleave on a file, whatever path each used to reach it;
2. an advisory ``flock`` on the file's *directory*, so two Bubu processes on one workspace
   cannot interleave either. The directory, not the file, is locked because the write renames
   a new inode over the file: a lock on the old inode would not exclude a writer that opened the
   new one. Locking is advisory: editors and commands do not take it (the before-hash check
   still catches what they changed earlier). Where the filesystem has no ``flock``, only the
   in-process lock is held.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
from collections.abc import Iterator

from bubu.errors import ToolError

WAIT_S = 30.0
"""How long a write waits for another Bubu writer of the same file before it gives up."""

_POLL_S = 0.01

_locks: dict[tuple[int, int, str], tuple[threading.Lock, int]] = {}
_table = threading.Lock()


def _take(key: tuple[int, int, str]) -> threading.Lock:
    with _table:
        lock, users = _locks.get(key, (threading.Lock(), 0))
        _locks[key] = (lock, users + 1)
        return lock


def _drop(key: tuple[int, int, str]) -> None:
    with _table:
        lock, users = _locks[key]
        if users == 1:
            del _locks[key]
        else:
            _locks[key] = (lock, users - 1)


def _waited_out(deadline: float, cancel: threading.Event | None, what: str) -> None:
    if cancel is not None and cancel.is_set():
        raise ToolError(f"stopped while waiting for {what}; nothing was written")
    if time.monotonic() > deadline:
        raise ToolError(
            f"{what} stayed busy for {WAIT_S:.0f} s (another Bubu write); nothing was written, "
            "try again"
        )
    time.sleep(_POLL_S)


@contextlib.contextmanager
def write_lock(
    dir_fd: int, name: str, *, cancel: threading.Event | None = None, shown: str | None = None
) -> Iterator[None]:
    """Hold the file `name` of the directory `dir_fd` for one write (see the module docstring).

    Raises ToolError when the run is stopped, or another writer holds it for `WAIT_S`.
    """
    st = os.fstat(dir_fd)
    key = (st.st_dev, st.st_ino, name)
    what = shown or name
    deadline = time.monotonic() + WAIT_S
    lock = _take(key)
    try:
        while not lock.acquire(timeout=_POLL_S):
            _waited_out(deadline, cancel, what)
        try:
            with _flocked(dir_fd, deadline, cancel, what):
                yield
        finally:
            lock.release()
    finally:
        _drop(key)


@contextlib.contextmanager
def _flocked(
    dir_fd: int, deadline: float, cancel: threading.Event | None, what: str
) -> Iterator[None]:
    # A fresh open file description: flock excludes other descriptions, in this process too.
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    try:
        held = True
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                _waited_out(deadline, cancel, what)
            except OSError as err:
                if err.errno not in (errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL, errno.ENOSYS):
                    raise
                held = False  # no flock on this filesystem: the in-process lock still holds
                break
        try:
            yield
        finally:
            if held:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
