"""Recompute a session's hash chain from stored rows (backend-independent)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from bubu.errors import BubuError
from bubu.events import Record, SystemNote, TurnEnded, TurnStarted
from bubu.log import codec
from bubu.log.store import VerifyReport


def verify_records(
    session: str,
    rows: Sequence[tuple[int, bytes, bytes]],
    blobs_ok: dict[str, bool] | None = None,
    *,
    after: int = 0,
    digest: bytes = codec.GENESIS,
    ended: dict[str | None, int] | None = None,
    into: list[Record] | None = None,
) -> VerifyReport:
    """Check (seq, hash, payload) rows: gapless seq from 1, each hash = H(prev ‖ payload), each
    payload decodes to an event of this session, each referenced blob present and intact, and
    no turn ended twice without being started again in between.

    Rows that continue a prefix verified before (a snapshot's) start at `after` + 1 from its
    `digest`, with the turn that had `ended` by then; `into` collects the decoded records."""
    prev = digest
    expected = after + 1
    ended = dict(ended or {})  # turn -> seq of its end, while it stays ended
    for seq, stored, payload in rows:

        def bad(problem: str, seq: int = seq, prev: bytes = prev) -> VerifyReport:
            return VerifyReport(
                session=session,
                ok=False,
                high_water=after + len(rows),
                digest=prev.hex(),
                first_bad_seq=seq,
                problem=problem,
            )

        if seq != expected:
            return bad(f"seq {expected} is missing (found {seq})", expected)
        prev = codec.chain(prev, bytes(payload))
        if prev != bytes(stored):
            return bad(f"the hash at seq {seq} does not match its content (altered or damaged)")
        try:
            ev = codec.decode(payload, seq=seq)
        except BubuError as e:
            return bad(str(e))
        if ev.session != session:
            return bad(f"the event at seq {seq} belongs to session {ev.session}")
        note = ev.content.note if isinstance(ev.content, SystemNote) else None
        if isinstance(note, TurnStarted):
            ended.pop(ev.turn, None)
        elif isinstance(note, TurnEnded):
            if ev.turn in ended:
                return bad(f"the turn {ev.turn} ended twice (at seq {ended[ev.turn]} and {seq})")
            ended[ev.turn] = seq
        blob = getattr(ev.content, "blob", None)
        if blob is not None and blobs_ok is not None and not blobs_ok.get(blob.sha256, False):
            return bad(
                f"the blob {blob.sha256[:12]}… referenced at seq {seq} is missing or damaged"
            )
        if into is not None:
            into.append(Record(seq=seq, hash=prev.hex(), event=ev))
        expected += 1
    return VerifyReport(session=session, ok=True, high_water=after + len(rows), digest=prev.hex())


def verify_linked(
    session: str, rows: Sequence[tuple[int, bytes, bytes]], seqs: Iterable[int]
) -> VerifyReport | None:
    """Whether each of `seqs` is linked into the chain among `rows` (the row before it, it and
    the row after it, as far as the log goes): its hash is H(previous hash ‖ its payload) and
    the next row's is H(its hash ‖ the next payload). For single rows of a prefix verified
    before (a snapshot's) that a run acts on: altered alone, a row breaks its own link or the
    next one's. None when they hold, else the first bad one."""
    by_seq = {seq: (bytes(h), bytes(p)) for seq, h, p in rows}
    for seq in sorted(set(seqs)):
        problem, at = "", seq
        for at in (seq, seq + 1):
            if at not in by_seq:
                if at == seq:
                    problem = f"seq {seq} is missing"
                    break
                continue
            prev = codec.GENESIS if at == 1 else by_seq.get(at - 1, (None, b""))[0]
            stored, payload = by_seq[at]
            if prev is None or codec.chain(prev, payload) != stored:
                problem = f"the hash at seq {at} does not match its content (altered or damaged)"
                break
        else:
            continue
        return VerifyReport(
            session=session,
            ok=False,
            high_water=max(by_seq, default=0),
            digest="",
            first_bad_seq=at,
            problem=problem,
        )
    return None


def verify_chain(session: str, rows: Sequence[tuple[int, bytes, bytes]]) -> VerifyReport:
    """The hash chain alone: gapless seq from 1 and each stored hash = H(prev ‖ payload), with
    nothing decoded (about a microsecond an event), for checks on every run of a session."""
    prev = codec.GENESIS
    for expected, (seq, stored, payload) in enumerate(rows, 1):
        problem, at = None, seq
        chained = codec.chain(prev, bytes(payload))
        if seq != expected:
            problem, at = f"seq {expected} is missing (found {seq})", expected
        elif chained != bytes(stored):
            problem = f"the hash at seq {seq} does not match its content (altered or damaged)"
        if problem is not None:
            return VerifyReport(
                session=session,
                ok=False,
                high_water=len(rows),
                digest=prev.hex(),
                first_bad_seq=at,
                problem=problem,
            )
        prev = chained
    return VerifyReport(session=session, ok=True, high_water=len(rows), digest=prev.hex())


def verify_blob_refs(payload: bytes) -> list[str]:
    """The blob hashes an event's canonical bytes refer to (none if the bytes do not decode:
    the chain check reports a damaged event at its seq)."""
    try:
        ev = codec.decode(payload)
    except BubuError:
        return []
    blob = getattr(ev.content, "blob", None)
    return [] if blob is None else [blob.sha256]


CHECKPOINT_VIEW = "checkpoint"
"""The kind of the derived views that cache checkpoint events."""
RUNNER_VIEW = "runner_state"
"""The kind of the snapshots of a runner's folds (`bubu.engine.reload`)."""
RUNNER_VIEW_VERSION = 4
"""Bumped whenever a fold's shape or meaning changes: a snapshot of another version is rebuilt."""
RUNNER_VIEW_KEY = f"v{RUNNER_VIEW_VERSION}"


def verify_views(
    report: VerifyReport,
    rows: Sequence[tuple[int, bytes, bytes]],
    get_view: Callable[[str], tuple[str, bytes] | None],
) -> VerifyReport:
    """Check the checkpoint views against the log they cache: each compaction note names the
    digest of its checkpoint event, and a view under that key must hold exactly those bytes.

    `get_view(key)` gives a stored view's (source digest, data), or None. A missing view is fine
    (it is rebuilt from the event); one that differs was changed behind Bubu's back.
    """
    if not report.ok:
        return report
    for seq, _, payload in rows:
        if b'"note":"compaction"' not in payload or b'"body_digest":' not in payload:
            continue
        note = getattr(codec.decode(payload, seq=seq).content, "note", None)
        key, want = getattr(note, "checkpoint", None), getattr(note, "body_digest", None)
        if not key or not want:
            continue
        view = get_view(key)
        if view is None:
            continue
        digest, data = view
        if digest != want or codec.sha256_hex(data) != want:
            return VerifyReport(
                session=report.session,
                ok=False,
                high_water=report.high_water,
                digest=report.digest,
                first_bad_seq=seq,
                problem=f"the checkpoint view {key} differs from the checkpoint event the "
                f"compaction note at seq {seq} names (changed behind Bubu's back); Bubu ignores "
                "it and rebuilds it from the log",
            )
    return report


def snapshot_roots(payload: bytes) -> list[str]:
    """The workspace trees an event's canonical bytes name (in its dispatch or its outcome)."""
    if b'"snapshot":' not in payload:
        return []
    try:
        ev = codec.decode(payload)
    except BubuError:
        return []
    found = []
    dispatch = ev.actions.tool_dispatch if ev.actions is not None else None
    note = getattr(ev.content, "note", None)
    for snap in (
        getattr(ev.content, "snapshot", None),
        getattr(dispatch, "snapshot", None),
        getattr(note, "snapshot", None),
    ):
        if snap is not None and snap.tree is not None:
            found.append(snap.tree)
    return found


def verify_snapshots(
    report: VerifyReport,
    rows: Sequence[tuple[int, bytes, bytes]],
    object_rows: Callable[[Sequence[str]], dict[str, tuple[int, bytes]]],
) -> VerifyReport:
    """Check that every object of every workspace snapshot the log names is stored and intact:
    the trees, and each file and link they name (each object checked once)."""
    if not report.ok:
        return report
    from bubu.log import objects
    from bubu.snapshot import tree

    seen: set[str] = set()
    intact: dict[str, bytes | None] = {}

    def whole(sha: str, depth: int = 0) -> bytes | None:
        """A delta's base (a short chain at most), checked against its name."""
        row = object_rows([sha]).get(sha)
        if row is None:
            return None
        more = None if depth >= objects.MAX_CHAIN else lambda s: whole(s, depth + 1)
        data = objects.unpack(row[1], row[0], more)
        return data if data is not None and codec.sha256_hex(data) == sha else None

    def get(sha: str) -> bytes | None:
        if sha not in intact:
            row = object_rows([sha]).get(sha)
            data = None if row is None else objects.unpack(row[1], row[0], whole)
            intact[sha] = data if data is not None and codec.sha256_hex(data) == sha else None
        return intact[sha]

    for seq, _, payload in rows:
        for root in snapshot_roots(payload):
            files: list[str] = []
            try:
                for sha, is_tree in tree.reachable(get, root, seen):
                    if is_tree:
                        if get(sha) is None:
                            return _bad_snapshot(report, seq, f"its tree {sha[:12]}…")
                    else:
                        files.append(sha)
            except BubuError as e:
                return _bad_snapshot(report, seq, f"a tree that does not decode ({e})")
            for i in range(0, len(files), 200):
                part = files[i : i + 200]
                got = object_rows(part)
                for sha in part:
                    row = got.get(sha)
                    if row is None or not objects.intact(sha, row[1], row[0], whole):
                        return _bad_snapshot(report, seq, f"the file object {sha[:12]}…")
    return report


def _bad_snapshot(report: VerifyReport, seq: int, what: str) -> VerifyReport:
    return VerifyReport(
        session=report.session,
        ok=False,
        high_water=report.high_water,
        digest=report.digest,
        first_bad_seq=seq,
        problem=f"the workspace snapshot named at seq {seq} is missing or damaged: {what}",
    )
