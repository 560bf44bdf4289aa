"""The tree objects of a workspace snapshot, and how two snapshots differ (pure: no I/O).

A tree is one directory: its entries sorted by name, each `[name, mode, sha256, size]`, where the
mode is git's (`0o100644`/`0o100755`-like regular files with their permission bits, `0o040000`
directories, `0o120000` symbolic links, whose object is the link's target). The root tree also
lists what the snapshot left out (`[path, reason]`). A tree's name is the sha-256 of its encoding,
so an unchanged directory keeps its name and is stored once.
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterator
from typing import Literal

import msgspec

from bubu.errors import CorruptLog

DIR = 0o040000
LINK = 0o120000

Entry = tuple[str, int, str, int]
"""(name, mode, sha-256 of the object, size in bytes; a directory's size is its files' total)."""

GetObject = Callable[[str], bytes | None]


class TreeObject(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The stored form of one directory."""

    e: list[Entry]
    s: list[tuple[str, str]] = msgspec.field(default_factory=list)
    """(path, reason) of what the snapshot skipped; only in a root tree."""


_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(TreeObject)


def encode(entries: list[Entry], skipped: list[tuple[str, str]] | None = None) -> bytes:
    """The canonical bytes of a tree (entries must be sorted by name)."""
    return _enc.encode(TreeObject(e=entries, s=skipped or []))


def decode(data: bytes) -> TreeObject:
    """A tree object from its bytes; raises CorruptLog if they are not one."""
    try:
        return _dec.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise CorruptLog(f"a workspace tree object does not decode ({e})") from e


def is_dir(mode: int) -> bool:
    """Whether an entry's mode is a directory's."""
    return stat.S_ISDIR(mode)


class FileState(msgspec.Struct, frozen=True, kw_only=True):
    """One file (or link) of a snapshot."""

    mode: int
    sha256: str
    size: int


def load(get: GetObject, sha: str) -> TreeObject:
    """The tree `sha`; raises CorruptLog if the store does not hold it."""
    data = get(sha)
    if data is None:
        raise CorruptLog(f"the workspace tree {sha[:12]}… is missing from the store")
    return decode(data)


def files(get: GetObject, root: str, prefix: str = "") -> Iterator[tuple[str, FileState]]:
    """Every file and link of the snapshot `root` as (relative path, state), depth first."""
    for name, mode, sha, size in load(get, root).e:
        path = f"{prefix}{name}"
        if is_dir(mode):
            yield from files(get, sha, path + "/")
        else:
            yield path, FileState(mode=mode, sha256=sha, size=size)


def skipped(get: GetObject, root: str) -> list[tuple[str, str]]:
    """What the snapshot `root` left out, as (path, reason)."""
    return list(load(get, root).s)


def reachable(get: GetObject, root: str, seen: set[str]) -> Iterator[tuple[str, bool]]:
    """Every object the snapshot `root` names, as (sha-256, is a tree), each once across calls
    that share `seen`; a missing tree is yielded and not descended into."""
    if root in seen:
        return
    seen.add(root)
    yield root, True
    data = get(root)
    if data is None:
        return
    for _, mode, sha, _ in decode(data).e:
        if is_dir(mode):
            yield from reachable(get, sha, seen)
        elif sha not in seen:
            seen.add(sha)
            yield sha, False


ChangeKind = Literal["added", "modified", "deleted"]


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """One path that differs between two snapshots."""

    path: str
    kind: ChangeKind
    old: FileState | None
    new: FileState | None


def changes(get: GetObject, old: str | None, new: str | None, prefix: str = "") -> list[Change]:
    """The files that differ from snapshot `old` to `new` (None: an empty tree), sorted by path;
    a directory whose tree is the same in both is not opened."""
    if old == new:
        return []
    a = {} if old is None else {e[0]: e for e in load(get, old).e}
    b = {} if new is None else {e[0]: e for e in load(get, new).e}
    out: list[Change] = []
    for name in sorted(a.keys() | b.keys()):
        ea, eb = a.get(name), b.get(name)
        if ea == eb:
            continue
        path = f"{prefix}{name}"
        da = ea is not None and is_dir(ea[1])
        db = eb is not None and is_dir(eb[1])
        if da or db:
            out.extend(
                changes(get, ea[2] if da and ea else None, eb[2] if db and eb else None, path + "/")
            )
        fa = None if ea is None or da else FileState(mode=ea[1], sha256=ea[2], size=ea[3])
        fb = None if eb is None or db else FileState(mode=eb[1], sha256=eb[2], size=eb[3])
        if fa is None and fb is None:
            continue
        if fa is not None and fb is not None:
            out.append(Change(path=path, kind="modified", old=fa, new=fb))
        elif fb is not None:
            out.append(Change(path=path, kind="added", old=None, new=fb))
        else:
            out.append(Change(path=path, kind="deleted", old=fa, new=None))
    out.sort(key=lambda c: c.path)
    return out
