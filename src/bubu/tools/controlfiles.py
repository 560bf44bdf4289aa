"""Git control files and Bubu's own directory in a workspace, at any depth, around each command.

A `.git` directory, file or link and a `.gitmodules` anywhere in the workspace decide what git
runs the next time the user types `git status` (hooks, ``core.fsmonitor``, a submodule's gitdir);
a `.bubu` directory decides what Bubu does. `scan` finds every one of them; the sandbox binds
those that exist read-only (`binds`), and `check`, after the command, finds what appeared or
changed all the same (a new `sub/.git`, ``git init`` in a folder, a moved directory) and reverts
it: what the command made is removed, what it replaced is put back, and what cannot be put back
safely is left for a person, named in the command's result. A `Watch` makes the same check every
second or so while a background process runs (it may live as long as the session), so it cannot
keep one in place; a foreground command, bounded by its timeout, is checked when it ends (a test
suite that makes a repository in the workspace keeps it while it runs).

A scan walks directories only, and after the first one it lists again only the directories whose
change time moved (a new entry changes its directory's ctime, and no process can set a ctime
back), so a command in a large tree costs one ``lstat`` per directory rather than a listing.
Nothing is skipped: a hostile repository can hide a `.git` anywhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

NAMES = frozenset({".git", ".gitmodules", ".bubu"})
"""The entries that run code later, outside the sandbox: git's and Bubu's control files."""

_INSIDE_GIT = ("config", "config.worktree", "hooks", "info", "commondir", "gitdir")
"""What of a `.git` directory is compared (its own status and these entries'): what runs code."""

MAX_DIRS = 200_000
"""A workspace with more directories is checked only this far (a home directory as the
workspace must not cost minutes per command); the result says so."""

MAX_KEPT = 1 << 20
"""A control file's bytes are kept (to restore it) up to this size."""

RACY_NS = 2_000_000_000
"""A directory changed this close before a scan is listed again by the next one: a change in
the same tick of the kernel's clock would leave its ctime as it was."""

_PRIVATE_AT_ROOT = frozenset({"proc", "sys", "dev", "tmp", "run"})
"""With the whole filesystem as the workspace: what the sandbox replaces with its own (or binds
read-only), where a command's writes never reach the host."""

Kind = Literal["dir", "file", "link", "other"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One control entry: what it is, which inode, and what it holds."""

    kind: Kind
    ident: tuple[int, int]
    data: bytes | None = None
    """A file's bytes (None past MAX_KEPT), a link's target, or a `.git` directory's signature."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Dir:
    ident: tuple[int, int, int]  # device, inode, ctime
    subdirs: tuple[str, ...]
    controls: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Scan:
    """The control entries of a workspace (by path relative to it) and the directories walked."""

    root: str
    at_ns: int
    found: dict[str, Entry] = field(default_factory=dict)
    unread: tuple[str, ...] = ()
    """Directories that could not be listed (their contents are unknown)."""
    partial: bool = False
    """The walk stopped at MAX_DIRS directories."""
    dirs: dict[str, _Dir] = field(default_factory=dict, repr=False)


def _signature(path: str) -> bytes:
    """The status of a `.git` directory's code-running entries, as bytes to compare."""
    parts = []
    for name in ("", *_INSIDE_GIT):
        try:
            st = os.lstat(os.path.join(path, name))
        except OSError:
            parts.append(f"{name}:-")
            continue
        parts.append(f"{name}:{st.st_ino}:{st.st_mode}:{st.st_size}:{st.st_ctime_ns}")
    return "\n".join(parts).encode()


def _entry(path: str) -> Entry | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    ident = (st.st_dev, st.st_ino)
    if stat.S_ISDIR(st.st_mode):
        return Entry(kind="dir", ident=ident, data=_signature(path))
    if stat.S_ISLNK(st.st_mode):
        try:
            return Entry(kind="link", ident=ident, data=os.fsencode(os.readlink(path)))
        except OSError:
            return Entry(kind="link", ident=ident)
    if stat.S_ISREG(st.st_mode):
        data = None
        if st.st_size <= MAX_KEPT:
            try:
                with open(path, "rb") as f:
                    data = f.read(MAX_KEPT + 1)
            except OSError:
                pass
        return Entry(
            kind="file",
            ident=ident,
            data=data if data is not None and len(data) <= MAX_KEPT else None,
        )
    return Entry(kind="other", ident=ident)


def scan(root: str, previous: Scan | None = None) -> Scan:
    """Every control entry under `root` (a real path); directories unchanged since `previous`
    are not listed again."""
    at = time.time_ns()
    old = previous.dirs if previous is not None and previous.root == root else {}
    reuse_before = (previous.at_ns - RACY_NS) if previous is not None else 0
    dirs: dict[str, _Dir] = {}
    found: dict[str, Entry] = {}
    unread: list[str] = []
    stack = [""]
    while stack:
        if len(dirs) >= MAX_DIRS:
            break
        rel = stack.pop()
        path = os.path.join(root, rel) if rel else root
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            continue
        ident = (st.st_dev, st.st_ino, st.st_ctime_ns)
        known = old.get(rel)
        if known is not None and known.ident == ident and st.st_ctime_ns < reuse_before:
            here = known
        else:
            subdirs: list[str] = []
            controls: list[str] = []
            try:
                with os.scandir(path) as listing:
                    for e in listing:
                        if e.name in NAMES:
                            controls.append(e.name)
                        elif e.is_dir(follow_symlinks=False) and not (
                            path == "/" and e.name in _PRIVATE_AT_ROOT
                        ):
                            subdirs.append(e.name)
            except OSError:
                unread.append(rel or ".")
                continue
            here = _Dir(ident=ident, subdirs=tuple(subdirs), controls=tuple(controls))
        dirs[rel] = here
        for name in here.controls:
            entry = _entry(os.path.join(path, name))
            if entry is not None:
                found[os.path.join(rel, name)] = entry
        stack.extend(os.path.join(rel, s) for s in here.subdirs)
    return Scan(
        root=root, at_ns=at, found=found, unread=tuple(unread), dirs=dirs, partial=bool(stack)
    )


def binds(found: Scan) -> list[str]:
    """bubblewrap arguments that make every control entry read-only (a link: its target, when
    that lies in the workspace); parents before what lies inside them."""
    root = found.root.rstrip("/") + "/"
    targets: set[str] = set()
    for rel, entry in found.found.items():
        path = os.path.join(found.root, rel)
        if entry.kind in ("dir", "file"):
            targets.add(path)
        elif entry.kind == "link":
            real = os.path.realpath(path)
            if real.startswith(root) and os.path.exists(real):
                targets.add(real)
    out: list[str] = []
    for path in sorted(targets, key=lambda p: (p.count("/"), p)):
        out += ["--ro-bind", path, path]
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """What a command did to control entries, and what Bubu did about it (paths relative)."""

    removed: tuple[str, ...] = ()
    """Made by the command, removed."""
    restored: tuple[str, ...] = ()
    """Changed or replaced by the command, put back as they were."""
    held: tuple[str, ...] = ()
    """Changed where putting them back is not safe: left as they are, for a person to check."""
    partial: bool = False
    """The workspace has more than MAX_DIRS directories: only that many were checked."""

    def text(self) -> str | None:
        """The note for the command's result; None when the command touched nothing."""
        parts: list[str] = []
        partial = (
            f"the workspace has more than {MAX_DIRS:,} directories: Bubu looked for git and Bubu "
            "control files the command made in that many only"
        )
        if self.removed:
            parts.append(f"removed what it created: {', '.join(self.removed)}")
        if self.restored:
            parts.append(f"put back what it changed: {', '.join(self.restored)}")
        if self.held:
            parts.append(
                f"left these as they are for you to check before running git or bubu here: "
                f"{', '.join(self.held)}"
            )
        if not parts:
            return partial if self.partial else None
        said = (
            "the command created or changed git or Bubu control files (.git, .gitmodules, "
            "which run code outside the sandbox, .bubu); Bubu " + "; ".join(parts)
        )
        return f"{said}; {partial}" if self.partial else said


@contextlib.contextmanager
def _beneath(root: str, rel: str) -> Iterator[tuple[int, str]]:
    """The directory holding `rel`, opened beneath `root` one component at a time without
    following a symlink (another command may have swapped one in), and the entry's name."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in os.path.dirname(rel).split(os.sep):
            if part:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = inner
        yield fd, os.path.basename(rel)
    finally:
        os.close(fd)


def _remove(root: str, rel: str) -> bool:
    try:
        with _beneath(root, rel) as (fd, name):
            if stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                shutil.rmtree(name, dir_fd=fd)
            else:
                os.unlink(name, dir_fd=fd)
    except OSError:
        return False
    return True


def _restore(root: str, rel: str, data: bytes) -> bool:
    try:
        with _beneath(root, rel) as (fd, name):
            tmp = f"{name}.bubu-restore"
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
            out = os.open(tmp, flags, 0o644, dir_fd=fd)
            try:
                os.write(out, data)
            finally:
                os.close(out)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        return False
    return True


def _move_back(root: str, rel: str, origin: str) -> bool:
    try:
        with _beneath(root, rel) as (src, name), _beneath(root, origin) as (dst, target):
            try:
                os.lstat(target, dir_fd=dst)
                return False  # its old place is taken
            except FileNotFoundError:
                pass
            os.rename(name, target, src_dir_fd=src, dst_dir_fd=dst)
    except OSError:
        return False
    return True


def check(before: Scan) -> tuple[Report, Scan]:
    """Compare the workspace with `before` and revert what changed; the report and the scan of
    the workspace as it is now."""
    now = scan(before.root, before)
    root = before.root
    was_at = {e.ident: rel for rel, e in before.found.items()}
    removed: list[str] = []
    restored: list[str] = []
    held: list[str] = [
        f"{rel}/ (could not be read)" for rel in now.unread if rel not in before.unread
    ]
    moved: dict[str, str] = {}  # now at → was at
    replaced: dict[str, Entry] = {}  # where the command put a new entry over one of before
    for rel, e in sorted(now.found.items()):
        old = before.found.get(rel)
        if old == e:
            continue
        origin = was_at.get(e.ident)
        if origin is not None and origin != rel:
            moved[rel] = origin  # a control entry of before, moved here: never deleted
        elif old is not None and old.ident == e.ident:
            # Changed in place: a file is rewritten as it was; anything else is for a person.
            if (
                old.kind == e.kind == "file"
                and old.data is not None
                and _restore(root, rel, old.data)
            ):
                restored.append(rel)
            else:
                held.append(rel)
        elif not _remove(root, rel):
            held.append(rel)
        elif old is None:
            removed.append(rel)
        else:
            replaced[rel] = old
    for rel, origin in moved.items():
        if _move_back(root, rel, origin):
            restored.append(f"{origin} (moved back from {rel})")
        else:
            held.append(f"{rel} (moved from {origin})")
    for rel, old in replaced.items():
        path = os.path.join(root, rel)
        if os.path.lexists(path):
            continue  # the original was moved back
        if old.kind == "file" and old.data is not None and _restore(root, rel, old.data):
            restored.append(rel)
        else:
            held.append(f"{rel} (replaced by the command, which was removed; the original is gone)")
    away = set(moved.values())
    gone = [r for r in before.found if r not in away and not os.path.lexists(os.path.join(root, r))]
    held += [f"{rel} (removed or moved away)" for rel in sorted(gone)]
    report = Report(
        removed=tuple(removed),
        restored=tuple(restored),
        held=tuple(held),
        partial=now.partial,
    )
    if removed or restored:
        now = scan(root, now)
    return report, now


_last: dict[str, Scan] = {}
_last_lock = threading.Lock()
_check_lock = threading.Lock()
"""One check at a time: a background command's watch and a foreground command's end would
otherwise both revert the same entry."""

WATCH_S = 1.0
"""How often a running command's workspace is checked (more seldom where a scan takes longer)."""


class Watch:
    """The check of `after_command`, made while a background process still runs: it must not
    leave a control file for the user's next `git status` until it ends."""

    def __init__(self, before: Scan) -> None:
        self.before = before
        self._next = time.monotonic() + WATCH_S
        self._said: set[str] = set()

    def poll(self) -> str | None:
        """Check and revert when one is due; the note for what was newly found, else None."""
        start = time.monotonic()
        if start < self._next:
            return None
        with _check_lock:
            report, _ = check(self.before)
        took = time.monotonic() - start
        self._next = time.monotonic() + max(WATCH_S, 20 * took)
        text = report.text()
        if text is None or text in self._said:
            return None
        self._said.add(text)
        return f"while it ran, {text}"


def before_command(root: str) -> Scan:
    """The scan a command starts from (reusing the last one of `root` where nothing changed)."""
    with _last_lock:
        previous = _last.get(root)
    return scan(root, previous)


def after_command(before: Scan) -> Report:
    """Check the workspace after a command that started from `before`, revert what it did to
    control entries, and keep the result for the next command's scan."""
    with _check_lock:
        report, now = check(before)
    with _last_lock:
        _last[before.root] = now
    return report
