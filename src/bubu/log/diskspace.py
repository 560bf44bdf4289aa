"""Naming a full disk as such: SQLite reports one as "database or disk is full", as a "disk I/O
error" (it could not grow the `-shm` or `-wal` file), or as a failed rollback; the free space of
the file system that holds the database says which it was."""

from __future__ import annotations

import os
from pathlib import Path

NEARLY_FULL = 1 << 20
"""Below this many free bytes an I/O error on the database is taken to be the full disk."""


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding `path` (its nearest existing parent)."""
    p = path.expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    dev = p.stat().st_dev
    while p != p.parent and p.parent.stat().st_dev == dev:
        p = p.parent
    return p


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the file system holding `path`."""
    try:
        st = os.statvfs(mount_point(path))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def full_disk(path: str, message: str) -> str | None:
    """`the disk holding DB is full: N bytes free on MOUNT`, when `message` (an SQLite error on
    the database at `path`) comes from a full disk; else None."""
    if path == ":memory:":
        return None
    free = free_bytes(Path(path).parent)
    symptom = any(s in message for s in ("full", "disk I/O error", "cannot rollback"))
    if free is None or not symptom or free >= NEARLY_FULL:
        return None
    where = mount_point(Path(path).parent)
    return f"the disk holding {path} is full: {free:,} bytes free on {where}; free space and retry"
