"""Paths resolved beneath a directory descriptor, with no symlink followed out (DESIGN §4.1).

A path is walked one component at a time from an open descriptor of its root (the workspace):
each directory is opened relative to the one before with ``O_NOFOLLOW | O_DIRECTORY``, so the
kernel never follows a symlink for us. A symlink met on the way is read (`os.readlink` relative
to its directory) and resolved by this module, beneath the same root; one that leads out (an
absolute target elsewhere, or ``..`` above the root) raises `Escape`. Because every step is made
from a descriptor already held, swapping a directory for a symlink between a check and a use
changes nothing: the next step sees the symlink and resolves it beneath the root, or refuses.

The walk is portable (Linux, macOS) and yields the resolved workspace-relative path as it goes,
which a permission check needs; ``openat2(RESOLVE_BENEATH)`` would give the descriptor but not
that path. A directory moved out of the workspace *after* it was opened is still written through
its descriptor: only a process that can already write both inside and outside can arrange that.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from bubu.errors import ToolError

MAX_LINKS = 40
"""Symlinks one walk may follow before it gives up (the kernel's own limit for a lookup)."""

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_PATH_DIR = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC


class Escape(ToolError):
    """A path leads out of its root: ``..`` above it, or a symlink whose target is outside."""

    def __init__(self, message: str, *, link: str | None = None, target: str | None = None):
        super().__init__(message)
        self.link = link
        self.target = target


@dataclass(frozen=True, slots=True)
class Root:
    """An open directory that paths are resolved beneath, and the real path it had when opened."""

    fd: int
    path: str

    @classmethod
    def open(cls, path: str) -> Root:
        """Open `path` (symlinks in it resolved once, here, by the caller's choice of root)."""
        real = os.path.realpath(path)
        return cls(fd=os.open(real, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC), path=real)

    def close(self) -> None:
        """Close the descriptor."""
        os.close(self.fd)

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def absolute(self, rel: str) -> str:
        """The absolute path of a root-relative path."""
        if rel == ".":
            return self.path
        return os.path.join(self.path, rel)


@dataclass(frozen=True, slots=True)
class Located:
    """Where a path's last component lives: an open directory (yours to close) and a name in it.

    `rel` is the resolved path relative to the root ("." for the root itself, whose `name` is ".").
    """

    fd: int
    name: str
    rel: str

    def close(self) -> None:
        """Close the directory descriptor."""
        os.close(self.fd)

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parts(rel: str) -> list[str]:
    if os.path.isabs(rel):
        raise ValueError(f"{rel!r} is absolute; give a path relative to the root")
    return [p for p in rel.split("/") if p not in ("", ".")]


def _open_dir(name: str, dir_fd: int) -> int:
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except PermissionError:
        if _PATH_DIR == _DIR:
            raise
        return os.open(name, _PATH_DIR, dir_fd=dir_fd)  # searchable but not readable


def _readlink(name: str, dir_fd: int) -> str | None:
    """The target of the symlink `name`, or None when it is not a symlink (or is gone)."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as err:
        if err.errno in (errno.EINVAL, errno.ENOENT):
            return None
        raise


def _not_a_dir(name: str, dir_fd: int) -> bool:
    """Whether `name` is now something a walk cannot go through: a file, a device … (not a
    directory, a symlink, or nothing, which a new look resolves)."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return False
    return not (stat.S_ISDIR(mode) or stat.S_ISLNK(mode))


class _Walk:
    """The state of one walk: the directories opened so far (root first) and their names."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self.fds: list[int] = []
        self.names: list[str] = []
        self.links = 0
        self.retries = 0
        self.via: tuple[str, str] | None = None  # the last symlink followed, and its target

    @property
    def here(self) -> int:
        return self.fds[-1] if self.fds else self.root.fd

    def rel(self, *more: str) -> str:
        return "/".join([*self.names, *more]) or "."

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()
        self.names.clear()

    def up(self) -> None:
        if not self.names:
            if self.root.path == os.sep:
                return  # ".." of the filesystem root is the root, as for the kernel
            if self.via is not None:
                link, target = self.via
                raise Escape(
                    f"the symlink {link} points outside the workspace ({target})",
                    link=link,
                    target=target,
                )
            raise Escape("the path climbs above the workspace with '..'", target="..")
        os.close(self.fds.pop())
        self.names.pop()

    def link(self, name: str, target: str) -> list[str]:
        """The parts to walk instead of the symlink `name`, resolved beneath the root."""
        self.links += 1
        self.via = (self.rel(name), target)
        if self.links > MAX_LINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links", self.rel(name))
        if os.path.isabs(target):
            root = self.root.path
            if target != root and not target.startswith(root.rstrip(os.sep) + os.sep):
                raise Escape(
                    f"the symlink {self.rel(name)} points outside the workspace ({target})",
                    link=self.rel(name),
                    target=target,
                )
            self.close()  # an absolute target inside the root: walk it from the root
            return _parts(os.path.relpath(target, root))
        return [p for p in target.split("/") if p not in ("", ".")]


def _walk(root: Root, rel: str, *, follow: bool, create: bool) -> tuple[_Walk, str, list[str]]:
    """Walk `rel` beneath `root` up to its last component.

    Returns the walk (its `here` is the directory holding the last component), the last
    component's name ("." for the root) and the parts left when a directory on the way does not
    exist (empty unless `create` is false and one is missing; ``..`` in them applied lexically).
    """
    w = _Walk(root)
    todo = _parts(rel)
    missing: list[str] = []  # names below a directory that does not exist, taken as given
    try:
        while todo:
            part = todo.pop(0)
            if missing:
                if part != "..":
                    missing.append(part)
                elif len(missing) > 1:
                    missing.pop()
                else:
                    missing.clear()  # back in the last directory that exists
                continue
            if part == "..":
                w.up()
                continue
            if not todo:
                target = _readlink(part, w.here) if follow else None
                if target is None:
                    return w, part, []
                todo = w.link(part, target)
                continue
            try:
                fd = _open_dir(part, w.here)
            except FileNotFoundError:
                if not create:
                    if _readlink(part, w.here) is not None:
                        todo = [part, *todo]  # a symlink appeared: take the walk's own path
                    else:
                        missing.append(part)
                    continue
                try:
                    os.mkdir(part, 0o777, dir_fd=w.here)
                    _fsync_dir(w.here)
                except FileExistsError:
                    pass  # made meanwhile by someone else: open it below, without following
                todo = [part, *todo]
                continue
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                target = _readlink(part, w.here)
                if target is not None:
                    todo = [*w.link(part, target), *todo]
                    continue
                if _not_a_dir(part, w.here) or w.retries >= MAX_LINKS:
                    raise NotADirectoryError(errno.ENOTDIR, "not a directory", w.rel(part)) from err
                # The symlink became a directory again, or went away, meanwhile: look anew.
                w.retries += 1
                todo = [part, *todo]
                continue
            w.fds.append(fd)
            w.names.append(part)
        if missing:
            return w, missing[0], missing[1:]
        return w, ".", []
    except BaseException:  # undone, then re-raised: Ctrl-C and exits too
        w.close()
        raise


def resolve_beneath(root: Root, rel: str) -> str:
    """`rel` resolved beneath `root`, symlinks followed (the last one too): a root-relative path.

    Missing parts are kept as given, so the path of a file yet to be written resolves too.
    Raises `Escape` when the path leads out of the root.
    """
    w, name, rest = _walk(root, rel, follow=True, create=False)
    try:
        if name == "." and not rest:
            return w.rel()
        return w.rel(name, *rest)
    finally:
        w.close()


def locate(root: Root, rel: str, *, create: bool = False) -> Located:
    """The directory holding `rel`'s last component, the last symlink resolved; `create` makes
    missing directories on the way. Raises FileNotFoundError for a missing one otherwise."""
    w, name, rest = _walk(root, rel, follow=True, create=create)
    try:
        if rest:
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", w.rel(name, *rest))
        fd = os.dup(w.here)
        return Located(fd=fd, name=name, rel=w.rel() if name == "." else w.rel(name))
    finally:
        w.close()


def open_beneath(root: Root, rel: str, flags: int, mode: int = 0o666) -> int:
    """Open `rel` beneath `root` (as `os.open` would, with `flags`); symlinks inside followed.

    The last component is opened with ``O_NOFOLLOW``; one swapped for a symlink after the walk
    resolved it makes the walk start again, so it too is resolved beneath the root.
    """
    for _ in range(MAX_LINKS):
        with locate(root, rel) as loc:
            try:
                return os.open(loc.name, flags | os.O_NOFOLLOW | _CLOEXEC, mode, dir_fd=loc.fd)
            except OSError as err:
                if err.errno != errno.ELOOP or _readlink(loc.name, loc.fd) is None:
                    if err.filename is None or err.filename == loc.name:
                        err.filename = loc.rel
                    raise
    raise OSError(errno.ELOOP, "the path keeps changing into a symlink", rel)


def _fsync_dir(dir_fd: int) -> None:
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(dir_fd: int) -> None:
    """Sync a directory's entries to disk (after a rename or a new entry in it)."""
    _fsync_dir(dir_fd)


class WalkIgnore(Protocol):
    """Ignore rules a walk carries down (`bubu.tools.ignores.WalkRules`)."""

    def enter(self, dir_fd: int, path: str) -> WalkIgnore:
        """The rules below the directory `path`, open as `dir_fd`."""
        ...

    def ignored(self, path: str, *, directory: bool) -> bool:
        """Whether `path` is left out."""
        ...


def walk_files(
    dir_fd: int, prefix: str, skip: frozenset[str], rules: WalkIgnore | None = None
) -> Iterator[tuple[int, str, str]]:
    """Every entry that is not a directory below `dir_fd`, depth first in sorted order, as
    (its directory's descriptor, its name, `prefix`/its path); directories in `skip`, those the
    ignore `rules` leave out and symlinked directories are not entered. A descriptor is valid
    until the next item."""
    if rules is not None:
        rules = rules.enter(dir_fd, prefix)
    with os.scandir(dir_fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    subdirs: list[str] = []
    for e in entries:
        try:
            is_dir = e.is_dir(follow_symlinks=False)
        except OSError:
            continue
        path = f"{prefix}/{e.name}" if prefix else e.name
        if rules is not None and rules.ignored(path, directory=is_dir):
            continue
        if is_dir:
            if e.name not in skip:
                subdirs.append(e.name)
        elif not _is_dir_link(e):
            yield dir_fd, e.name, path
    for name in subdirs:
        try:
            fd = os.open(name, _DIR, dir_fd=dir_fd)
        except OSError:
            continue  # gone, unreadable, or swapped for a symlink since it was listed
        try:
            yield from walk_files(fd, f"{prefix}/{name}" if prefix else name, skip, rules)
        finally:
            os.close(fd)


def _is_dir_link(e: os.DirEntry[str]) -> bool:
    """A symlink to a directory: listed by neither os.walk's files nor its walk."""
    try:
        return e.is_symlink() and e.is_dir()
    except OSError:
        return False


def is_regular(fd: int) -> bool:
    """Whether an open descriptor is a regular file (not a FIFO, device or directory)."""
    return stat.S_ISREG(os.fstat(fd).st_mode)
