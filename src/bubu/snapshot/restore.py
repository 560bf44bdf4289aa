"""Materializing a snapshot: its files, links and modes written into a new directory.

Every name is checked before it is used (no empty name, no `.` or `..`, no slash or NUL), and
every file is created beneath a directory this code made, without following any link, so a
snapshot cannot write outside the directory it is checked out into.
"""

from __future__ import annotations

import os
from pathlib import Path

from bubu.errors import CorruptLog
from bubu.snapshot import tree
from bubu.snapshot.tree import GetObject


def _name(name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise CorruptLog(f"a workspace tree names an entry {name!r}, which no file can have")
    return name


def materialize(get: GetObject, root: str, dest: str | os.PathLike[str]) -> int:
    """Write the snapshot `root` into `dest` (created; it must not exist or be empty) and
    return how many files and links were written. Raises CorruptLog for a missing object."""
    target = Path(dest)
    target.mkdir(parents=True, exist_ok=True)
    if any(target.iterdir()):
        raise FileExistsError(f"{target} is not empty")
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return _write_tree(get, root, fd)
    finally:
        os.close(fd)


def _write_tree(get: GetObject, sha: str, dir_fd: int) -> int:
    count = 0
    for entry, mode, obj, _ in tree.load(get, sha).e:
        name = _name(entry)
        if tree.is_dir(mode):
            os.mkdir(name, 0o755, dir_fd=dir_fd)
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            try:
                count += _write_tree(get, obj, sub)
            finally:
                os.close(sub)
            continue
        data = get(obj)
        if data is None:
            raise CorruptLog(f"the workspace object {obj[:12]}… ({name}) is missing from the store")
        if mode == tree.LINK:
            os.symlink(os.fsdecode(data), name, dir_fd=dir_fd)
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                os.fchmod(f.fileno(), mode & 0o7777)
        count += 1
    return count
