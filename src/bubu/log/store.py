"""The store contract: what every log backend (SQLite, PostgreSQL) promises.

A store holds sessions, their append-only event logs (gapless per-session `seq`, a sha-256 hash
chain over the canonical bytes), content-addressed blobs, leases that fence writers, and derived
views that can be dropped and rebuilt. One contract test suite runs against every backend.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, Self

import msgspec

from bubu import clock
from bubu.errors import UnknownSession
from bubu.events import Event, Record, kind_of
from bubu.log import codec
from bubu.log import objects as _objects

Durability = Literal["adaptive", "full"]
"""`adaptive`: appends marked durable are fully synced, others ride on the next synced commit.
`full`: every append is fully synced."""


class Head(msgspec.Struct, frozen=True, kw_only=True):
    """A session's high-water and the chain digest at it (the name of a prefix).

    (A Struct rather than a dataclass: every append returns one, and it builds in a quarter of the
    time.)"""

    high_water: int
    digest: str


class Appended(Head, frozen=True, kw_only=True):
    """What an append committed: the new head and the records it wrote, in seq order (the events
    as stored, secrets redacted, with their seq and chain hash), so that a writer folds what it
    just committed without reading it back."""

    records: tuple[Record, ...] = ()

    @property
    def head(self) -> Head:
        """The head alone (comparable with `Store.head`)."""
        return Head(high_water=self.high_water, digest=self.digest)


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A row of the sessions table, plus the head of its log."""

    id: str
    title: str
    workspace: str
    created_ms: int
    model: str | None
    high_water: int
    last_ms: int | None


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    """The right to append to a session, fenced by `epoch`.

    `stop_requested`: someone asked the holder of this epoch to stop (`Store.request_stop`); a
    new epoch starts without it."""

    session: str
    owner: str
    epoch: int
    expires_ms: int
    stop_requested: bool = False


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of recomputing one session's chain."""

    session: str
    ok: bool
    high_water: int
    digest: str
    first_bad_seq: int | None = None
    problem: str | None = None


class View(msgspec.Struct, frozen=True, kw_only=True):
    """A derived, rebuildable record built from the log prefix `1..source_high_water`."""

    kind: str
    session: str
    key: str
    source_high_water: int
    source_digest: str
    data: bytes
    created_ms: int = 0


class AppendRequest(msgspec.Struct, kw_only=True):
    """One append, as queued for group commit."""

    session: str
    events: Sequence[Event]
    expect: int
    durable: bool
    lease: Lease | None
    blobs: Sequence[bytes] = msgspec.field(default_factory=tuple)
    payloads: Sequence[bytes] | None = None
    """The canonical bytes of `events`, one for one, when the caller has them already."""


class Chained(msgspec.Struct, frozen=True):
    """One event of an append, encoded and chained: the row a backend stores, and its record."""

    seq: int
    kind: str
    payload: bytes
    """The canonical bytes (the chain is over them)."""
    digest: bytes
    record: Record


def chain(req: AppendRequest, seq: int, prev: bytes) -> list[Chained]:
    """The events of `req` encoded, numbered after `seq` and chained after the digest `prev`.

    The records are what a reader will decode (canonical key order), not the objects given: a
    fold of them must equal a fold of the log read back."""
    out: list[Chained] = []
    encoded = req.payloads
    for i, ev in enumerate(req.events):
        if ev.session != req.session:
            raise codec.InvalidEvent(
                f"an event of session {ev.session} cannot be appended to session {req.session}"
            )
        payload = codec.encode(ev) if encoded is None else encoded[i]
        prev = codec.chain(prev, payload)
        seq += 1
        record = Record(seq=seq, hash=prev.hex(), event=codec.decode(payload))
        out.append(Chained(seq, kind_of(ev), payload, prev, record))
    return out


class PendingAppend:
    """An append waiting in the group-commit queue, and what became of it."""

    __slots__ = ("done", "error", "req", "result")

    def __init__(self, req: AppendRequest) -> None:
        self.req = req
        self.done = False
        self.result: Appended | None = None
        self.error: BaseException | None = None


class Store(abc.ABC):
    """The contract every log backend implements.

    `append` is shared: concurrent appends of one process are group-committed — whoever takes the
    connection first commits everything queued by then in one transaction (`_commit`), and each
    caller gets its own result or error.
    """

    url: str

    def _init_group_commit(self) -> None:
        """Set up the queue and locks `append` uses (call from the backend's __init__)."""
        self._lock = threading.RLock()
        self._queue: list[PendingAppend] = []
        self._qlock = threading.Lock()

    @abc.abstractmethod
    def _commit(self, batch: list[PendingAppend]) -> None:
        """Commit a batch in one transaction, setting each item's result or error and `done`."""

    # -- sessions -------------------------------------------------------------------------------

    def create_session(
        self,
        *,
        title: str,
        workspace: str,
        model: str | None = None,
        session_id: str | None = None,
        events: Sequence[Event] = (),
        blobs: Sequence[bytes] = (),
    ) -> SessionInfo:
        """Create a session and return it. `events` (with their `blobs`) become its first events
        in the same transaction, fully synced: the session appears complete or not at all.
        Secret values in the title, the events and the blobs are redacted first."""
        from bubu.log import redact  # its patterns compile on first use: a reader needs none

        events, blobs = redact.scrub(events, blobs)
        return self._create_session(
            title=redact.text(title),
            workspace=workspace,
            model=model,
            session_id=session_id,
            events=events,
            blobs=blobs,
        )

    def create_session_in_chunks(
        self,
        *,
        title: str,
        workspace: str,
        model: str | None,
        session_id: str,
        chunks: Iterable[Sequence[Event]],
        blobs: Sequence[bytes] = (),
    ) -> SessionInfo:
        """`create_session` with the events given in chunks (an import), still one transaction.
        This default gathers them first; a store that can holds only one chunk at a time."""
        events = [ev for chunk in chunks for ev in chunk]
        return self.create_session(
            title=title,
            workspace=workspace,
            model=model,
            session_id=session_id,
            events=events,
            blobs=blobs,
        )

    @abc.abstractmethod
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
        """`create_session`, with the secrets already redacted."""

    @abc.abstractmethod
    def sessions(self) -> list[SessionInfo]:
        """Every session, newest first."""

    def session(self, ref: str) -> SessionInfo:
        """The session with id `ref`, or the only one whose id starts with `ref`."""
        like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self._match_sessions(ref, like)
        exact = [r for r in rows if r.id == ref]
        if exact:
            return exact[0]
        if len(rows) == 1 and ref:
            return rows[0]
        if not rows:
            raise UnknownSession(f"no session matches {ref!r}; list them with `bubu sessions`")
        raise UnknownSession(f"{ref!r} matches several sessions; give more of the id")

    @abc.abstractmethod
    def _match_sessions(self, ref: str, like: str) -> list[SessionInfo]:
        """Up to 3 sessions whose id is `ref` or matches the LIKE pattern `like` (escape '\\')."""

    # -- the log ----------------------------------------------------------------------------------

    def append(
        self,
        session: str,
        events: Sequence[Event],
        *,
        expect: int,
        durable: bool = False,
        lease: Lease | None = None,
        blobs: Sequence[bytes] = (),
    ) -> Appended:
        """Append `events` in one transaction after high-water `expect`; returns the new head and
        the committed records.

        Raises AppendConflict when the head is not `expect`, LeaseLost when `lease` is no longer
        the session's current lease. `blobs` are stored (content-addressed) in the same transaction.
        `durable` asks for a full sync before returning. Secret values are redacted first
        (`bubu.log.redact`), so the chain is computed over the redacted bytes.
        """
        from bubu.log import redact  # its patterns compile on first use: a reader needs none

        events, blobs, payloads = redact.scrub_encoded(events, blobs)
        return self._append(
            session,
            events,
            expect=expect,
            durable=durable,
            lease=lease,
            blobs=blobs,
            payloads=payloads,
        )

    def _append(
        self,
        session: str,
        events: Sequence[Event],
        *,
        expect: int,
        durable: bool,
        lease: Lease | None,
        blobs: Sequence[bytes],
        payloads: Sequence[bytes] | None = None,
    ) -> Appended:
        """`append` with the secrets already redacted (and `payloads`, when given, the canonical
        bytes of `events`): group-committed with whatever else is queued (a backend may override
        it with a faster path)."""
        pending = PendingAppend(
            AppendRequest(
                session=session,
                events=events,
                expect=expect,
                durable=durable,
                lease=lease,
                blobs=blobs,
                payloads=payloads,
            )
        )
        with self._qlock:
            self._queue.append(pending)
        with self._lock:
            if not pending.done:
                with self._qlock:
                    batch, self._queue = self._queue, []
                self._commit(batch)
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    @abc.abstractmethod
    def head(self, session: str) -> Head:
        """The session's high-water and digest."""

    @abc.abstractmethod
    def read(
        self,
        session: str,
        *,
        after: int = 0,
        upto: int | None = None,
        kinds: Iterable[str] | None = None,
    ) -> list[Record]:
        """Records with `after < seq <= upto` in seq order, optionally only of the given kinds."""

    @abc.abstractmethod
    def raw(
        self, session: str, *, after: int = 0, upto: int | None = None
    ) -> list[tuple[int, bytes, bytes]]:
        """(seq, hash, canonical payload) rows, undecoded, for export and verification."""

    @abc.abstractmethod
    def verify(self, session: str) -> VerifyReport:
        """Recompute the chain (and blob hashes) and report the first bad seq."""

    def vouched_approvals(self, session: str) -> frozenset[int] | None:
        """The seqs of the session's `task_approved` events that the database vouches a role
        allowed to approve appended; None where the store trusts whoever can write it (a file of
        your own)."""
        del session
        return None

    # -- blobs ------------------------------------------------------------------------------------

    @abc.abstractmethod
    def blob(self, sha256: str) -> bytes | None:
        """The bytes stored under `sha256`, or None."""

    # -- workspace objects -------------------------------------------------------------------------

    def put_objects(
        self, objects: Mapping[str, bytes], bases: Mapping[str, str] | None = None
    ) -> None:
        """Store snapshot objects (file contents, trees), each named by the sha-256 of its bytes,
        compressed, in one transaction of their own. Storing one already held is a no-op. A
        snapshot's objects are committed before the event that names its tree. `bases` names, per
        object, its previous version (the same file or directory in an earlier snapshot): the
        object is stored as a delta against it (or against what it is a delta of) when smaller."""
        wanted = {bases[sha] for sha in objects if bases and sha in bases}
        found = self._delta_bases(wanted) if wanted else {}
        rows = []
        for sha, data in objects.items():
            base = found.get(bases[sha]) if bases and sha in bases else None
            rows.append(_objects.pack(data, sha, base))
        if rows:
            self._put_objects(rows)
            self._bases_cache().remember(rows, objects)

    def _bases_cache(self) -> _objects.BaseCache:
        cache = self.__dict__.get("_base_cache")
        if cache is None:
            cache = self.__dict__["_base_cache"] = _objects.BaseCache()
        return cache

    def _delta_bases(self, shas: set[str]) -> dict[str, tuple[str, bytes]]:
        """Per object of `shas` the store holds, the whole object a new version of it is stored
        against: itself when it is stored whole, else the object it is a delta of (two reads of
        the table at most, whatever the count; none for those this process stored lately)."""
        out = self._bases_cache().find(shas)
        shas = shas - out.keys()
        if not shas:
            return out
        rows = self._object_rows(sorted(shas))
        names = {sha: _objects.base_of(row[1]) or sha for sha, row in rows.items()}
        more = sorted(set(names.values()) - rows.keys())
        if more:
            rows.update(self._object_rows(more))
        for sha, name in names.items():
            row = rows.get(name)
            data = None if row is None else _objects.unpack(row[1], row[0])
            if data is not None and codec.sha256_hex(data) == name:
                out[sha] = (name, data)
                self._bases_cache().keep(sha, name, data)
        return out

    def _whole(self, sha: str, depth: int = 0) -> bytes | None:
        """The bytes of a delta's base, or None. A base is stored whole, unless two processes
        stored it at once, one as a delta: so a short chain is read too."""
        row = self._object_rows([sha]).get(sha)
        if row is None:
            return None
        more = None if depth >= _objects.MAX_CHAIN else lambda s: self._whole(s, depth + 1)
        data = _objects.unpack(row[1], row[0], more)
        return data if data is not None and codec.sha256_hex(data) == sha else None

    @abc.abstractmethod
    def _put_objects(self, rows: Sequence[tuple[str, int, bytes]]) -> None:
        """Insert (sha-256, size, stored bytes) rows, ignoring those already present."""

    @abc.abstractmethod
    def missing_objects(self, shas: Iterable[str]) -> set[str]:
        """Which of these objects the store does not hold."""

    def get_object(self, sha256: str) -> bytes | None:
        """The bytes of a snapshot object, or None when it is missing or damaged."""
        row = self._object_rows([sha256]).get(sha256)
        if row is None:
            return None
        data = _objects.unpack(row[1], row[0], self._whole)
        return data if data is not None and codec.sha256_hex(data) == sha256 else None

    @abc.abstractmethod
    def _object_rows(self, shas: Sequence[str]) -> dict[str, tuple[int, bytes]]:
        """The stored (size, compressed bytes) of these objects, where held."""

    # -- leases -----------------------------------------------------------------------------------

    @abc.abstractmethod
    def acquire_lease(
        self,
        session: str,
        owner: str,
        ttl_s: float,
        *,
        steal: bool = False,
        steal_epoch: int | None = None,
    ) -> Lease:
        """Take the session's lease (a new epoch). Raises LeaseError if another live owner holds it
        and `steal` is false. An expired lease is always taken over. With `steal_epoch`, a live
        lease is stolen only while its epoch is still that one (0: no lease yet), so a lease taken
        by someone else since the caller judged it dead is not."""

    @abc.abstractmethod
    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        """Extend a held lease; raises LeaseLost if it was taken over."""

    @abc.abstractmethod
    def release_lease(self, lease: Lease) -> None:
        """Give the lease up (if still held)."""

    @abc.abstractmethod
    def current_lease(self, session: str) -> Lease | None:
        """The lease row for the session, expired or not, if any."""

    @abc.abstractmethod
    def request_stop(self, session: str) -> Lease | None:
        """Ask the runner holding the session's live lease to stop its turn (it checks about every
        half second, then ends the turn `stopped`); the lease asked, or None when no live lease
        is held. The request belongs to that epoch only."""

    def now_ms(self) -> int:
        """The clock leases are timed by, in Unix milliseconds: this machine's for an embedded
        database, the server's for a shared one (so a machine whose clock is off never judges a
        live lease expired)."""
        return clock.now_ms()

    # -- derived views --------------------------------------------------------------------------

    @abc.abstractmethod
    def put_view(self, view: View) -> None:
        """Store (or replace) a derived view."""

    @abc.abstractmethod
    def get_view(self, kind: str, session: str, key: str) -> View | None:
        """A derived view, if stored."""

    @abc.abstractmethod
    def drop_views(self, session: str, kind: str | None = None) -> int:
        """Drop derived views of a session; returns how many."""

    # -- lifecycle --------------------------------------------------------------------------------

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
