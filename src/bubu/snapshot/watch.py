"""A change feed for snapshots: Linux inotify watches on the workspace's directories.

A snapshot with a feed opens only what changed since the last one: the directories and names the
kernel reported, and what the last scan could not trust (a file modified within the racy window,
a file with more than one hard link). Everything else is the last scan's, unopened. The kernel
queues an event before the system call that changed a file returns, so once the queue is read,
every change made before is in it; a watch is added before its directory is listed, so a change
made while it is listed is in the next read.

What a feed cannot see, and what is done about it: a queue that overflowed (the next snapshot
walks everything); a directory on a file system other than a local disk's (never watched, so
always listed, as without a feed); a process that forked from this one (the feed is not used in
the child); a write through a shared memory mapping, and a write through a hard link that was made
outside the workspace after the file was scanned (the kernel reports neither to the workspace's
watches: `BUBU_SNAPSHOT_WATCH=off` turns the feed off for a workspace where that happens).
Without inotify (another system, no watches left) snapshots walk and stat every file.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_DONT_FOLLOW = 0x2000000
IN_EXCL_UNLINK = 0x4000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
_ENTRY_CHANGED = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
_SELF = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT

LOCAL_FILE_SYSTEMS = frozenset(
    {
        0xEF53,  # ext2, ext3, ext4
        0x58465342,  # xfs
        0x9123683E,  # btrfs
        0x01021994,  # tmpfs
        0xF2F52010,  # f2fs
        0x2FC12FC1,  # zfs
        0x794C7630,  # overlayfs (changes made through it)
        0x858458F6,  # ramfs
    }
)
"""File systems whose changes all pass through this kernel (a network or FUSE file system's may
be made elsewhere, where no event is queued)."""

MAX_FEEDS = 8
"""Feeds open at once in a process (each is an inotify instance, of which a user has few); the
least recently used is closed, and its workspace walks everything until it opens one again."""

MAX_WATCHES = 100_000
"""Directories one feed watches at most; the others are listed by every snapshot."""

_HEADER = struct.Struct("iIII")
ALL_NAME = "\0all"
"""In `Changes.names`: a directory's whole listing must be read again (not only some names)."""


@dataclass(slots=True)
class Changes:
    """What the feed reported since it was last read."""

    names: dict[str, set[str]] = field(default_factory=dict)
    """Per directory (relative, with its trailing slash; "" for the root): the names in it that
    changed, with `ALL_NAME` when its whole listing must be read again."""
    invalid: set[str] = field(default_factory=set)
    """Directories that were created, deleted, moved or replaced: nothing the last scan knew of
    them or beneath them holds."""
    overflow: bool = False
    """The queue overflowed (or the root itself changed): everything must be walked."""

    def mark(self, rel: str, name: str | None) -> None:
        got = self.names.setdefault(rel, set())
        got.add(ALL_NAME if name is None else name)

    def touched(self) -> set[str]:
        """Every directory that changed or holds one that did (each ancestor included)."""
        out: set[str] = set()
        for rel in self.names:
            prefix = ""
            out.add(prefix)
            for part in rel.split("/")[:-1]:
                prefix += part + "/"
                out.add(prefix)
        return out


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: libc's among them
        for name in ("inotify_init1", "inotify_add_watch", "inotify_rm_watch", "statfs"):
            getattr(libc, name)
    except (OSError, AttributeError):
        return None
    libc.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
    libc.statfs.argtypes = (ctypes.c_char_p, ctypes.c_void_p)
    return libc


_lib: list[ctypes.CDLL | None] = []
_open: OrderedDict[int, weakref.ref[Feed]] = OrderedDict()
_open_lock = threading.Lock()


def _get_lib() -> ctypes.CDLL | None:
    if not _lib:
        _lib.append(_libc() if os.uname().sysname == "Linux" else None)
    return _lib[0]


def enabled() -> bool:
    """Whether snapshots may use a change feed (`BUBU_SNAPSHOT_WATCH=off` turns it off)."""
    value = os.environ.get("BUBU_SNAPSHOT_WATCH", "on").strip().lower()
    return value not in ("off", "0", "no")


class Feed:
    """The inotify watches of one workspace, and what they reported."""

    def __init__(self, lib: ctypes.CDLL, fd: int) -> None:
        self._lib = lib
        self.fd = fd
        self.pid = os.getpid()
        self.closed = False
        self.full = False
        """A watch could not be added (the limit): what is not watched is listed every time."""
        self._rel: dict[int, str] = {}
        self._wd: dict[str, int] = {}
        self._local: dict[int, bool] = {}
        self._moved: set[str] = set()
        """Directories whose watch now names another path (one directory reached twice)."""

    @classmethod
    def open(cls) -> Feed | None:
        """A new feed, or None where inotify is not to be had."""
        lib = _get_lib()
        if lib is None or not enabled():
            return None
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            return None
        feed = cls(lib, fd)
        with _open_lock:
            _open[fd] = weakref.ref(feed)
            while len(_open) > MAX_FEEDS:
                _, ref = _open.popitem(last=False)
                old = ref()
                if old is not None:
                    old._close()
        return feed

    def usable(self) -> bool:
        """Whether the feed still reports (not closed, and used by the process that opened it)."""
        if self.closed or os.getpid() != self.pid:
            return False
        with _open_lock:
            if self.fd in _open:
                _open.move_to_end(self.fd)
        return True

    def close(self) -> None:
        with _open_lock:
            _open.pop(self.fd, None)
        self._close()

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError):
                os.close(self.fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # also at the interpreter's exit
            if not self.closed and os.getpid() == self.pid:
                self.close()

    def local(self, path: str, dev: int) -> bool:
        """Whether the directory `path` (on device `dev`) is on a file system the feed can trust."""
        got = self._local.get(dev)
        if got is None:
            buf = ctypes.create_string_buffer(256)
            ok = self._lib.statfs(os.fsencode(path), buf) == 0
            kind = struct.unpack_from("l", buf.raw)[0] if ok else 0
            got = self._local[dev] = ok and (kind & 0xFFFFFFFF) in LOCAL_FILE_SYSTEMS
        return got

    def watch(self, path: str, rel: str) -> int | None:
        """Watch the directory `path` (relative `rel`) before it is listed; its watch, or None."""
        if len(self._rel) >= MAX_WATCHES:
            self.full = True
            return None
        wd = int(self._lib.inotify_add_watch(self.fd, os.fsencode(path), MASK))
        if wd < 0:
            if ctypes.get_errno() == 28:  # ENOSPC: the user's watches are used up
                self.full = True
            return None
        old = self._rel.get(wd)
        if old is not None and old != rel:
            self._wd.pop(old, None)
            self._moved.add(old)
        self._rel[wd] = rel
        self._wd[rel] = wd
        return wd

    def watching(self, wd: int | None, rel: str) -> bool:
        """Whether `wd` still watches the directory `rel` (not removed, moved or replaced)."""
        return wd is not None and self._rel.get(wd) == rel

    def forget(self, rel: str) -> None:
        """Stop watching `rel` and everything beneath it (it is gone from the workspace)."""
        for path in [p for p in self._wd if p.startswith(rel)] if rel else list(self._wd):
            wd = self._wd.pop(path)
            self._rel.pop(wd, None)
            self._lib.inotify_rm_watch(self.fd, wd)

    def drain(self) -> Changes:
        """Everything reported since the last drain."""
        out = Changes()
        for rel in self._moved:
            _invalidate(out, rel)
        self._moved.clear()
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                out.overflow = True
                break
            if not data:
                break
            self._parse(data, out)
        return out

    def _parse(self, data: bytes, out: Changes) -> None:
        at, end = 0, len(data)
        while at + _HEADER.size <= end:
            wd, mask, _, size = _HEADER.unpack_from(data, at)
            at += _HEADER.size
            raw = data[at : at + size].rstrip(b"\0")
            at += size
            if mask & IN_Q_OVERFLOW:
                out.overflow = True
                continue
            rel = self._rel.get(wd)
            if rel is None:  # a watch already removed: its directory is walked anew
                continue
            if mask & (IN_IGNORED | _SELF):
                self._rel.pop(wd, None)
                if self._wd.get(rel) == wd:
                    del self._wd[rel]
                _invalidate(out, rel)
                continue
            if not raw:  # the directory itself (its mode): list it again
                out.mark(rel, None)
                continue
            name = os.fsdecode(raw)
            if mask & IN_ISDIR and mask & _ENTRY_CHANGED:
                out.invalid.add(rel + name + "/")
            out.mark(rel, name)


def _invalidate(out: Changes, rel: str) -> None:
    """The directory `rel` is gone or replaced: its parent lists it again, from nothing."""
    if not rel:
        out.overflow = True
        return
    out.invalid.add(rel)
    parent, _, name = rel[:-1].rpartition("/")
    out.mark(parent + "/" if parent else "", name)
