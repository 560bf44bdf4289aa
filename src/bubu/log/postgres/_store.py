"""PostgresStore: the store contract on one schema of a PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from bubu.errors import AppendConflict, BubuError, LeaseLost, StorageError, UnknownSession
from bubu.events import Event, Record
from bubu.log import codec
from bubu.log.postgres import _leases
from bubu.log.postgres._connect import Connection, Row, Target, pg_error
from bubu.log.postgres._notify import Listener, channel
from bubu.log.postgres._schema import NOW_MS_SQL, integrity_problems, migrate
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

RawRow = tuple[int, bytes, bytes]


@dataclass(slots=True, kw_only=True)
class _Tip:
    """A session's head, locked for the batch being staged."""

    sid: int
    high_water: int
    digest: bytes


@dataclass(slots=True, kw_only=True)
class _Staged:
    """The rows one group commit inserts, as columns for `unnest`."""

    sids: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)
    last_ms: dict[int, int] = field(default_factory=dict)


class PostgresStore(Store):
    """A `Store` in one schema (default `bubu`, or `?schema=NAME` in the URL) of PostgreSQL."""

    def __init__(
        self, url: str, *, schema: str | None = None, durability: Durability = "adaptive"
    ) -> None:
        self.url = url
        self.target = Target.parse(url, schema)
        self.schema = self.target.schema
        self.durability = durability
        self._init_group_commit()
        self._db: Connection | None = None
        self._listener: Listener | None = None
        try:
            with self._using() as db:
                migrate(db, self.schema, self.target.where)
        except BaseException:  # undone, then re-raised: Ctrl-C and exits too
            self.close()
            raise

    # -- connection -------------------------------------------------------------------------------

    def _conn(self) -> Connection:
        """The live connection, reconnecting after a lost one (the caller holds `_lock`)."""
        if self._db is None or self._db.closed or self._db.broken:
            self._db = self.target.connect()
        return self._db

    @contextmanager
    def _using(self) -> Iterator[Connection]:
        """The connection, held exclusively; psycopg errors leave as Bubu errors."""
        with self._lock:
            try:
                yield self._conn()
            except psycopg.Error as e:
                raise pg_error(self.target.where, e) from e

    def migrations(self) -> list[tuple[int, str]]:
        """The migrations recorded in this schema, in order."""
        with self._using() as db:
            rows = db.execute("SELECT version, name FROM bubu_migrations ORDER BY version")
            return [(int(r[0]), str(r[1])) for r in rows]

    def now_ms(self) -> int:
        """The database server's clock in Unix milliseconds (the clock leases are timed by)."""
        with self._using() as db:
            row = db.execute(f"SELECT {NOW_MS_SQL}").fetchone()
        assert row is not None
        return int(row[0])

    def drop_schema(self) -> None:
        """Drop this store's schema and everything in it (for tests), then close."""
        with self._using() as db:
            db.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
            )
        self.close()

    def integrity_check(self) -> str:
        """'ok' when the rule-enforcing triggers are in place and every head row matches its log."""
        with self._using() as db:
            return "; ".join(integrity_problems(db, self.schema)) or "ok"

    def wait_appended(self, session: str, seen: int, timeout: float) -> int:
        """Wait up to `timeout` seconds for an append to `session` announced after `seen` (the
        count this returned last; 0 at first); returns the new count, or -1 when appends cannot
        be listened for (poll instead)."""
        with self._lock:
            if self._listener is None:
                self._listener = Listener(self.target)
            listener = self._listener
        return listener.wait(session, seen, timeout)

    def close(self) -> None:
        with self._lock:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            if self._db is not None:
                self._db.close()
                self._db = None

    # -- sessions ---------------------------------------------------------------------------------

    def _unknown(self, session: str) -> UnknownSession:
        return UnknownSession(
            f"no session {session} in {self.target.where}; list them with `bubu sessions`"
        )

    def _sid(self, db: Connection, session: str, *, lock: bool = False) -> int:
        query = "SELECT sid FROM sessions WHERE id = %s" + (" FOR NO KEY UPDATE" if lock else "")
        row = db.execute(query, [session]).fetchone()
        if row is None:
            raise self._unknown(session)
        return int(row[0])

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
        from bubu import ids

        sid = session_id or ids.session_id()
        with self._using() as db:
            try:
                with db.transaction():
                    row = db.execute(
                        "INSERT INTO sessions(id, title, workspace, model, created_ms) "
                        f"VALUES (%s, %s, %s, %s, {NOW_MS_SQL}) RETURNING created_ms",
                        [sid, codec.sanitize_text(title), workspace, model],
                    ).fetchone()
                    if events:
                        first = PendingAppend(
                            AppendRequest(
                                session=sid,
                                events=events,
                                expect=0,
                                durable=True,
                                lease=None,
                                blobs=blobs,
                            )
                        )
                        self._apply(db, [first])
                        if first.error is not None:
                            raise first.error  # rolls the session back with its events
            except psycopg.errors.UniqueViolation as e:
                raise StorageError(f"a session {sid} already exists") from e
        assert row is not None
        return SessionInfo(
            id=sid,
            title=title,
            workspace=workspace,
            created_ms=int(row[0]),
            model=model,
            high_water=len(events),
            last_ms=None,
        )

    _SESSION_SQL = (
        "SELECT id, title, workspace, created_ms, model, high_water, last_ms FROM sessions"
    )

    @staticmethod
    def _info(row: Row) -> SessionInfo:
        sid, title, workspace, created, model, high_water, last = row[:7]
        return SessionInfo(
            id=str(sid),
            title=str(title),
            workspace=str(workspace),
            created_ms=int(created),
            model=None if model is None else str(model),
            high_water=int(high_water),
            last_ms=None if last is None else int(last),
        )

    def sessions(self) -> list[SessionInfo]:
        with self._using() as db:
            rows = db.execute(self._SESSION_SQL + " ORDER BY created_ms DESC, sid DESC").fetchall()
        return [self._info(r) for r in rows]

    def _match_sessions(self, ref: str, like: str) -> list[SessionInfo]:
        with self._using() as db:
            rows = db.execute(
                self._SESSION_SQL + " WHERE id = %s OR id LIKE %s ESCAPE '\\' LIMIT 3", [ref, like]
            ).fetchall()
        return [self._info(r) for r in rows]

    # -- append (group commit) --------------------------------------------------------------------

    def _commit(self, batch: list[PendingAppend]) -> None:
        sync = self.durability == "full" or any(p.req.durable for p in batch)
        committed = False
        failure: BubuError | None = None
        try:
            # Pipelined: the statements before the head rows are read, and those after, each go
            # to the server in one round trip.
            with self._using() as db, db.pipeline(), db.transaction():
                if not sync:
                    # A later synchronous commit flushes this one too (DESIGN §7, adaptive).
                    db.execute("SET LOCAL synchronous_commit TO off")
                self._apply(db, batch)
            committed = True
        except BubuError as e:
            failure = e
        finally:
            for p in batch:
                if not committed:
                    # Nothing of the batch is in the log, whatever was staged.
                    p.result = None
                    p.error = (
                        failure
                        or p.error
                        or StorageError(
                            f"an append to session {p.req.session} was interrupted; re-read the log"
                        )
                    )
                p.done = True

    def _apply(self, db: Connection, batch: list[PendingAppend]) -> None:
        # Lock every head row of the batch in sid order: two group commits never deadlock.
        names = sorted({p.req.session for p in batch})
        heads = db.execute(
            "SELECT id, sid, high_water, head FROM sessions WHERE id = ANY(%s) "
            "ORDER BY sid FOR NO KEY UPDATE",
            [names],
        )
        # A statement after the locks, so it sees a lease taken over while we waited for them.
        fenced = any(p.req.lease is not None for p in batch)
        leases = _leases.epochs_of(db, names) if fenced else None
        tips = {
            str(r[0]): _Tip(sid=int(r[1]), high_water=int(r[2]), digest=bytes(r[3]))
            for r in heads.fetchall()
        }
        epochs = {int(r[0]): int(r[1]) for r in leases.fetchall()} if leases is not None else {}
        staged = _Staged()
        for p in batch:
            try:
                p.result = self._stage(p.req, tips, epochs, staged)
            except BubuError as e:
                p.error = e
        if staged.blobs:
            data = [*staged.blobs.values()]
            db.execute(
                "INSERT INTO blobs(sha256, size, data) SELECT * FROM "
                "unnest(%s::text[], %s::bigint[], %s::bytea[]) ON CONFLICT (sha256) DO NOTHING",
                [list(staged.blobs), [len(b) for b in data], data],
            )
        if staged.seqs:
            # One statement, so the chain trigger checks the whole batch in one pass.
            db.execute(
                "INSERT INTO events(sid, seq, kind, payload, hash) SELECT * FROM "
                "unnest(%s::bigint[], %s::bigint[], %s::text[], %s::bytea[], %s::bytea[])",
                [staged.sids, staged.seqs, staged.kinds, staged.payloads, staged.hashes],
            )
        if staged.last_ms:
            db.execute(
                "UPDATE sessions SET last_ms = v.ms FROM unnest(%s::bigint[], %s::bigint[]) "
                "AS v(sid, ms) WHERE sessions.sid = v.sid",
                [list(staged.last_ms), list(staged.last_ms.values())],
            )
        if staged.seqs:
            # Delivered at commit, to whoever follows these sessions (`wait_appended`).
            done = sorted(
                {p.req.session for p in batch if p.result is not None and p.result.records}
            )
            db.execute(
                "SELECT pg_notify(%s, s) FROM unnest(%s::text[]) AS s",
                [channel(self.schema), done],
            )

    def _stage(
        self, req: AppendRequest, tips: dict[str, _Tip], epochs: dict[int, int], out: _Staged
    ) -> Appended:
        tip = tips.get(req.session)
        if tip is None:
            raise self._unknown(req.session)
        if req.lease is not None and epochs.get(tip.sid) != req.lease.epoch:
            raise LeaseLost(
                f"this runner's lease on session {req.session} was taken over "
                f"(epoch {req.lease.epoch}, now {epochs.get(tip.sid)}); it stopped writing"
            )
        if tip.high_water != req.expect:
            raise AppendConflict(req.session, req.expect, tip.high_water)
        seq, prev = tip.high_water, tip.digest
        chained = chain(req, seq, prev)
        rows = [(c.seq, c.kind, c.payload, c.digest) for c in chained]
        records = [c.record for c in chained]
        last_ts = req.events[-1].ts if chained else None
        if chained:
            seq, prev = chained[-1].seq, chained[-1].digest
        # Only a request that staged completely contributes rows to the batch.
        for data in req.blobs:
            out.blobs.setdefault(codec.sha256_hex(data), bytes(data))
        for s, kind, payload, digest in rows:
            out.sids.append(tip.sid)
            out.seqs.append(s)
            out.kinds.append(kind)
            out.payloads.append(payload)
            out.hashes.append(digest)
        if last_ts is not None:
            out.last_ms[tip.sid] = last_ts
        tip.high_water, tip.digest = seq, prev
        return Appended(high_water=seq, digest=prev.hex(), records=tuple(records))

    # -- reads ------------------------------------------------------------------------------------

    def head(self, session: str) -> Head:
        with self._using() as db:
            row = db.execute("SELECT high_water, head FROM sessions WHERE id = %s", [session])
            found = row.fetchone()
        if found is None:
            raise self._unknown(session)
        return Head(high_water=int(found[0]), digest=bytes(found[1]).hex())

    def _rows(
        self, session: str, after: int, upto: int | None, kinds: Iterable[str] | None
    ) -> list[RawRow]:
        with self._using() as db:
            query = (
                "SELECT seq, hash, payload FROM events "
                "WHERE sid = (SELECT sid FROM sessions WHERE id = %s) AND seq > %s"
            )
            args: list[object] = [session, after]
            if upto is not None:
                query += " AND seq <= %s"
                args.append(upto)
            if kinds is not None:
                query += " AND kind = ANY(%s)"
                args.append(list(kinds))
            rows = db.execute(query + " ORDER BY seq", args, binary=True).fetchall()
            if not rows:
                self._sid(db, session)  # nothing new, or no such session
        return [(int(s), bytes(h), bytes(p)) for s, h, p in rows]

    def read(
        self,
        session: str,
        *,
        after: int = 0,
        upto: int | None = None,
        kinds: Iterable[str] | None = None,
    ) -> list[Record]:
        rows = self._rows(session, after, upto, kinds)
        decode = codec.decode
        return [Record(seq=s, hash=h.hex(), event=decode(p, seq=s)) for s, h, p in rows]

    def raw(self, session: str, *, after: int = 0, upto: int | None = None) -> list[RawRow]:
        """(seq, hash, canonical payload) rows, undecoded, for export and verification."""
        return self._rows(session, after, upto, None)

    def verify(self, session: str) -> VerifyReport:
        # One snapshot, so the head row and the events agree even while others append.
        with self._using() as db, db.transaction():
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            head = self.head(session)
            rows = self._rows(session, 0, None, None)
            blobs_ok = self._blob_check(db, rows)
        report = verify_snapshots(
            verify_views(
                verify_records(session, rows, blobs_ok),
                rows,
                lambda key: self._cached(session, key),
            ),
            rows,
            self._object_rows,
        )
        if report.ok and (report.high_water, report.digest) != (head.high_water, head.digest):
            return VerifyReport(
                session=session,
                ok=False,
                high_water=report.high_water,
                digest=report.digest,
                first_bad_seq=min(report.high_water, head.high_water) + 1,
                problem=f"the session's head row (seq {head.high_water}) disagrees with its "
                f"events (seq {report.high_water}); the database was altered",
            )
        return report

    @staticmethod
    def _blob_check(db: Connection, rows: list[RawRow]) -> dict[str, bool]:
        """For each blob hash referenced by these rows: does the stored blob hash to it?"""
        wanted: set[str] = set()
        for _, _, payload in rows:
            if b'"blob":' in payload:
                wanted.update(verify_blob_refs(payload))
        out = dict.fromkeys(wanted, False)
        if wanted:
            for sha, ok in db.execute(
                "SELECT sha256, encode(sha256(data), 'hex') = sha256 FROM blobs "
                "WHERE sha256 = ANY(%s)",
                [sorted(wanted)],
            ):
                out[str(sha)] = bool(ok)
        return out

    def vouched_approvals(self, session: str) -> frozenset[int] | None:
        """The seqs of the session's approvals that the `approvals` table holds (see _schema)."""
        with self._using() as db:
            rows = db.execute(
                "SELECT a.seq FROM approvals a JOIN sessions s ON s.sid = a.sid WHERE s.id = %s",
                [session],
            ).fetchall()
        return frozenset(int(r[0]) for r in rows)

    def blob(self, sha256: str) -> bytes | None:
        with self._using() as db:
            row = db.execute(
                "SELECT data FROM blobs WHERE sha256 = %s", [sha256], binary=True
            ).fetchone()
        return None if row is None else bytes(row[0])

    # -- workspace objects -------------------------------------------------------------------------

    def _put_objects(self, rows: Sequence[tuple[str, int, bytes]]) -> None:
        with self._using() as db, db.transaction():
            db.execute(
                "INSERT INTO objects(sha256, size, data) SELECT * FROM "
                "unnest(%s::text[], %s::bigint[], %s::bytea[]) ON CONFLICT (sha256) DO NOTHING",
                [[r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]],
            )

    def missing_objects(self, shas: Iterable[str]) -> set[str]:
        want = set(shas)
        if not want:
            return set()
        with self._using() as db:
            held = {
                str(r[0])
                for r in db.execute(
                    "SELECT sha256 FROM objects WHERE sha256 = ANY(%s)", [sorted(want)]
                )
            }
        return want - held

    def _object_rows(self, shas: Sequence[str]) -> dict[str, tuple[int, bytes]]:
        with self._using() as db:
            rows = db.execute(
                "SELECT sha256, size, data FROM objects WHERE sha256 = ANY(%s)",
                [list(shas)],
                binary=True,
            ).fetchall()
        return {str(r[0]): (int(r[1]), bytes(r[2])) for r in rows}

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
        with self._using() as db, db.transaction():
            # The head row lock orders this against in-flight appends (see _leases).
            sid = self._sid(db, session, lock=True)
            return _leases.acquire(
                db, sid, session, owner, int(ttl_s * 1000), steal=steal, steal_epoch=steal_epoch
            )

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        with self._using() as db:
            return _leases.renew(db, self._sid(db, lease.session), lease, int(ttl_s * 1000))

    def release_lease(self, lease: Lease) -> None:
        with self._using() as db:
            _leases.release(db, self._sid(db, lease.session), lease)

    def current_lease(self, session: str) -> Lease | None:
        with self._using() as db:
            return _leases.current(db, self._sid(db, session), session)

    def request_stop(self, session: str) -> Lease | None:
        with self._using() as db:
            return _leases.request_stop(db, self._sid(db, session), session)

    def _cached(self, session: str, key: str) -> tuple[str, bytes] | None:
        view = self.get_view(CHECKPOINT_VIEW, session, key)
        return None if view is None else (view.source_digest, view.data)

    # -- views ------------------------------------------------------------------------------------

    def put_view(self, view: View) -> None:
        with self._using() as db:
            db.execute(
                "INSERT INTO views(kind, session, key, source_hw, source_digest, data, created_ms) "
                f"VALUES (%s, %s, %s, %s, %s, %s, coalesce(%s, {NOW_MS_SQL})) "
                "ON CONFLICT (kind, session, key) DO UPDATE SET source_hw = excluded.source_hw, "
                "source_digest = excluded.source_digest, data = excluded.data, "
                "created_ms = excluded.created_ms",
                [
                    *(view.kind, view.session, view.key),
                    *(view.source_high_water, view.source_digest, view.data),
                    view.created_ms or None,
                ],
            )

    def get_view(self, kind: str, session: str, key: str) -> View | None:
        with self._using() as db:
            row = db.execute(
                "SELECT source_hw, source_digest, data, created_ms FROM views "
                "WHERE kind = %s AND session = %s AND key = %s",
                [kind, session, key],
            ).fetchone()
        if row is None:
            return None
        return View(
            kind=kind,
            session=session,
            key=key,
            source_high_water=int(row[0]),
            source_digest=str(row[1]),
            data=bytes(row[2]),
            created_ms=int(row[3]),
        )

    def drop_views(self, session: str, kind: str | None = None) -> int:
        with self._using() as db:
            return db.execute(
                "DELETE FROM views WHERE session = %s AND (%s::text IS NULL OR kind = %s)",
                [session, kind, kind],
            ).rowcount
