"""The embedded SQLite log (WAL, immutable rows enforced by triggers, group commit)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from bubu import clock
from bubu.errors import (
    AppendConflict,
    BubuError,
    CorruptLog,
    LeaseError,
    LeaseLost,
    NewerLogError,
    StorageError,
    UnknownSession,
)
from bubu.events import Event, Record, kind_of
from bubu.log import codec, redact, sqliteopen
from bubu.log.migrations import (
    INDEXED_KINDS,
    LATE_INDEXED,
    SEQ_BITS,
    SQLITE_MIGRATIONS,
)
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

BUSY_TIMEOUT_MS = 5000

_HEAD_SQL = (
    "SELECT pos & 4294967295, hash FROM events WHERE pos > ? AND pos < ? ORDER BY pos DESC LIMIT 1"
)

_SEQ_MASK = (1 << SEQ_BITS) - 1
_INDEXED = frozenset(INDEXED_KINDS)
_INSERT_SQL = "INSERT INTO events(pos, kind, payload, hash) VALUES (?,?,?,?)"
# The lease check and the insert in one statement: no row is produced unless the epoch holds.
_INSERT_LEASED_SQL = (
    "INSERT INTO events(pos, kind, payload, hash) SELECT ?,?,?,? "
    "WHERE (SELECT epoch FROM leases WHERE sid = ?) = ?"
)


COMPRESS_OVER = 1024
"""An event payload longer than this (in canonical bytes) is stored as a zlib stream when that
saves at least an eighth of it; any other payload is stored as its canonical bytes."""
MAX_INFLATED = 128 << 20
"""No event's canonical bytes are longer (an import refuses a longer line): a stored stream that
inflates past it is treated as a damaged row, and never takes more memory than this."""
_ZLIB_FIRST = 0x78  # the first byte of every zlib stream (deflate, 32 KiB window); JSON starts "{"
_ZLIB_HEADER = b"\x78\x01"  # deflate, 32 KiB window, fastest level (RFC 1950)
_FINAL_BLOCK = b"\x03\x00"  # an empty final block, ending the stream after a full flush


class Packer:
    """Stores a large payload as one complete zlib stream of its canonical bytes.

    One compressor lives as long as the store: a full flush after each payload empties it (no
    match reaches back past it), so each stream stands alone and the compressor's buffers are not
    allocated and cleared again for every payload, which cost more than the compression itself.
    Level 1: a ~2 KB tool result shrinks about as much as at level 6, in less time; memory level
    5: the hash table, cleared at each flush, is 8 KiB (and results a few KB long pack as well)."""

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(1, zlib.DEFLATED, -15, 5)  # raw deflate: we frame it
        self._lock = threading.Lock()

    def stored(self, payload: bytes) -> bytes:
        """What the events table holds for canonical `payload` (the chain hashes `payload`)."""
        n = len(payload)
        if n <= COMPRESS_OVER:
            return payload
        with self._lock:
            body = self._deflate.compress(payload) + self._deflate.flush(zlib.Z_FULL_FLUSH)
        if len(body) + 8 > n - (n >> 3):
            return payload
        check = zlib.adler32(payload).to_bytes(4, "big")
        return b"".join((_ZLIB_HEADER, body, _FINAL_BLOCK, check))


def canonical_payload(stored: bytes) -> bytes:
    """The canonical bytes of a stored payload. One that does not inflate (a damaged row) comes
    back as stored, so that it fails the chain check and the decode like any altered row."""
    if not stored or stored[0] != _ZLIB_FIRST:
        return stored
    inflate = zlib.decompressobj()
    try:
        out = inflate.decompress(stored, MAX_INFLATED)
    except zlib.error:
        return stored
    if inflate.unconsumed_tail or not inflate.eof:
        return stored  # more than any event holds (a planted bomb), or cut short
    return out


def _payload_sql(stored: bytes | str | None) -> bytes | str | None:
    """`bubu_payload(payload)` in SQL: the canonical bytes of a stored payload."""
    return canonical_payload(stored) if isinstance(stored, bytes) else stored


def _lease_lost(session: str, lease: Lease, current: object) -> LeaseLost:
    return LeaseLost(
        f"this runner's lease on session {session} was taken over "
        f"(epoch {lease.epoch}, now {current}); it stopped writing"
    )


def _lease(session: str, row: tuple[object, ...]) -> Lease:
    """A Lease from an (owner, epoch, expires_ms, stop_requested) row."""
    return Lease(
        session=session,
        owner=str(row[0]),
        epoch=_int(row[1]),
        expires_ms=_int(row[2]),
        stop_requested=bool(row[3]),
    )


def _int(value: object) -> int:
    """A column SQLite returned as an integer (or a numeric text from json_extract)."""
    assert isinstance(value, int | str | float)
    return int(value)


def _rollback(db: sqlite3.Connection) -> None:
    """Roll back what SQLite has not rolled back itself: on a full disk it already has, and a
    second rollback's "no transaction is active" must not hide the real cause."""
    with contextlib.suppress(sqlite3.Error):
        db.execute("ROLLBACK")


def _on_read_only_fs(path: str) -> bool:
    try:
        st = os.statvfs(Path(path).expanduser().absolute().parent)
    except OSError:
        return False
    return bool(st.f_flag & os.ST_RDONLY)


def _storage_error(path: str, e: sqlite3.Error) -> BubuError:
    msg = str(e)
    if isinstance(e, sqlite3.OperationalError) and "locked" in msg:
        return StorageError(
            f"the database {path} is locked by another process (waited {BUSY_TIMEOUT_MS} ms); "
            "close the other Bubu or try again"
        )
    from bubu.log import diskspace  # only on a failure

    full = diskspace.full_disk(path, msg)
    if full is not None:
        return StorageError(full)
    if "full" in msg:  # the database reached a size limit, not the disk
        return StorageError(f"the disk holding {path} is full ({msg}); free space and retry")
    if "unable to open" in msg and _on_read_only_fs(path):
        return StorageError(
            f"the database {path} is on a read-only file system; inspect it with "
            "`bubu sessions`, `show` or `verify`, or copy it to a writable disk to go on"
        )
    if "readonly" in msg or "read-only" in msg:
        return StorageError(f"the database {path} is read-only ({msg}); fix its permissions")
    if "not a database" in msg or "malformed" in msg or "corrupt" in msg:
        return CorruptLog(
            f"{path} is not a readable Bubu database ({msg}); restore it from a backup or "
            "point --db elsewhere"
        )
    return StorageError(f"the database {path} failed: {msg}")


OBJECTS_BUSY_TIMEOUT_MS = 500
"""How long storing a snapshot's objects waits for another process's lock before giving up."""


class SQLiteStore(Store):
    """A `Store` in one SQLite file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "adaptive",
        readonly: bool = False,
    ) -> None:
        self.path = str(path)
        self.url = self.path
        self.durability = durability
        if self.path != ":memory:":
            parent = Path(self.path).expanduser().resolve().parent
            if not parent.is_dir():
                raise StorageError(
                    f"the directory {parent} for the database does not exist; create it or "
                    "choose another --db"
                )
        self._init_group_commit()
        self._packer = Packer()
        self._sync_full: bool | None = None
        self._sids: dict[str, int] = {}  # session id -> rowid; never changes once created
        self._heads: dict[int, tuple[int, bytes]] = {}  # sid -> (seq, hash) this process wrote
        self._indexed = _INDEXED
        """The kinds read through kind_index (fewer in an older database opened read-only)."""
        self.readonly = readonly
        existing = self.path != ":memory:" and sqliteopen.exists_nonempty(self.path)
        if existing:
            sqliteopen.refuse_foreign(self.path)
            sqliteopen.warn_if_readable(self.path)
        try:
            if readonly:
                self._open_readonly(existing)
                return
            if self.path != ":memory:":
                sqliteopen.create_private(self.path)
            self._db = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_MS / 1000,
            )
            self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._functions()
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode not in ("wal", "memory"):
                raise StorageError(f"could not put {self.path} in WAL mode (got {mode})")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._set_sync(durability == "full")
            self._migrate()
        except sqlite3.Error as e:
            raise _storage_error(self.path, e) from e

    # -- setup ------------------------------------------------------------------------------------

    def _open_readonly(self, existing: bool) -> None:
        """For a command that only reads: never create the file, never migrate it. A missing
        database reads as an empty one (an in-memory log with the current schema)."""
        if not existing:
            self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._functions()
            self._migrate()
            return
        self._db = sqliteopen.connect_readonly(self.path, BUSY_TIMEOUT_MS / 1000)
        self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self._functions()
        done = {row[0] for row in self._db.execute("SELECT version FROM bubu_migrations")}
        known = {m.version for m in SQLITE_MIGRATIONS}
        needed = {m.version for m in SQLITE_MIGRATIONS if m.needed_to_read}
        if done - known:
            raise NewerLogError(
                f"the database {self.path} was written by a newer Bubu (migration "
                f"{max(done - known)}, this Bubu knows up to {max(known)}); upgrade Bubu to open it"
            )
        for version, kinds in LATE_INDEXED.items():
            if version not in done:
                self._indexed = self._indexed - set(kinds)
        if needed - done:
            raise StorageError(
                f"the database {self.path} was written by an older Bubu (migration "
                f"{min(needed - done) - 1} of {max(known)}) and this command only reads; "
                "`bubu recover` upgrades it"
            )

    def _functions(self) -> None:
        self._db.create_function("bubu_payload", 1, _payload_sql, deterministic=True)

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Turn any SQLite failure inside into the BubuError a user can act on."""
        try:
            yield
        except sqlite3.Error as e:
            raise _storage_error(self.path, e) from e

    def _set_sync(self, full: bool) -> None:
        if self._sync_full is not full:
            self._db.execute(f"PRAGMA synchronous={'FULL' if full else 'NORMAL'}")
            self._sync_full = full

    def _migrate(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "CREATE TABLE IF NOT EXISTS bubu_migrations("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_ms INTEGER NOT NULL)"
            )
            done = {row[0] for row in db.execute("SELECT version FROM bubu_migrations")}
            known = {m.version for m in SQLITE_MIGRATIONS}
            newer = sorted(done - known)
            if newer:
                raise NewerLogError(
                    f"the database {self.path} was written by a newer Bubu (migration {newer[-1]}, "
                    f"this Bubu knows up to {max(known)}); upgrade Bubu to open it"
                )
            for m in SQLITE_MIGRATIONS:
                if m.version not in done:
                    for stmt in m.statements:
                        db.execute(stmt)
                    db.execute(
                        "INSERT INTO bubu_migrations(version, name, applied_ms) VALUES (?,?,?)",
                        (m.version, m.name, clock.now_ms()),
                    )
            db.execute("COMMIT")
        except BaseException:  # undone, then re-raised: Ctrl-C and exits too
            _rollback(db)
            raise

    def migrations(self) -> list[tuple[int, str]]:
        """The migrations recorded in this database, in order."""
        with self._lock, self._guard():
            return list(
                self._db.execute("SELECT version, name FROM bubu_migrations ORDER BY version")
            )

    # -- sessions ----------------------------------------------------------------------------------

    def _sid(self, session: str) -> int:
        sid = self._sids.get(session)
        if sid is not None:
            return sid
        row = self._db.execute("SELECT sid FROM sessions WHERE id=?", (session,)).fetchone()
        if row is None:
            raise UnknownSession(
                f"no session {session} in {self.path}; list them with `bubu sessions`"
            )
        self._sids[session] = int(row[0])
        return int(row[0])

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
        """One transaction, one chunk of events in memory at a time."""
        title = codec.sanitize_text(redact.text(title))
        now = clock.now_ms()
        seq = 0
        with self._lock:
            db = self._db
            try:
                self._set_sync(True)
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.execute(
                        "INSERT INTO sessions(id, title, workspace, model, created_ms)"
                        " VALUES (?,?,?,?,?)",
                        (session_id, title, workspace, model, now),
                    )
                    pending = list(blobs)
                    for chunk in chunks:
                        events, pending = redact.scrub(chunk, pending)
                        req = AppendRequest(
                            session=session_id,
                            events=events,
                            expect=seq,
                            durable=True,
                            lease=None,
                            blobs=pending,
                        )
                        seq = self._append_one(req).high_water
                        pending = []
                    db.execute("COMMIT")
                except BaseException:  # undone, then re-raised: Ctrl-C and exits too
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                    self._sids.pop(session_id, None)
                    self._heads.clear()
                    raise
            except sqlite3.IntegrityError as e:
                raise StorageError(f"a session {session_id} already exists") from e
            except sqlite3.Error as e:
                raise _storage_error(self.path, e) from e
        return SessionInfo(
            id=session_id,
            title=title,
            workspace=workspace,
            created_ms=now,
            model=model,
            high_water=seq,
            last_ms=None,
        )

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

        title = codec.sanitize_text(title)
        sid = session_id or ids.session_id()
        now = clock.now_ms()
        with self._lock:
            db = self._db
            try:
                self._set_sync(self.durability == "full" or bool(events))
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.execute(
                        "INSERT INTO sessions(id, title, workspace, model, created_ms)"
                        " VALUES (?,?,?,?,?)",
                        (sid, title, workspace, model, now),
                    )
                    if events:
                        first = AppendRequest(
                            session=sid,
                            events=events,
                            expect=0,
                            durable=True,
                            lease=None,
                            blobs=blobs,
                        )
                        self._append_one(first)
                    db.execute("COMMIT")
                except BaseException:  # undone, then re-raised: Ctrl-C and exits too
                    # Nothing of the session exists, so nothing of it may stay cached.
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                    self._sids.pop(sid, None)
                    self._heads.clear()
                    raise
            except sqlite3.IntegrityError as e:
                raise StorageError(f"a session {sid} already exists") from e
            except sqlite3.Error as e:
                raise _storage_error(self.path, e) from e
        return SessionInfo(
            id=sid,
            title=title,
            workspace=workspace,
            created_ms=now,
            model=model,
            high_water=len(events),
            last_ms=None,
        )

    _SESSION_SQL = (
        "SELECT s.id, s.title, s.workspace, s.created_ms, s.model, "
        "coalesce((SELECT max(pos) & 4294967295 FROM events e "
        "WHERE e.pos > s.sid << 32 AND e.pos < (s.sid + 1) << 32), 0), "
        "(SELECT json_extract(CAST(bubu_payload(CAST(e.payload AS BLOB)) AS TEXT), '$.ts') "
        "FROM events e "
        "WHERE e.pos > s.sid << 32 AND e.pos < (s.sid + 1) << 32 ORDER BY e.pos DESC LIMIT 1) "
        "FROM sessions s"
    )

    @staticmethod
    def _info(row: tuple[object, ...]) -> SessionInfo:
        return SessionInfo(
            id=str(row[0]),
            title=str(row[1]),
            workspace=str(row[2]),
            created_ms=_int(row[3]),
            model=None if row[4] is None else str(row[4]),
            high_water=_int(row[5]),
            last_ms=None if row[6] is None else _int(row[6]),
        )

    def sessions(self) -> list[SessionInfo]:
        with self._lock, self._guard():
            rows = self._db.execute(
                self._SESSION_SQL + " ORDER BY s.created_ms DESC, s.sid DESC"
            ).fetchall()
        return [self._info(r) for r in rows]

    def _match_sessions(self, ref: str, like: str) -> list[SessionInfo]:
        with self._lock, self._guard():
            rows = self._db.execute(
                self._SESSION_SQL + " WHERE s.id = ? OR s.id LIKE ? ESCAPE '\\' LIMIT 3",
                (ref, like),
            ).fetchall()
        return [self._info(r) for r in rows]

    # -- append (group commit) --------------------------------------------------------------------

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
        # The usual append — one event of a kind that is not indexed, onto the head this process
        # wrote last, with no other append in flight — is one INSERT in autocommit: the trigger
        # checks the seq and the statement's own transaction commits it. Anything else (an
        # indexed kind also writes its kind_index row) takes the group-commit path.
        # (This path is the floor-relative cost bench/append.py measures; keep it lean.)
        if len(events) == 1 and not blobs and self._lock.acquire(blocking=False):
            try:
                sid = self._sids.get(session)
                head = None if sid is None else self._heads.get(sid)
                event = events[0]
                kind = kind_of(event)
                if (
                    head is not None
                    and head[0] == expect
                    and kind not in _INDEXED
                    and not self._db.in_transaction
                ):
                    assert sid is not None
                    if event.session != session:
                        raise codec.InvalidEvent(
                            f"an event of session {event.session} cannot be appended to "
                            f"session {session}"
                        )
                    payload = codec.encode(event) if payloads is None else payloads[0]
                    seq = expect + 1
                    digest = codec.chain(head[1], payload)
                    row = ((sid << SEQ_BITS) | seq, kind, self._packer.stored(payload), digest)
                    self._insert_one(session, sid, row, durable, lease)
                    self._heads[sid] = (seq, digest)
                    hexed = digest.hex()
                    return Appended(
                        high_water=seq,
                        digest=hexed,
                        records=(Record(seq=seq, hash=hexed, event=event),),
                    )
            finally:
                self._lock.release()
        return super()._append(
            session,
            events,
            expect=expect,
            durable=durable,
            lease=lease,
            blobs=blobs,
            payloads=payloads,
        )

    def _insert_one(
        self,
        session: str,
        sid: int,
        row: tuple[int, str, bytes, bytes],
        durable: bool,
        lease: Lease | None,
    ) -> None:
        """Insert one event row in its own transaction, under `lease` if given."""
        db = self._db
        try:
            full = durable or self.durability == "full"
            if self._sync_full is not full:
                self._set_sync(full)
            if lease is None:
                db.execute(_INSERT_SQL, row)
            elif db.execute(_INSERT_LEASED_SQL, (*row, sid, lease.epoch)).rowcount != 1:
                current = db.execute("SELECT epoch FROM leases WHERE sid=?", (sid,)).fetchone()
                raise _lease_lost(session, lease, None if current is None else current[0])
        except sqlite3.IntegrityError as e:
            self._heads.pop(sid, None)
            if "gapless" not in str(e):
                raise _storage_error(self.path, e) from e
            seq = (row[0] & _SEQ_MASK) - 1
            raise AppendConflict(session, seq, self._read_head(sid)[0]) from e
        except sqlite3.Error as e:
            self._heads.clear()
            raise _storage_error(self.path, e) from e

    def _commit(self, batch: list[PendingAppend]) -> None:
        db = self._db
        try:
            self._set_sync(self.durability == "full" or any(p.req.durable for p in batch))
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            err = _storage_error(self.path, e)
            for p in batch:
                p.error, p.done = err, True
            return
        try:
            if len(batch) == 1:
                # One request (the usual case): its failure rolls the whole transaction back,
                # so the savepoint round-trips can be skipped.
                p = batch[0]
                try:
                    p.result = self._append_one(p.req)
                except BubuError as e:
                    _rollback(db)
                    self._heads.clear()
                    p.error = e
                    return
                db.execute("COMMIT")
                return
            for i, p in enumerate(batch):
                db.execute(f"SAVEPOINT a{i}")
                try:
                    p.result = self._append_one(p.req)
                    db.execute(f"RELEASE a{i}")
                except BubuError as e:
                    db.execute(f"ROLLBACK TO a{i}")
                    db.execute(f"RELEASE a{i}")
                    p.error = e
            db.execute("COMMIT")
        except sqlite3.Error as e:
            self._heads.clear()
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            err = _storage_error(self.path, e)
            for p in batch:
                p.result, p.error = None, err
        except BaseException:  # undone, then re-raised: Ctrl-C and exits too
            self._heads.clear()
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        finally:
            for p in batch:
                p.done = True

    def _append_one(self, req: AppendRequest) -> Appended:
        db = self._db
        sid = self._sid(req.session)
        if req.lease is not None:
            row = db.execute("SELECT epoch FROM leases WHERE sid=?", (sid,)).fetchone()
            if row is None or int(row[0]) != req.lease.epoch:
                raise _lease_lost(req.session, req.lease, None if row is None else row[0])
        # The cached head is only a guess (another process may have appended): the gapless
        # trigger refuses the insert if it is stale, and then the database is asked.
        cached = self._heads.get(sid)
        if cached is not None and cached[0] == req.expect:
            seq, prev = cached
        else:
            seq, prev = self._read_head(sid)
        if seq != req.expect:
            raise AppendConflict(req.session, req.expect, seq)
        for data in req.blobs:
            db.execute(
                "INSERT OR IGNORE INTO blobs(sha256, size, data) VALUES (?,?,?)",
                (codec.sha256_hex(data), len(data), data),
            )
        chained = chain(req, seq, prev)
        rows = [
            ((sid << SEQ_BITS) | c.seq, c.kind, self._packer.stored(c.payload), c.digest)
            for c in chained
        ]
        records = [c.record for c in chained]
        if chained:
            seq, prev = chained[-1].seq, chained[-1].digest
        try:
            db.executemany(_INSERT_SQL, rows)
            marks = [(sid, kind, pos & _SEQ_MASK) for pos, kind, _, _ in rows if kind in _INDEXED]
            if marks:
                db.executemany("INSERT INTO kind_index(sid, kind, seq) VALUES (?,?,?)", marks)
        except sqlite3.IntegrityError as e:
            if "gapless" not in str(e):
                raise
            self._heads.pop(sid, None)
            raise AppendConflict(req.session, req.expect, self._read_head(sid)[0]) from e
        self._heads[sid] = (seq, prev)
        return Appended(high_water=seq, digest=prev.hex(), records=tuple(records))

    def _read_head(self, sid: int) -> tuple[int, bytes]:
        row = self._db.execute(_HEAD_SQL, (sid << SEQ_BITS, (sid + 1) << SEQ_BITS)).fetchone()
        return (int(row[0]), bytes(row[1])) if row else (0, codec.GENESIS)

    # -- reads ------------------------------------------------------------------------------------

    def head(self, session: str) -> Head:
        with self._lock, self._guard():
            sid = self._sid(session)
            row = self._db.execute(_HEAD_SQL, (sid << SEQ_BITS, (sid + 1) << SEQ_BITS)).fetchone()
        if row is None:
            return Head(high_water=0, digest=codec.GENESIS.hex())
        return Head(high_water=int(row[0]), digest=bytes(row[1]).hex())

    def _rows(
        self, session: str, after: int, upto: int | None, kinds: Iterable[str] | None
    ) -> list[tuple[int, bytes, bytes]]:
        ks = None if kinds is None else list(kinds)
        if ks == []:
            return []
        sid = self._sid(session)
        if ks is not None and self._indexed.issuperset(ks):
            # Indexed kinds only: their seqs from kind_index, each row then by its key.
            sql = (
                "SELECT e.seq, e.hash, CAST(e.payload AS BLOB) FROM kind_index k "
                "CROSS JOIN events e ON e.pos = (k.sid << 32) | k.seq AND e.kind = k.kind "
                f"WHERE k.sid=? AND k.kind IN ({','.join('?' * len(ks))}) AND k.seq>?"
            )
            args: list[object] = [sid, *ks, after]
            if upto is not None:
                sql += " AND k.seq<=?"
                args.append(upto)
            sql += " ORDER BY k.seq"
        else:
            # A range of the row key: the events of one session, in seq order, straight off the
            # table's own b-tree. CAST: a row a foreign writer stored as TEXT still reads (and
            # verifies) as bytes.
            base = sid << SEQ_BITS
            last = min(upto, _SEQ_MASK) if upto is not None else _SEQ_MASK
            sql = "SELECT seq, hash, CAST(payload AS BLOB) FROM events WHERE pos>? AND pos<=?"
            args = [base + after, base + last]
            if ks is not None:
                sql += f" AND kind IN ({','.join('?' * len(ks))})"
                args.extend(ks)
            sql += " ORDER BY pos"
        try:
            rows = self._db.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise _storage_error(self.path, e) from e
        return [(s, h, p if p[:1] != b"x" else canonical_payload(p)) for s, h, p in rows]

    def read(
        self,
        session: str,
        *,
        after: int = 0,
        upto: int | None = None,
        kinds: Iterable[str] | None = None,
    ) -> list[Record]:
        with self._lock, self._guard():
            rows = self._rows(session, after, upto, kinds)
        decode = codec.decode
        return [Record(seq=s, hash=h.hex(), event=decode(p, seq=s)) for s, h, p in rows]

    def raw(
        self, session: str, *, after: int = 0, upto: int | None = None
    ) -> list[tuple[int, bytes, bytes]]:
        """(seq, hash, canonical payload) rows, undecoded, for export and verification."""
        with self._lock, self._guard():
            return self._rows(session, after, upto, None)

    def verify(self, session: str) -> VerifyReport:
        with self._lock, self._guard():
            rows = self._rows(session, 0, None, None)
            refs = self._blob_check(rows)
            sid = self._sid(session)
            kinds = sorted(self._indexed)
            stored = self._db.execute(
                "SELECT seq, kind FROM events WHERE pos>? AND pos<? "
                f"AND kind IN ({','.join('?' * len(kinds))})",
                (sid << SEQ_BITS, (sid + 1) << SEQ_BITS, *kinds),
            ).fetchall()
            indexed = self._db.execute(
                "SELECT seq, kind FROM kind_index WHERE sid=?", (sid,)
            ).fetchall()
        report = verify_views(
            verify_records(session, rows, refs), rows, lambda key: self._cached(session, key)
        )
        report = verify_snapshots(report, rows, self._object_rows)
        if not report.ok:
            return report
        # The kind index is written by the store, so an event inserted behind its back is
        # missing from it (and invisible to reads by kind).
        missing, extra = set(stored) - set(indexed), set(indexed) - set(stored)
        if not missing and not extra:
            return report
        seq, kind = min(missing | extra)
        problem = (
            f"the {kind!r} event at seq {seq} is missing from the kind index (kind_index): it "
            "was written behind Bubu's back, and reads by kind do not see it"
            if (seq, kind) in missing
            else f"the kind index (kind_index) names a {kind!r} event at seq {seq} that the log "
            "does not hold there: it was written behind Bubu's back"
        )
        return VerifyReport(
            session=session,
            ok=False,
            high_water=report.high_water,
            digest=report.digest,
            first_bad_seq=seq,
            problem=problem,
        )

    def _blob_check(self, rows: list[tuple[int, bytes, bytes]]) -> dict[str, bool]:
        """For each blob hash referenced by these rows: does the stored blob hash to it?"""
        out: dict[str, bool] = {}
        for _, _, payload in rows:
            if b'"blob":' not in payload:
                continue
            for sha in verify_blob_refs(payload):
                if sha not in out:
                    r = self._db.execute("SELECT data FROM blobs WHERE sha256=?", (sha,)).fetchone()
                    out[sha] = r is not None and codec.sha256_hex(bytes(r[0])) == sha
        return out

    # -- blobs ------------------------------------------------------------------------------------

    def blob(self, sha256: str) -> bytes | None:
        with self._lock, self._guard():
            row = self._db.execute("SELECT data FROM blobs WHERE sha256=?", (sha256,)).fetchone()
        return None if row is None else bytes(row[0])

    # -- workspace objects -------------------------------------------------------------------------

    def _put_objects(self, rows: Sequence[tuple[str, int, bytes]]) -> None:
        with self._lock, self._guard():
            db = self._db
            self._set_sync(self.durability == "full")
            # A snapshot never waits long for a lock another process holds: it gives up (and is
            # recorded as partial), leaving the wait to the appends the task depends on.
            db.execute(f"PRAGMA busy_timeout={OBJECTS_BUSY_TIMEOUT_MS}")
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.executemany(
                        "INSERT OR IGNORE INTO objects(sha256, size, data) VALUES (?,?,?)", rows
                    )
                    db.execute("COMMIT")
                except BaseException:  # undone, then re-raised: Ctrl-C and exits too
                    _rollback(db)
                    raise
            finally:
                db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")

    def missing_objects(self, shas: Iterable[str]) -> set[str]:
        want = set(shas)
        if not want:
            return set()
        held: set[str] = set()
        wanted = sorted(want)
        with self._lock, self._guard():
            for i in range(0, len(wanted), 500):
                part = wanted[i : i + 500]
                try:
                    rows = self._db.execute(
                        f"SELECT sha256 FROM objects WHERE sha256 IN ({','.join('?' * len(part))})",
                        part,
                    ).fetchall()
                except sqlite3.OperationalError as e:
                    if "no such table" not in str(e):  # a read-only open of an older database
                        raise
                    return want
                held.update(str(r[0]) for r in rows)
        return want - held

    def _object_rows(self, shas: Sequence[str]) -> dict[str, tuple[int, bytes]]:
        out: dict[str, tuple[int, bytes]] = {}
        with self._lock, self._guard():
            for sha in shas:
                try:
                    row = self._db.execute(
                        "SELECT size, data FROM objects WHERE sha256=?", (sha,)
                    ).fetchone()
                except sqlite3.OperationalError as e:
                    if "no such table" not in str(e):
                        raise
                    return {}
                if row is not None:
                    out[sha] = (int(row[0]), bytes(row[1]))
        return out

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
        with self._lock, self._guard():
            db = self._db
            self._set_sync(True)
            db.execute("BEGIN IMMEDIATE")
            try:
                sid = self._sid(session)
                row = db.execute(
                    "SELECT owner, epoch, expires_ms FROM leases WHERE sid=?", (sid,)
                ).fetchone()
                epoch = 0
                if row is not None:
                    cur_owner, epoch, expires = str(row[0]), int(row[1]), int(row[2])
                    stealable = steal and steal_epoch in (None, epoch)
                    if cur_owner and expires > now and cur_owner != owner and not stealable:
                        raise LeaseError(
                            f"session {session} is being run by {cur_owner}; wait for it to "
                            "finish or stop it first"
                        )
                lease = Lease(
                    session=session,
                    owner=owner,
                    epoch=epoch + 1,
                    expires_ms=now + int(ttl_s * 1000),
                )
                db.execute(
                    "INSERT INTO leases(sid, owner, epoch, expires_ms) VALUES (?,?,?,?) "
                    "ON CONFLICT(sid) DO UPDATE SET owner=excluded.owner, epoch=excluded.epoch, "
                    "expires_ms=excluded.expires_ms, stop_requested=0",
                    (sid, owner, lease.epoch, lease.expires_ms),
                )
                db.execute("COMMIT")
                return lease
            except BaseException:  # undone, then re-raised: Ctrl-C and exits too
                _rollback(db)
                raise

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        expires = clock.now_ms() + int(ttl_s * 1000)
        # A renewal waits for another process's lock a third of the lease at most (it is tried
        # again): holding the connection for the whole busy timeout would starve the run's own
        # appends, which must wait and fail (or succeed) on their own.
        wait_ms = max(50, min(BUSY_TIMEOUT_MS, int(ttl_s * 1000 / 3)))
        with self._lock, self._guard():
            sid = self._sid(lease.session)
            self._db.execute(f"PRAGMA busy_timeout={wait_ms}")
            try:
                cur = self._db.execute(
                    "UPDATE leases SET expires_ms=? WHERE sid=? AND epoch=? AND owner=?",
                    (expires, sid, lease.epoch, lease.owner),
                )
            finally:
                self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            if cur.rowcount != 1:
                raise LeaseLost(
                    f"the lease on session {lease.session} was taken over by another runner"
                )
        return Lease(
            session=lease.session, owner=lease.owner, epoch=lease.epoch, expires_ms=expires
        )

    def release_lease(self, lease: Lease) -> None:
        with self._lock, self._guard():
            sid = self._sid(lease.session)
            self._db.execute(
                "UPDATE leases SET owner='', expires_ms=0 WHERE sid=? AND epoch=? AND owner=?",
                (sid, lease.epoch, lease.owner),
            )

    def current_lease(self, session: str) -> Lease | None:
        with self._lock, self._guard():
            sid = self._sid(session)
            row = self._db.execute(
                "SELECT owner, epoch, expires_ms, stop_requested FROM leases WHERE sid=?", (sid,)
            ).fetchone()
        return None if row is None else _lease(session, row)

    def request_stop(self, session: str) -> Lease | None:
        with self._lock, self._guard():
            sid = self._sid(session)
            db = self._db
            # One transaction, not UPDATE … RETURNING: the SQLite of older systems lacks it.
            db.execute("BEGIN IMMEDIATE")
            try:
                flagged = db.execute(
                    "UPDATE leases SET stop_requested=1 WHERE sid=? AND owner!='' AND expires_ms>?",
                    (sid, clock.now_ms()),
                ).rowcount
                row = db.execute(
                    "SELECT owner, epoch, expires_ms, stop_requested FROM leases WHERE sid=?",
                    (sid,),
                ).fetchone()
                db.execute("COMMIT")
            except BaseException:  # undone, then re-raised: Ctrl-C and exits too
                _rollback(db)
                raise
        return _lease(session, row) if flagged and row is not None else None

    def _cached(self, session: str, key: str) -> tuple[str, bytes] | None:
        view = self.get_view(CHECKPOINT_VIEW, session, key)
        return None if view is None else (view.source_digest, view.data)

    # -- views ------------------------------------------------------------------------------------

    def put_view(self, view: View) -> None:
        with self._lock, self._guard():
            self._db.execute(
                "INSERT OR REPLACE INTO views(kind, session, key, source_hw, source_digest, data,"
                " created_ms)"
                " VALUES (?,?,?,?,?,?,?)",
                (
                    view.kind,
                    view.session,
                    view.key,
                    view.source_high_water,
                    view.source_digest,
                    view.data,
                    view.created_ms or clock.now_ms(),
                ),
            )

    def get_view(self, kind: str, session: str, key: str) -> View | None:
        with self._lock, self._guard():
            row = self._db.execute(
                "SELECT source_hw, source_digest, data, created_ms FROM views"
                " WHERE kind=? AND session=? AND key=?",
                (kind, session, key),
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
        with self._lock, self._guard():
            if kind is None:
                cur = self._db.execute("DELETE FROM views WHERE session=?", (session,))
            else:
                cur = self._db.execute(
                    "DELETE FROM views WHERE session=? AND kind=?", (session, kind)
                )
            return cur.rowcount

    # -- lifecycle --------------------------------------------------------------------------------

    def integrity_check(self) -> str:
        """SQLite's own `PRAGMA integrity_check` answer ('ok' when the file is sound)."""
        with self._lock:
            try:
                rows = self._db.execute("PRAGMA integrity_check").fetchall()
            except sqlite3.Error as e:
                return str(e)
        return "; ".join(str(r[0]) for r in rows)

    def close(self) -> None:
        with self._lock:
            self._db.close()
