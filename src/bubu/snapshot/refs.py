"""The workspace snapshots a log names, and the objects they reach (for export and copies)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from bubu.events import FunctionResponse, Record, SystemNote, WorkspaceSnapshot
from bubu.snapshot import tree


def snapshot_of(record: Record) -> WorkspaceSnapshot | None:
    """The snapshot an event records: an outcome's (after its step), or a dispatch's (before)."""
    ev = record.event
    snap = getattr(ev.content, "snapshot", None)
    if snap is None and ev.actions is not None and ev.actions.tool_dispatch is not None:
        snap = ev.actions.tool_dispatch.snapshot
    if snap is None and isinstance(ev.content, SystemNote):
        snap = getattr(ev.content.note, "snapshot", None)
    return snap if isinstance(snap, WorkspaceSnapshot) else None


def roots(records: Iterable[Record]) -> list[str]:
    """The root trees the events name, in log order, each once."""
    out: dict[str, None] = {}
    for r in records:
        snap = snapshot_of(r)
        if snap is not None and snap.tree is not None:
            out.setdefault(snap.tree)
    return list(out)


def objects_of(get: tree.GetObject, names: Iterable[str]) -> Iterator[tuple[str, bytes | None]]:
    """Every object the snapshots `names` reach, each once, with its bytes (None: missing);
    files before the trees that name them, so that a copy stored in this order is never a tree
    without its files."""
    seen: set[str] = set()
    for root in names:
        found = list(tree.reachable(get, root, seen))
        for sha, is_tree in found:
            if not is_tree:
                yield sha, get(sha)
        for sha, is_tree in reversed(found):
            if is_tree:
                yield sha, get(sha)


def snapshot_before(records: Sequence[Record], seq: int) -> WorkspaceSnapshot | None:
    """The last snapshot with a tree recorded at or before `seq` (the workspace as a call
    dispatched at `seq` found it), or None."""
    found = None
    for r in records:
        if r.seq > seq:
            break
        snap = snapshot_of(r)
        if snap is not None and snap.tree is not None:
            found = snap
    return found


class SnapshotsBefore:
    """`snapshot_before` of each of `seqs`, folded one record at a time (for a caller streaming
    the log through it): `at()` once every record up to the last of them is in."""

    __slots__ = ("_at", "_found", "_pending")

    def __init__(self, seqs: Iterable[int]) -> None:
        self._pending = sorted(set(seqs), reverse=True)
        self._found: WorkspaceSnapshot | None = None
        self._at: dict[int, WorkspaceSnapshot | None] = {}

    def apply(self, r: Record) -> None:
        pending = self._pending
        while pending and pending[-1] < r.seq:
            self._at[pending.pop()] = self._found
        if not pending:
            return
        snap = snapshot_of(r)
        if snap is not None and snap.tree is not None:
            self._found = snap

    def at(self) -> dict[int, WorkspaceSnapshot | None]:
        """The snapshot before each seq, of the records folded so far."""
        return {**self._at, **dict.fromkeys(self._pending, self._found)}


class OpenSnapshots:
    """`snapshot_before` of the dispatch of each call still waiting for its outcome, folded one
    record at a time: what recovery needs to say what a cut call may have changed, held only
    for the calls that may still be cut (small enough for the runner's state snapshot)."""

    __slots__ = ("_before", "_last")

    def __init__(self) -> None:
        self._last: WorkspaceSnapshot | None = None
        self._before: dict[str, dict[int, WorkspaceSnapshot | None]] = {}
        """By call id: the snapshot before each of its dispatches (by seq)."""

    def apply(self, r: Record) -> None:
        snap = snapshot_of(r)
        if snap is not None and snap.tree is not None:
            self._last = snap
        ev = r.event
        if ev.actions is not None and ev.actions.tool_dispatch is not None:
            d = ev.actions.tool_dispatch
            self._before.setdefault(d.call_id, {})[r.seq] = self._last
        if isinstance(ev.content, FunctionResponse):
            self._before.pop(ev.content.call_id, None)

    def at(self, seqs: Iterable[int]) -> dict[int, WorkspaceSnapshot | None]:
        """The snapshot before each of `seqs` (dispatches of calls still waiting)."""
        want = set(seqs)
        out: dict[int, WorkspaceSnapshot | None] = dict.fromkeys(want, self._last)
        for by_seq in self._before.values():
            out.update((seq, snap) for seq, snap in by_seq.items() if seq in want)
        return out


def snapshot_at(records: Sequence[Record], seq: int) -> WorkspaceSnapshot | None:
    """The workspace as it was at the boundary `seq`: the snapshot the next turn took before its
    first call that could change it (only reads ran before it), else the last one at or before
    `seq`."""
    for r in records:
        if r.seq <= seq:
            continue
        snap = snapshot_of(r)
        if snap is None or snap.tree is None:
            continue
        if r.event.actions is not None and r.event.actions.tool_dispatch is not None:
            return snap
        break
    return snapshot_before(records, seq)


def turn_spans(records: Sequence[Record]) -> list[tuple[int, int]]:
    """(start, end) seqs of each turn, in order: from the boundary before its start to its last
    event (an open turn ends at the log's last seq)."""
    from bubu.events import SystemNote, TurnEnded, TurnStarted

    spans: list[tuple[int, int]] = []
    start: int | None = None
    for r in records:
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, TurnStarted):
            if start is not None:
                spans.append((start, r.seq - 1))
            start = r.seq - 1
        elif isinstance(c, SystemNote) and isinstance(c.note, TurnEnded) and start is not None:
            spans.append((start, r.seq))
            start = None
    if start is not None and records:
        spans.append((start, records[-1].seq))
    return spans


def span(records: Sequence[Record], start: int, end: int) -> tuple[str | None, str | None]:
    """The trees of the workspace at `start` and as the last snapshot by `end` left it."""
    a, b = snapshot_at(records, start), snapshot_before(records, end)
    return (None if a is None else a.tree), (None if b is None else b.tree)
