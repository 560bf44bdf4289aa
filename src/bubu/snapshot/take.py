"""Taking a snapshot of a workspace: walk it, read only what changed, store the new objects.

A stat cache (size, mtime_ns, inode, ctime_ns, mode) per path says which files are as the last
snapshot saw them, so an incremental snapshot reads only changed files. With a change feed
(`watch`), a directory where nothing was reported is the last scan's, unopened, and one where
only some names were is patched by stat-ing those names; without one, every directory is listed
and every file stat-ed. A file whose mtime is as recent as the scan is read again when next
looked at (git's "racily clean" rule). Objects are stored before the trees that name them, and
trees before any event names the root; a snapshot that fails says why in `partial` and never
raises.
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
from bubu.snapshot import tree, watch
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

UNTRUSTED: StatKey = (-1, -1, -1, -1, -1)
"""The stat key of a file read within the racy window: no stat matches it, so it is read again
(its object is still known, as the base of its next version)."""

_FLUSH_BYTES = 32 << 20
_RACY_NS = 20_000_000
"""A file modified this close to the scan's start may change again within one mtime tick."""


@dataclass(slots=True)
class _Dir:
    """One directory as a scan left it, kept so that the next scan can reuse it unopened (the
    feed reported nothing in or beneath it) or patch only the names the feed reported."""

    parent_rules: Rules
    """The rules of the directory above, as they were (if they change, this is walked again)."""
    rules: Rules
    dev: int
    wd: int | None
    """The feed's watch on it, added before it was listed; None: not watched, listed every time."""
    entries: list[tree.Entry]
    """Its tree's entries, sorted by name."""
    index: dict[str, tree.Entry]
    """The same by name."""
    sha: str
    size: int
    files: int
    """Files and links in it and beneath it."""
    stats: dict[str, tuple[StatKey, str]]
    """Its own files: the stat key each was read at, and its object."""
    children: dict[str, _Dir]
    skipped: dict[str, list[tuple[str, str]]]
    """Per own name, what was skipped for it (a file, or a directory that could not be walked)."""
    unsure: set[str]
    """Own names to stat again every time whatever the feed says: read within the racy window,
    more than one hard link, left out for holding a secret."""
    settled: bool
    """Watched, nothing unsure in it, and each directory beneath it settled."""
    unsettled: int
    """How many of its subdirectories are not settled."""
    skipped_all: list[tuple[str, str]]
    """What was skipped in it and beneath it."""


@dataclass(slots=True)
class _Scan:
    start_ns: int
    caps: Caps
    pending: dict[str, bytes] = field(default_factory=dict)
    trees: dict[str, bytes] = field(default_factory=dict)
    bases: dict[str, str] = field(default_factory=dict)
    """Per new object, the object of its previous version (stored as a delta against it)."""
    pending_bytes: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """What was skipped for the name being walked (moved to its directory after each name)."""
    files: int = 0
    total: int = 0
    partial: str | None = None
    read: int = 0
    """Files read (not found in the stat cache) by this scan."""
    cap_total: int = 0
    cap_files: int = 0
    watcher: watch.Feed | None = None
    """The change feed that watches each directory this scan lists."""
    feed: watch.Feed | None = None
    """The change feed this scan trusts (None: every directory is listed)."""
    changes: watch.Changes = field(default_factory=watch.Changes)
    touched: set[str] = field(default_factory=set)
    reused: int = 0
    """Directories taken from the last scan unopened."""
    listed: int = 0
    """Directories read whole."""
    secrets: int = 0
    """Files left out for holding a secret (they are read again by every scan)."""


class Snapshotter:
    """Takes snapshots of one workspace into one store, keeping the stat cache between them."""

    def __init__(
        self, store: Store, root: str | os.PathLike[str], *, caps: Caps | None = None
    ) -> None:
        self.store = store
        self.root = os.path.realpath(root)
        self.caps = caps or Caps()
        self._lock = threading.Lock()
        self._loaded: dict[str, dict[str, tuple[StatKey, str]]] = {}
        """The stat cache an earlier process saved, until a walk has used it."""
        self._tree: _Dir | None = None
        self._walked_whole = False
        """The last scan was complete (not over a cap): its directories can be reused."""
        self._rules: dict[str, tuple[Rules, StatKey | None, Rules]] = {}
        self._decided: dict[str, tuple[Rules, dict[str, bool]]] = {}
        self._held: set[str] = set()
        self._exclude = _own_files(store, self.root)
        self._feed: watch.Feed | None = None
        self._no_feed = False
        self.last: WorkspaceSnapshot | None = None
        self.last_reused = self.last_listed = 0
        """Directories the last snapshot took from the one before unopened, and those it read
        whole (for tests and benches)."""

    def take(self) -> WorkspaceSnapshot:
        """Snapshot the workspace now; on any failure a partial snapshot saying why."""
        with self._lock:
            try:
                snap = self._take()
            except (OSError, BubuError) as e:
                # The feed's events were read: the next scan lists everything (the stat cache
                # of the last complete one still holds).
                self._walked_whole = False
                reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
                snap = WorkspaceSnapshot(tree=None, partial=f"the snapshot failed: {reason}")
            self.last = snap
            return snap

    def close(self) -> None:
        """Stop the change feed (the next snapshot walks everything)."""
        with self._lock:
            if self._feed is not None:
                self._feed.close()
                self._feed = None

    def _take(self) -> WorkspaceSnapshot:
        try:
            st = os.stat(self.root)
        except OSError:
            st = None
        if st is None or not S_ISDIR(st.st_mode):
            self._tree = None
            return WorkspaceSnapshot(tree=None, partial=f"the workspace {self.root} is missing")
        scan = self._new_scan(incremental=True)
        node = self._walk(self.root, "", NO_RULES, scan, prev=self._tree, dev=st.st_dev)
        if scan.feed is not None and (
            scan.partial is not None
            or (node is not None and (node.files > scan.cap_files or node.size > scan.cap_total))
        ):  # near a cap: the whole walk says exactly what is left out
            self._flush(scan)
            scan = self._new_scan(incremental=False)
            node = self._walk(self.root, "", NO_RULES, scan, prev=self._tree, dev=st.st_dev)
        if node is None:
            skipped = sorted(scan.skipped)
            root_sha = self._put_tree(scan, None, tree.encode([], skipped))
            files = total = 0
        else:
            root_sha, files, total, skipped = node.sha, node.files, node.size, node.skipped_all
        self._flush(scan)
        failpoints.hit("mid_snapshot")
        self._flush(scan, trees=True)
        self._tree = node
        self._walked_whole = node is not None and scan.partial is None
        self._loaded = {}
        self.last_reused, self.last_listed = scan.reused, scan.listed
        if scan.read >= SAVE_AFTER_READS:
            self._save_cache()
        return WorkspaceSnapshot(
            tree=root_sha,
            files=files,
            bytes=total,
            skipped=len(skipped),
            partial=scan.partial,
        )

    def _new_scan(self, *, incremental: bool) -> _Scan:
        scan = _Scan(start_ns=time.time_ns(), caps=self.caps)
        scan.cap_total, scan.cap_files = self.caps.total_bytes, self.caps.files
        feed = self._feed
        if feed is not None and not feed.usable():
            feed = self._feed = None
        if feed is None and not self._no_feed:
            feed = self._feed = watch.Feed.open()
            self._no_feed = feed is None
            incremental = False  # nothing is watched yet
        if feed is None:
            return scan
        scan.watcher = feed
        changes = feed.drain()
        for rel in changes.invalid:
            feed.forget(rel)
        if incremental and self._walked_whole and not changes.overflow:
            scan.feed, scan.changes, scan.touched = feed, changes, changes.touched()
        return scan

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
            self._loaded = {
                rel: {n: e for n, e in entries.items() if e[1] not in missing}
                for rel, entries in cached.items()
            }
            self._held.update(sha for d in self._loaded.values() for _, sha in d.values())
        return sum(1 for d in self._loaded.values() for k, _ in d.values() if k != UNTRUSTED)

    def _save_cache(self) -> None:
        """Keep the stat cache in the store for the next process (a failure only costs it)."""
        out: dict[str, dict[str, tuple[StatKey, str]]] = {}
        stack = [("", self._tree)] if self._tree is not None else []
        while stack:
            rel, node = stack.pop()
            assert node is not None
            out[rel] = {n: e for n, e in node.stats.items() if e[0] != UNTRUSTED}
            stack.extend((f"{rel}{n}/", c) for n, c in node.children.items())
        data = zlib.compress(msgspec.msgpack.encode(out), 1)
        view = View(
            kind=CACHE_VIEW,
            session="",
            key=self.root,
            source_high_water=0,
            source_digest="",
            data=data,
        )
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

    def _verdicts(self, rel: str, rules: Rules) -> dict[str, bool]:
        decided = self._decided.get(rel)
        if decided is None or decided[0] is not rules:
            decided = (rules, {})
            self._decided[rel] = decided
        return decided[1]

    def _walk(
        self, path: str, rel: str, parent: Rules, scan: _Scan, *, prev: _Dir | None, dev: int
    ) -> _Dir | None:
        """The directory `rel` as it is now, or None if it cannot be read (said in
        `scan.skipped`): the last scan's unopened when the feed reported nothing in or beneath
        it, patched when it reported only some of its names, else listed."""
        if scan.partial is not None:  # over a cap: the rest is not walked at all
            scan.skipped.append((rel, "over the workspace's cap"))
            return None
        feed = scan.feed
        if prev is not None and rel in scan.changes.invalid:
            prev = None
        if (
            feed is not None
            and prev is not None
            and prev.parent_rules is parent
            and feed.watching(prev.wd, rel)
        ):
            if rel not in scan.touched and prev.settled:
                scan.reused += 1
                return prev
            names = scan.changes.names.get(rel, set())
            if watch.ALL_NAME not in names and ".gitignore" not in names:
                return self._patch(path, rel, scan, prev, names | prev.unsure)
        return self._list(path, rel, parent, scan, prev=prev, dev=dev)

    def _list(
        self, path: str, rel: str, parent: Rules, scan: _Scan, *, prev: _Dir | None, dev: int
    ) -> _Dir | None:
        """Read the whole directory: every entry stat-ed, only changed files read."""
        feed = scan.watcher
        wd = None
        if feed is not None and feed.local(path, dev):
            wd = feed.watch(path, rel)  # before the listing: a change from now on is reported
        scan.listed += 1
        try:
            with os.scandir(path) as it:
                items = list(it)
        except OSError as e:
            scan.skipped.append((rel or ".", f"unreadable: {e.strerror}"))
            return None
        rules = self._rules_in(rel, parent, items)
        verdicts = self._verdicts(rel, rules)
        entries: dict[str, tree.Entry] = {}
        old = prev.stats if prev is not None else self._loaded.get(rel) or {}
        seen: dict[str, tuple[StatKey, str]] = {}
        node = _Dir(
            parent_rules=parent,
            rules=rules,
            dev=dev,
            wd=wd,
            entries=[],
            index={},
            sha="",
            size=0,
            files=0,
            stats=seen,
            children={},
            skipped={},
            unsure=set(),
            settled=False,
            unsettled=0,
            skipped_all=[],
        )
        kids = prev.children if prev is not None else {}
        exclude = self._exclude
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
                node.skipped[name] = [(rel + name, f"unreadable: {e.strerror}")]
                continue
            mode = s.st_mode
            isdir = S_ISDIR(mode)
            vkey = name + "/" if isdir else name
            ignored = verdicts.get(vkey)
            if ignored is None:
                ignored = verdicts[vkey] = rules.ignored(rel + name, directory=isdir)
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
                    and s.st_nlink == 1
                ):
                    seen[name] = hit
                    files += 1
                    total += n
                    entries[name] = (name, LINK if S_ISLNK(mode) else mode, hit[1], n)
                    continue
            scan.files, scan.total = files, total
            self._one(
                d.path,
                rel,
                name,
                s,
                isdir=isdir,
                node=node,
                entries=entries,
                old=old,
                kid=kids.get(name),
                scan=scan,
            )
            files, total = scan.files, scan.total
        scan.files, scan.total = files, total
        return self._finish(scan, rel, node, entries, prev, dirty=None)

    def _patch(self, path: str, rel: str, scan: _Scan, prev: _Dir, names: set[str]) -> _Dir | None:
        """The last scan's directory with only `names` looked at again (each stat-ed by its
        path), and the directories in it walked as the feed says."""
        entries = dict(prev.index)
        node = _Dir(
            parent_rules=prev.parent_rules,
            rules=prev.rules,
            dev=prev.dev,
            wd=prev.wd,
            entries=[],
            index={},
            sha="",
            size=0,
            files=0,
            stats=dict(prev.stats),
            children=dict(prev.children),
            skipped=dict(prev.skipped),
            unsure=set(prev.unsure),
            settled=False,
            unsettled=0,
            skipped_all=[],
        )
        dirty = set(names)
        verdicts = self._verdicts(rel, prev.rules)
        for name in names:
            entries.pop(name, None)
            node.stats.pop(name, None)
            node.children.pop(name, None)
            node.skipped.pop(name, None)
            node.unsure.discard(name)
            if self._exclude and rel + name in self._exclude:
                continue
            full = f"{path}/{name}"
            try:
                s = os.lstat(full)
            except FileNotFoundError:
                continue
            except OSError as e:
                node.skipped[name] = [(rel + name, f"unreadable: {e.strerror}")]
                continue
            isdir = S_ISDIR(s.st_mode)
            vkey = name + "/" if isdir else name
            ignored = verdicts.get(vkey)
            if ignored is None:
                ignored = verdicts[vkey] = prev.rules.ignored(rel + name, directory=isdir)
            if ignored:
                continue
            self._one(
                full,
                rel,
                name,
                s,
                isdir=isdir,
                node=node,
                entries=entries,
                old=prev.stats,
                kid=prev.children.get(name),
                scan=scan,
            )
        for name, child in prev.children.items():
            if name in names:
                continue
            sub = self._walk(
                f"{path}/{name}", f"{rel}{name}/", prev.rules, scan, prev=child, dev=child.dev
            )
            if sub is not child:
                dirty.add(name)
                self._place(node, entries, name, sub, scan)
        return self._finish(scan, rel, node, entries, prev, dirty=dirty)

    def _place(
        self,
        node: _Dir,
        entries: dict[str, tree.Entry],
        name: str,
        sub: _Dir | None,
        scan: _Scan,
    ) -> None:
        """Put a walked subdirectory into its parent (or what was skipped for it)."""
        if sub is None:
            entries.pop(name, None)
            node.children.pop(name, None)
            if scan.skipped:
                node.skipped[name] = scan.skipped[:]
                scan.skipped.clear()
            return
        node.children[name] = sub
        entries[name] = (name, tree.DIR, sub.sha, sub.size)

    def _one(
        self,
        path: str,
        rel: str,
        name: str,
        s: os.stat_result,
        *,
        isdir: bool,
        node: _Dir,
        entries: dict[str, tree.Entry],
        old: dict[str, tuple[StatKey, str]],
        kid: _Dir | None,
        scan: _Scan,
    ) -> None:
        """One entry that is a directory, or a file the last scan did not see as it is now."""
        p = rel + name
        mode = s.st_mode
        if isdir:
            sub = self._walk(path, p + "/", node.rules, scan, prev=kid, dev=s.st_dev)
            self._place(node, entries, name, sub, scan)
            return
        secrets = scan.secrets
        sha = self._file(path, p, s, old.get(name), scan)
        if scan.skipped:
            node.skipped[name] = scan.skipped[:]
            scan.skipped.clear()
        if scan.secrets != secrets:
            node.unsure.add(name)
        if sha is None:
            return
        key = (s.st_size, s.st_mtime_ns, s.st_ino, s.st_ctime_ns, mode)
        if s.st_mtime_ns >= scan.start_ns - _RACY_NS:
            # Read again when it changes: a second change within the same clock tick can keep
            # its stat (with a feed, the change is reported; without, the key never matches).
            key = UNTRUSTED
        if s.st_nlink != 1:  # a change through its other name is reported there only
            node.unsure.add(name)
        node.stats[name] = (key, sha)
        entries[name] = (name, LINK if S_ISLNK(mode) else mode, sha, s.st_size)

    def _file(
        self,
        path: str,
        p: str,
        s: os.stat_result,
        hit: tuple[StatKey, str] | None,
        scan: _Scan,
    ) -> str | None:
        """The object of a file (or link) not known as it is now: read, or over a cap."""
        mode = s.st_mode
        if not (S_ISREG(mode) or S_ISLNK(mode)):
            scan.skipped.append((p, "not a regular file or a link"))
            return None
        key = (s.st_size, s.st_mtime_ns, s.st_ino, s.st_ctime_ns, mode)
        if hit is not None and hit[0] == key:
            sha: str | None = hit[1]
        else:
            sha = self._read(path, p, s.st_size, S_ISLNK(mode), scan)
            if sha is None:
                return None
            if hit is not None and hit[1] != sha and sha in scan.pending:
                scan.bases[sha] = hit[1]
        if scan.files >= scan.caps.files or scan.total + s.st_size > scan.caps.total_bytes:
            scan.skipped.append((p, "over the workspace's cap"))
            scan.partial = (
                f"the workspace is over the snapshot's cap of {scan.caps.files} files or "
                f"{scan.caps.total_bytes} bytes"
            )
            return None
        scan.files += 1
        scan.total += s.st_size
        return sha

    def _finish(
        self,
        scan: _Scan,
        rel: str,
        node: _Dir,
        entries: dict[str, tree.Entry],
        prev: _Dir | None,
        *,
        dirty: set[str] | None,
    ) -> _Dir:
        """Name the directory's tree (stored if new) and total what is in and beneath it (from
        the last scan's totals when only the `dirty` names may differ from `prev`)."""
        node.index = entries
        kids = node.children
        if prev is None or dirty is None:
            node.entries = sorted(entries.values())
            node.size = sum(e[3] for e in node.entries)
            node.files = len(node.entries) - len(kids) + sum(c.files for c in kids.values())
            node.unsettled = sum(1 for c in kids.values() if not c.settled)
        else:
            node.entries = sorted(entries.values()) if dirty else prev.entries
            node.size, node.files, node.unsettled = prev.size, prev.files, prev.unsettled
            for name in dirty:
                _count(node, prev.index.get(name), prev.children.get(name), -1)
                _count(node, entries.get(name), kids.get(name), 1)
        own = [x for got in node.skipped.values() for x in got]
        node.skipped_all = own + [x for c in kids.values() if c.skipped_all for x in c.skipped_all]
        node.settled = node.wd is not None and not node.unsure and not node.unsettled
        listed = sorted(node.skipped_all) if rel == "" else []
        if (
            prev is not None
            and prev.entries == node.entries
            and (rel != "" or sorted(prev.skipped_all) == listed)
        ):
            node.sha = prev.sha
            return node
        node.sha = self._put_tree(scan, prev, tree.encode(node.entries, listed))
        return node

    def _put_tree(self, scan: _Scan, prev: _Dir | None, data: bytes) -> str:
        sha = codec.sha256_hex(data)
        if sha not in self._held:
            scan.trees[sha] = data
            if prev is not None and prev.sha != sha:
                scan.bases[sha] = prev.sha
        return sha

    def _read(self, path: str, rel: str, size: int, link: bool, scan: _Scan) -> str | None:
        """Read one changed file (or link), queue its object, and return its sha-256."""
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            scan.skipped.append(
                (
                    rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
                    "its name is not UTF-8",
                )
            )
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
            scan.secrets += 1
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
        bases = {s: scan.bases[s] for s in missing if s in scan.bases}
        self.store.put_objects({s: batch[s] for s in missing}, bases)
        self._held.update(batch)
        if trees:
            scan.trees = {}
        else:
            scan.pending = {}
            scan.pending_bytes = 0


def _count(node: _Dir, entry: tree.Entry | None, kid: _Dir | None, sign: int) -> None:
    """Add (or take away) one entry from a directory's totals."""
    if entry is None:
        return
    node.size += sign * entry[3]
    node.files += sign * (kid.files if kid is not None else 1)
    if kid is not None and not kid.settled:
        node.unsettled += sign


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
