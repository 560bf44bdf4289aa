"""The session view (`projections.views.SessionView`) as a materialized view of the log.

A snapshot is a derived record in the store's views table: the seq it covers, the chain digest of
that prefix, and the fold's bytes behind their own sha-256. A reader takes the stored snapshot
when the log still holds that digest at that seq, folds only the records after it, and stores a
new snapshot once the suffix it had to fold is `EVERY` events or more. A snapshot that disagrees
with the log (or with its own checksum) is ignored and rebuilt from the log; `bubu verify`
reports it. Deleting every snapshot changes nothing but speed.
"""

from __future__ import annotations

import hashlib

from bubu.errors import BubuError
from bubu.log.store import Store, VerifyReport, View
from bubu.projections.status import Status
from bubu.projections.views import VERSION, SessionView, decode, encode, fold_view

KIND = "session_view"
"""The views table's kind for session view snapshots."""
KEY = f"v{VERSION}"
EVERY = 1_000
"""Events folded past the last snapshot at which a reader stores a new one."""


def framed(body: bytes) -> bytes:
    """`body` as a views row keeps it: the sha-256 of the body on a line, then the body."""
    return hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def unframed(data: object) -> bytes | None:
    """The body of a views row `framed` wrote, or None when it is not bytes or fails its
    checksum (a row rewritten behind Bubu's back)."""
    if isinstance(data, str):  # a row rewritten as text behind Bubu's back
        data = data.encode("utf-8", "surrogateescape")
    if not isinstance(data, bytes | bytearray | memoryview):
        return None
    digest, _, body = bytes(data).partition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        return None
    return body


def _pack(view: SessionView) -> bytes:
    return framed(encode(view))


def _unpack(data: object) -> SessionView | None:
    body = unframed(data)
    return None if body is None else decode(body)


def digest_at(store: Store, session: str, seq: int) -> str | None:
    """The chain digest of the prefix 1..seq (None when the log does not reach it)."""
    rows = store.raw(session, after=seq - 1, upto=seq)
    return bytes(rows[0][1]).hex() if rows else None


def stored(store: Store, session: str) -> tuple[SessionView | None, str | None]:
    """The stored snapshot if it is valid, and why it is not when there is one that is not."""
    try:
        row = store.get_view(KIND, session, KEY)
    except BubuError:
        return None, None
    except (TypeError, ValueError):  # a row rewritten behind Bubu's back, e.g. as text
        return None, "its record cannot be read"
    if row is None:
        return None, None
    view = _unpack(row.data)
    if view is None:
        return None, "its bytes do not match their checksum"
    if view.high_water != row.source_high_water:
        return (
            None,
            f"it says it covers seq {view.high_water}, its record seq {row.source_high_water}",
        )
    if digest_at(store, session, row.source_high_water) != row.source_digest:
        return (
            None,
            f"the log's digest at seq {row.source_high_water} is not the one it was built from",
        )
    return view, None


def save(store: Store, session: str, view: SessionView, digest: str | None = None) -> None:
    """Store `view` as the session's snapshot (a cache that cannot be written is only a cache)."""
    if view.high_water == 0 or getattr(store, "readonly", False):
        return
    digest = digest or digest_at(store, session, view.high_water)
    if digest is None:
        return
    try:
        store.put_view(
            View(
                kind=KIND,
                session=session,
                key=KEY,
                source_high_water=view.high_water,
                source_digest=digest,
                data=_pack(view),
            )
        )
    except BubuError:
        return


def load(store: Store, session: str, *, upto: int | None = None) -> SessionView:
    """The session view of the log (up to `upto`): the last valid snapshot plus the records
    after it; stores a fresh snapshot when the suffix was long or the stored one was bad."""
    view, bad = stored(store, session)
    if view is not None and upto is not None and view.high_water > upto:
        view = None
    start = view.high_water if view is not None else 0
    view = view if view is not None else SessionView()
    records = store.read(session, after=start, upto=upto)
    fold_view(records, view)
    if records and (bad is not None or len(records) >= EVERY):
        save(store, session, view, records[-1].hash)
    return view


def status(store: Store, session: str) -> Status:
    """The session's status (`fold_status` of its log), from the view's last snapshot."""
    return load(store, session).status


def keep_up(store: Store, session: str, high_water: int, due: int | None) -> int:
    """For a writer at `high_water`: bring the snapshot up to date when it is `due` (None: not
    known yet), so that it never lags the log by much more than `EVERY` events. Returns the seq
    at which it is due next; costs one fold of the events since the last snapshot per `EVERY`."""
    if due is not None and high_water < due:
        return due
    if due is None:
        view, _ = stored(store, session)
        if view is not None and high_water - view.high_water < EVERY:
            return view.high_water + EVERY
    return load(store, session).high_water + EVERY


def check(store: Store, report: VerifyReport) -> VerifyReport:
    """`report` (of a log that verifies), made bad when the session's snapshot disagrees with the
    log: its digest, its checksum, or its content against a fold of the log itself."""
    if not report.ok:
        return report
    view, bad = stored(store, report.session)
    if bad is None and view is not None:
        fresh = fold_view(store.read(report.session, upto=view.high_water))
        if encode(fresh) != encode(view):
            bad = "its content is not the fold of the log it names"
    if bad is None:
        return report
    return VerifyReport(
        session=report.session,
        ok=False,
        high_water=report.high_water,
        digest=report.digest,
        first_bad_seq=view.high_water if view is not None else None,
        problem=f"the session view snapshot is ignored ({bad}): readers fold the log instead, "
        "and the session's next run rebuilds it",
    )


__all__ = ["EVERY", "KIND", "check", "digest_at", "keep_up", "load", "save", "status", "stored"]
