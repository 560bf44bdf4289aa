"""A log held in this process's memory: the store contract without a database.

For tests and embedding, where a file or a server is beside the point: it keeps the same promises
as the SQLite and PostgreSQL backends (gapless per-session seq, the sha-256 chain over the
canonical bytes, content-addressed blobs, fenced leases, views) and passes the same contract
suite, but nothing survives the process. Events are held as their canonical bytes and decoded on
every read, as a database would, so what a test reads back is what the real backends would give.

`MemoryStore()` starts empty; `MemoryStore(other.db)` is a second handle on the same data, as a
second process would open the same file.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bubu import clock, ids
from bubu.errors import (
    AppendConflict,
    BubuError,
    LeaseError,
    LeaseLost,
    StorageError,
    UnknownSession,
)
from bubu.events import Event, Record
from bubu.log import codec
from bubu.log.store import (
    Appended,
    AppendRequest,
    Durability,
    Head,
    Lease,
    PendingAppend,
    SessionInfo,
    Store,
    VerifyReport,
    View,
    chain,
)
from bubu.log.verify import (
    CHECKPOINT_VIEW,
    verify_blob_refs,
    verify_records,
    verify_snapshots,
    verify_views,
)

Row = tuple[int, str, bytes, bytes]
"""One stored event: (seq, kind, canonical payload, chain hash)."""


@dataclass(slots=True)
class _Session:
    info: SessionInfo
    order: int
    rows: list[Row] = field(default_factory=list)
    last_ms: int | None = None
    lease: Lease | None = None

    def head(self) -> tuple[int, bytes]:
        return (self.rows[-1][0], self.rows[-1][3]) if self.rows else (0, codec.GENESIS)


@dataclass(slots=True)
class MemoryDB:
    """The data every handle of one in-memory log shares."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    sessions: dict[str, _Session] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    objects: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    views: dict[tuple[str, str, str], View] = field(default_factory=dict)
    order: itertools.count[int] = field(default_factory=itertools.count)


class MemoryStore(Store):
    """A `Store` in memory (see the module docstring); `db` shares another handle's data."""

    def __init__(self, db: MemoryDB | None = None, *, durability: Durability = "adaptive") -> None:
        self.db = db if db is not None else MemoryDB()
        self.url = f"memory:{id(self.db):x}"
        self.durability = durability
        self._closed = False
        self._init_group_commit()

    def _open(self) -> MemoryDB:
        if self._closed:
            raise StorageError("this in-memory log was closed; open a new handle")
        return self.db

    def _session(self, session: str) -> _Session:
        found = self._open().sessions.get(session)
        if found is None:
            raise UnknownSession(f"no session {session} in this in-memory log")
        return found

    # -- sessions ---------------------------------------------------------------------------------

    def _create_session(
        self,
        *,
        title: str,
        workspace: str,
        model: str | None,
        session_id: str | None,
        events: Sequence[Event],
        blobs: Sequence[bytes],
    ) -> SessionInfo:
        db = self._open()
        sid = session_id or ids.session_id()
        info = SessionInfo(
            id=sid,
            title=codec.sanitize_text(title),
            workspace=workspace,
            created_ms=clock.now_ms(),
            model=model,
            high_water=len(events),
            last_ms=None,
        )
        with db.lock:
            if sid in db.sessions:
                raise StorageError(f"a session {sid} already exists")
            entry = _Session(info=info, order=next(db.order))
            if events:
                first = AppendRequest(
                    session=sid, events=events, expect=0, durable=True, lease=None, blobs=blobs
                )
                self._apply(entry, first)
            db.sessions[sid] = entry
        return info

    def _listed(self, entry: _Session) -> SessionInfo:
        info = entry.info
        return SessionInfo(
            id=info.id,
            title=info.title,
            workspace=info.workspace,
            created_ms=info.created_ms,
            model=info.model,
            high_water=entry.head()[0],
            last_ms=entry.last_ms,
        )

    def sessions(self) -> list[SessionInfo]:
        db = self._open()
        with db.lock:
            entries = sorted(
                db.sessions.values(), key=lambda e: (e.info.created_ms, e.order), reverse=True
            )
            return [self._listed(e) for e in entries]

    def _match_sessions(self, ref: str, like: str) -> list[SessionInfo]:
        db = self._open()
        with db.lock:
            found = [
                e for e in db.sessions.values() if e.info.id == ref or e.info.id.startswith(ref)
            ]
            found.sort(key=lambda e: e.order)
            return [self._listed(e) for e in found[:3]]

    # -- append -----------------------------------------------------------------------------------

    def _commit(self, batch: list[PendingAppend]) -> None:
        try:
            db = self._open()
            with db.lock:
                for p in batch:
                    try:
                        p.result = self._apply(self._session(p.req.session), p.req)
                    except BubuError as e:
                        p.error = e
                    p.done = True
        except BubuError as e:
            for p in batch:
                if not p.done:
                    p.error, p.done = e, True

    def _apply(self, entry: _Session, req: AppendRequest) -> Appended:
        """Check and stage the whole request, then add it: all of it or (raising) nothing."""
        if req.lease is not None and (entry.lease is None or entry.lease.epoch != req.lease.epoch):
            current = None if entry.lease is None else entry.lease.epoch
            raise LeaseLost(
                f"this runner's lease on session {req.session} was taken over "
                f"(epoch {req.lease.epoch}, now {current}); it stopped writing"
            )
        seq, prev = entry.head()
        if seq != req.expect:
            raise AppendConflict(req.session, req.expect, seq)
        chained = chain(req, seq, prev)
        for data in req.blobs:
            self.db.blobs.setdefault(codec.sha256_hex(data), bytes(data))
        entry.rows.extend((c.seq, c.kind, c.payload, c.digest) for c in chained)
        if chained:
            entry.last_ms = req.events[-1].ts
            seq, prev = chained[-1].seq, chained[-1].digest
        return Appended(high_water=seq, digest=prev.hex(), records=tuple(c.record for c in chained))

    # -- reads ------------------------------------------------------------------------------------

    def head(self, session: str) -> Head:
        with self._open().lock:
            seq, digest = self._session(session).head()
        return Head(high_water=seq, digest=digest.hex())

    def _rows(
        self, session: str, after: int, upto: int | None, kinds: Iterable[str] | None
    ) -> list[Row]:
        wanted = None if kinds is None else frozenset(kinds)
        with self._open().lock:
            rows = self._session(session).rows
            # Seqs are gapless from 1, so a seq range is a slice.
            window = rows[after : len(rows) if upto is None else max(after, upto)]
        return window if wanted is None else [r for r in window if r[1] in wanted]

    def read(
        self,
        session: str,
        *,
        after: int = 0,
        upto: int | None = None,
        kinds: Iterable[str] | None = None,
    ) -> list[Record]:
        decode = codec.decode
        return [
            Record(seq=s, hash=h.hex(), event=decode(p, seq=s))
            for s, _, p, h in self._rows(session, after, upto, kinds)
        ]

    def raw(
        self, session: str, *, after: int = 0, upto: int | None = None
    ) -> list[tuple[int, bytes, bytes]]:
        """(seq, hash, canonical payload) rows, undecoded, for export and verification."""
        return [(s, h, p) for s, _, p, h in self._rows(session, after, upto, None)]

    def verify(self, session: str) -> VerifyReport:
        rows = self.raw(session)
        refs: dict[str, bool] = {}
        for _, _, payload in rows:
            for sha in verify_blob_refs(payload) if b'"blob":' in payload else ():
                data = self.blob(sha)
                refs[sha] = data is not None and codec.sha256_hex(data) == sha
        return verify_snapshots(
            verify_views(
                verify_records(session, rows, refs), rows, lambda key: self._cached(session, key)
            ),
            rows,
            self._object_rows,
        )

    def _cached(self, session: str, key: str) -> tuple[str, bytes] | None:
        view = self.get_view(CHECKPOINT_VIEW, session, key)
        return None if view is None else (view.source_digest, view.data)

    # -- blobs ------------------------------------------------------------------------------------

    def blob(self, sha256: str) -> bytes | None:
        with self._open().lock:
            return self.db.blobs.get(sha256)

    # -- workspace objects -------------------------------------------------------------------------

    def _put_objects(self, rows: Sequence[tuple[str, int, bytes]]) -> None:
        with self._open().lock:
            for sha, size, data in rows:
                self.db.objects.setdefault(sha, (size, bytes(data)))

    def missing_objects(self, shas: Iterable[str]) -> set[str]:
        with self._open().lock:
            return {s for s in shas if s not in self.db.objects}

    def _object_rows(self, shas: Sequence[str]) -> dict[str, tuple[int, bytes]]:
        with self._open().lock:
            return {s: self.db.objects[s] for s in shas if s in self.db.objects}

    # -- leases -----------------------------------------------------------------------------------

    def acquire_lease(
        self,
        session: str,
        owner: str,
        ttl_s: float,
        *,
        steal: bool = False,
        steal_epoch: int | None = None,
    ) -> Lease:
        now = clock.now_ms()
        with self._open().lock:
            entry = self._session(session)
            held, epoch = entry.lease, 0
            if held is not None:
                epoch = held.epoch
                stealable = steal and steal_epoch in (None, epoch)
                if held.owner and held.expires_ms > now and held.owner != owner and not stealable:
                    raise LeaseError(
                        f"session {session} is being run by {held.owner}; wait for it to "
                        "finish or stop it first"
                    )
            entry.lease = Lease(
                session=session, owner=owner, epoch=epoch + 1, expires_ms=now + int(ttl_s * 1000)
            )
            return entry.lease

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        expires = clock.now_ms() + int(ttl_s * 1000)
        with self._open().lock:
            entry = self._session(lease.session)
            held = entry.lease
            if held is None or (held.epoch, held.owner) != (lease.epoch, lease.owner):
                raise LeaseLost(
                    f"the lease on session {lease.session} was taken over by another runner"
                )
            entry.lease = Lease(
                session=held.session,
                owner=held.owner,
                epoch=held.epoch,
                expires_ms=expires,
                stop_requested=held.stop_requested,
            )
        return Lease(
            session=lease.session, owner=lease.owner, epoch=lease.epoch, expires_ms=expires
        )

    def release_lease(self, lease: Lease) -> None:
        with self._open().lock:
            entry = self._session(lease.session)
            held = entry.lease
            if held is not None and (held.epoch, held.owner) == (lease.epoch, lease.owner):
                entry.lease = Lease(
                    session=held.session,
                    owner="",
                    epoch=held.epoch,
                    expires_ms=0,
                    stop_requested=held.stop_requested,
                )

    def current_lease(self, session: str) -> Lease | None:
        with self._open().lock:
            return self._session(session).lease

    def request_stop(self, session: str) -> Lease | None:
        with self._open().lock:
            entry = self._session(session)
            held = entry.lease
            if held is None or not held.owner or held.expires_ms <= clock.now_ms():
                return None
            entry.lease = Lease(
                session=held.session,
                owner=held.owner,
                epoch=held.epoch,
                expires_ms=held.expires_ms,
                stop_requested=True,
            )
            return entry.lease

    # -- views ------------------------------------------------------------------------------------

    def put_view(self, view: View) -> None:
        stored = View(
            kind=view.kind,
            session=view.session,
            key=view.key,
            source_high_water=view.source_high_water,
            source_digest=view.source_digest,
            data=bytes(view.data),
            created_ms=view.created_ms or clock.now_ms(),
        )
        with self._open().lock:
            self.db.views[(view.kind, view.session, view.key)] = stored

    def get_view(self, kind: str, session: str, key: str) -> View | None:
        with self._open().lock:
            return self.db.views.get((kind, session, key))

    def drop_views(self, session: str, kind: str | None = None) -> int:
        with self._open().lock:
            doomed = [
                k for k in self.db.views if k[1] == session and (kind is None or k[0] == kind)
            ]
            for k in doomed:
                del self.db.views[k]
            return len(doomed)

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        """Close this handle (the data stays for the other handles on it)."""
        self._closed = True
