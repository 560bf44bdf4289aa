"""Taking a snapshot of a workspace: walk it, read only what changed, store the new objects.

A stat cache (size, mtime_ns, inode, ctime_ns, mode) per path says which files are as the last
snapshot of this process saw them, so an incremental snapshot reads only changed files, and a
directory whose entries are unchanged keeps its tree without encoding it again. A file whose
mtime is as recent as the scan is read again next time (git's "racily clean" rule). Objects are
stored before the trees that name them, and trees before any event names the root; a snapshot
that fails says why in `partial` and never raises.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISDIR, S_ISLNK, S_ISREG

import msgspec

from bubu import failpoints
from bubu.errors import BubuError
from bubu.events import WorkspaceSnapshot
from bubu.log import codec, redact
from bubu.log.store import Store, View
from bubu.snapshot import tree
from bubu.snapshot.ignore import NO_RULES, Rules
from bubu.snapshot.tree import LINK


@dataclass(frozen=True, slots=True, kw_only=True)
class Caps:
    """How much one snapshot holds; what is over is listed as skipped, never dropped silently."""

    file_bytes: int = 16 << 20
    total_bytes: int = 1 << 30
    files: int = 200_000


StatKey = tuple[int, int, int, int, int]
"""(size, mtime_ns, inode, ctime_ns, mode) of a path."""

CACHE_VIEW = "snapshot_stat_cache"
"""The kind of the derived view that keeps a workspace's stat cache between processes."""

SAVE_AFTER_READS = 100
"""A scan that read this many files saves the stat cache (a first snapshot, a large change):
the next process then reads only what changed since, and a step that read a few files saves
nothing."""

_FLUSH_BYTES = 32 << 20
_RACY_NS = 20_000_000
"""A file modified this close to the scan's start may change again within one mtime tick."""


@dataclass(slots=True)
class _Scan:
    start_ns: int
    caps: Caps
    pending: dict[str, bytes] = field(default_factory=dict)
    trees: dict[str, bytes] = field(default_factory=dict)
    pending_bytes: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    files: int = 0
    total: int = 0
    partial: str | None = None
    read: int = 0
    """Files read (not found in the stat cache) by this scan."""
    cap_total: int = 0
    cap_files: int = 0
    files_seen: dict[str, dict[str, tuple[StatKey, str]]] = field(default_factory=dict)
    """Per directory, per name: the stat key and sha-256 of each file this scan trusts."""
    dirs_seen: dict[str, tuple[list[tree.Entry], str]] = field(default_factory=dict)


class Snapshotter:
    """Takes snapshots of one workspace into one store, keeping the stat cache between them."""

    def __init__(
        self, store: Store, root: str | os.PathLike[str], *, caps: Caps | None = None
    ) -> None:
        self.store = store
        self.root = os.path.realpath(root)
        self.caps = caps or Caps()
        self._lock = threading.Lock()
        self._files: dict[str, dict[str, tuple[StatKey, str]]] = {}
        self._dirs: dict[str, tuple[list[tree.Entry], str]] = {}
        self._rules: dict[str, tuple[Rules, StatKey | None, Rules]] = {}
        self._decided: dict[str, tuple[Rules, dict[str, bool]]] = {}
        self._held: set[str] = set()
        self._exclude = _own_files(store, self.root)
        self.last: WorkspaceSnapshot | None = None

    def take(self) -> WorkspaceSnapshot:
        """Snapshot the workspace now; on any failure a partial snapshot saying why."""
        with self._lock:
            try:
                snap = self._take()
            except (OSError, BubuError) as e:
                reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
                snap = WorkspaceSnapshot(tree=None, partial=f"the snapshot failed: {reason}")
            self.last = snap
            return snap

    def _take(self) -> WorkspaceSnapshot:
        if not os.path.isdir(self.root):
            return WorkspaceSnapshot(tree=None, partial=f"the workspace {self.root} is missing")
        scan = _Scan(start_ns=time.time_ns(), caps=self.caps)
        scan.cap_total, scan.cap_files = self.caps.total_bytes, self.caps.files
        got = self._walk(self.root, "", NO_RULES, scan)
        root_sha = got[0] if got is not None else self._put_tree(scan, "", [], [])
        self._flush(scan)
        failpoints.hit("mid_snapshot")
        self._flush(scan, trees=True)
        self._files, self._dirs = scan.files_seen, scan.dirs_seen
        if scan.read >= SAVE_AFTER_READS:
            self._save_cache()
        return WorkspaceSnapshot(
            tree=root_sha, files=scan.files, bytes=scan.total, skipped=len(scan.skipped),
            partial=scan.partial,
        )  # fmt: skip

    def load_cache(self) -> int:
        """Start from the stat cache an earlier process saved in the store (a derived view,
        dropped and rebuilt at will), keeping only entries whose objects the store holds; the
        number of files it covers."""
        try:
            view = self.store.get_view(CACHE_VIEW, "", self.root)
            if view is None:
                return 0
            raw = zlib.decompress(view.data)
            cached = msgspec.msgpack.decode(raw, type=dict[str, dict[str, tuple[StatKey, str]]])
            missing = self.store.missing_objects(
                {sha for d in cached.values() for _, sha in d.values()}
            )
        except (BubuError, zlib.error, msgspec.DecodeError, msgspec.ValidationError):
            return 0
        with self._lock:
            self._files = {
                rel: {n: e for n, e in entries.items() if e[1] not in missing}
                for rel, entries in cached.items()
            }
            self._held.update(sha for d in self._files.values() for _, sha in d.values())
        return sum(map(len, self._files.values()))

    def _save_cache(self) -> None:
        """Keep the stat cache in the store for the next process (a failure only costs it)."""
        data = zlib.compress(msgspec.msgpack.encode(self._files), 1)
        view = View(kind=CACHE_VIEW, session="", key=self.root, source_high_water=0,
                    source_digest="", data=data)  # fmt: skip
        with contextlib.suppress(BubuError):
            self.store.put_view(view)

    def _rules_in(self, rel: str, parent: Rules, items: list[os.DirEntry[str]]) -> Rules:
        gi = next((d for d in items if d.name == ".gitignore"), None)
        key: StatKey | None = None
        if gi is not None:
            try:
                s = gi.stat()
                key = (s.st_size, s.st_mtime_ns, s.st_ino, s.st_ctime_ns, s.st_mode)
            except OSError:
                gi = None
        cached = self._rules.get(rel)
        if cached is not None and cached[0] is parent and cached[1] == key:
            return cached[2]
        text = None
        if gi is not None and key is not None:
            try:
                text = Path(gi.path).read_text("utf-8", "replace")
            except OSError:
                text = None
        rules = parent.within(rel, text)
        self._rules[rel] = (parent, key, rules)
        return rules

    def _walk(self, path: str, rel: str, parent: Rules, scan: _Scan) -> tuple[str, int] | None:
        """The tree sha and total size of the directory `rel`, or None if it cannot be read."""
        if scan.partial is not None:  # over a cap: the rest is not walked at all
            scan.skipped.append((rel, "over the workspace's cap"))
            return None
        try:
            with os.scandir(path) as it:
                items = list(it)
        except OSError as e:
            scan.skipped.append((rel or ".", f"unreadable: {e.strerror}"))
            return None
        rules = self._rules_in(rel, parent, items)
        decided = self._decided.get(rel)
        if decided is None or decided[0] is not rules:
            decided = (rules, {})
            self._decided[rel] = decided
        verdicts = decided[1]
        entries: list[tree.Entry] = []
        size = 0
        old = self._files.get(rel) or {}
        seen: dict[str, tuple[StatKey, str]] = {}
        scan.files_seen[rel] = seen
        exclude = self._exclude
        fresh = scan.start_ns - _RACY_NS
        # The counters live in locals through the fast path (a file as the last scan saw it),
        # and go back to `scan` around anything that reads or changes them.
        files, total = scan.files, scan.total
        cap_files, cap_total = scan.cap_files, scan.cap_total
        for d in items:
            name = d.name
            if exclude and rel + name in exclude:
                continue
            try:
                s = d.stat(follow_symlinks=False)
            except OSError as e:
                scan.skipped.append((rel + name, f"unreadable: {e.strerror}"))
                continue
            mode = s.st_mode
            isdir = S_ISDIR(mode)
            ignored = verdicts.get(name)
            if ignored is None:
                ignored = verdicts[name] = rules.ignored(rel + name, directory=isdir)
            if ignored:
                continue
            if not isdir:
                n = s.st_size
                key = (n, s.st_mtime_ns, s.st_ino, s.st_ctime_ns, mode)
                hit = old.get(name)
                if (
                    hit is not None
                    and hit[0] == key
                    and files < cap_files
                    and total + n <= cap_total
                ):
                    seen[name] = hit
                    files += 1
                    total += n
                    size += n
                    entries.append((name, LINK if S_ISLNK(mode) else mode, hit[1], n))
                    continue
            scan.files, scan.total = files, total
            got = self._slow(d, rel, name, s, isdir=isdir, rules=rules, old=old, seen=seen,
                             fresh=fresh, scan=scan)  # fmt: skip
            files, total = scan.files, scan.total
            if got is not None:
                entries.append(got)
                size += got[3]
        scan.files, scan.total = files, total
        entries.sort()
        if rel == "":
            return self._put_tree(scan, rel, entries, sorted(scan.skipped)), size
        return self._put_tree(scan, rel, entries, []), size

    def _slow(
        self,
        d: os.DirEntry[str],
        rel: str,
        name: str,
        s: os.stat_result,
        *,
        isdir: bool,
        rules: Rules,
        old: dict[str, tuple[StatKey, str]],
        seen: dict[str, tuple[StatKey, str]],
        fresh: int,
        scan: _Scan,
    ) -> tree.Entry | None:
        """The entry of a directory, or of a file the last scan did not see as it is now."""
        p = rel + name
        mode = s.st_mode
        if isdir:
            sub = self._walk(d.path, p + "/", rules, scan)
            return None if sub is None else (name, tree.DIR, sub[0], sub[1])
        if not (S_ISREG(mode) or S_ISLNK(mode)):
            scan.skipped.append((p, "not a regular file or a link"))
            return None
        key = (s.st_size, s.st_mtime_ns, s.st_ino, s.st_ctime_ns, mode)
        hit = old.get(name)
        if hit is not None and hit[0] == key:
            sha = hit[1]
        else:
            got = self._read(d.path, p, s.st_size, S_ISLNK(mode), scan)
            if got is None:
                return None
            sha = got
        if scan.files >= scan.caps.files or scan.total + s.st_size > scan.caps.total_bytes:
            scan.skipped.append((p, "over the workspace's cap"))
            scan.partial = (
                f"the workspace is over the snapshot's cap of {scan.caps.files} files or "
                f"{scan.caps.total_bytes} bytes"
            )
            return None
        if s.st_mtime_ns < fresh:
            seen[name] = (key, sha)
        scan.files += 1
        scan.total += s.st_size
        return (name, LINK if S_ISLNK(mode) else mode, sha, s.st_size)

    def _put_tree(
        self, scan: _Scan, rel: str, entries: list[tree.Entry], skipped: list[tuple[str, str]]
    ) -> str:
        cached = self._dirs.get(rel)
        if cached is not None and cached[0] == entries and not skipped and rel:
            scan.dirs_seen[rel] = cached
            return cached[1]
        data = tree.encode(entries, skipped)
        sha = codec.sha256_hex(data)
        if sha not in self._held:
            scan.trees[sha] = data
        scan.dirs_seen[rel] = (entries, sha)
        return sha

    def _read(self, path: str, rel: str, size: int, link: bool, scan: _Scan) -> str | None:
        """Read one changed file (or link), queue its object, and return its sha-256."""
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            scan.skipped.append((rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
                                 "its name is not UTF-8"))  # fmt: skip
            return None
        if not link and size > scan.caps.file_bytes:
            scan.skipped.append((rel, f"over the per-file cap of {scan.caps.file_bytes} bytes"))
            return None
        try:
            if link:
                data = os.fsencode(os.readlink(path))
            else:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                with os.fdopen(fd, "rb", closefd=True) as f:
                    data = f.read(scan.caps.file_bytes + 1)
        except OSError as e:
            scan.skipped.append((rel, f"unreadable: {e.strerror}"))
            return None
        if len(data) > scan.caps.file_bytes:
            scan.skipped.append((rel, f"over the per-file cap of {scan.caps.file_bytes} bytes"))
            return None
        r = redact.current()
        leaked = None if r is None else r.found(data)
        if leaked is not None:
            scan.skipped.append(
                (rel, f"it holds the value of {leaked}, a secret kept out of the log")
            )
            return None
        scan.read += 1
        sha = codec.sha256_hex(data)
        if sha not in self._held and sha not in scan.pending:
            scan.pending[sha] = data
            scan.pending_bytes += len(data)
            if scan.pending_bytes >= _FLUSH_BYTES:
                self._flush(scan)
        return sha

    def _flush(self, scan: _Scan, *, trees: bool = False) -> None:
        """Store the queued file objects the store does not hold yet; with `trees`, the trees
        (only once every file they name is stored)."""
        batch = scan.trees if trees else scan.pending
        if not batch:
            return
        missing = self.store.missing_objects(batch)
        self.store.put_objects({s: batch[s] for s in missing})
        self._held.update(batch)
        if trees:
            scan.trees = {}
        else:
            scan.pending = {}
            scan.pending_bytes = 0


def _own_files(store: Store, root: str) -> frozenset[str]:
    """The store's own files beneath the workspace (relative paths): never snapshotted."""
    path = getattr(store, "path", None)
    if not isinstance(path, str) or path == ":memory:":
        return frozenset()
    real = os.path.realpath(path)
    if not real.startswith(root + os.sep):
        return frozenset()
    rel = real[len(root) + 1 :]
    return frozenset(rel + suffix for suffix in ("", "-wal", "-shm", "-journal"))


def snapshots_enabled() -> bool:
    """Whether steps snapshot the workspace (`BUBU_SNAPSHOTS=off` turns it off)."""
    return os.environ.get("BUBU_SNAPSHOTS", "on").strip().lower() not in ("off", "0", "no")


_registry: dict[tuple[str, str], Snapshotter] = {}
_registry_lock = threading.Lock()


def snapshotter(store: Store, root: str | os.PathLike[str]) -> Snapshotter:
    """The process's snapshotter of a workspace in a store (its stat cache lives as long)."""
    key = (store.url, os.path.realpath(root))
    with _registry_lock:
        found = _registry.get(key)
        if found is None:
            found = _registry[key] = Snapshotter(store, root)
            found.load_cache()
        found.store = store  # another handle on the same database: the cache still holds
        return found
