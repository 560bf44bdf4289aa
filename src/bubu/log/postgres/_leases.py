"""Leases on sessions, timed by the database server's clock so that every machine agrees.

A lease is (owner, epoch, expires_ms) per session. Taking one bumps the epoch while holding the
session's head row lock, the same lock every append takes, so an append either finishes under the
old epoch or sees the new one: a runner whose lease was taken over can never write again.
"""

from __future__ import annotations

from psycopg import Cursor

from bubu.errors import LeaseError, LeaseLost
from bubu.log.postgres._connect import Connection, Row
from bubu.log.postgres._schema import NOW_MS_SQL
from bubu.log.store import Lease


def acquire(
    db: Connection,
    sid: int,
    session: str,
    owner: str,
    ttl_ms: int,
    *,
    steal: bool,
    steal_epoch: int | None = None,
) -> Lease:
    """Take the lease with a new epoch (inside the caller's transaction, with the head row locked).

    Raises LeaseError when another owner's lease is still live and `steal` is false.
    """
    now_row = db.execute(f"SELECT {NOW_MS_SQL}").fetchone()
    assert now_row is not None
    now = int(now_row[0])
    cur = db.execute("SELECT owner, epoch, expires_ms FROM leases WHERE sid = %s", [sid]).fetchone()
    epoch = 0
    if cur is not None:
        cur_owner, epoch, expires = str(cur[0]), int(cur[1]), int(cur[2])
        stealable = steal and steal_epoch in (None, epoch)
        if cur_owner and expires > now and cur_owner != owner and not stealable:
            raise LeaseError(
                f"session {session} is being run by {cur_owner}; wait for it to finish or stop "
                "it first"
            )
    lease = Lease(session=session, owner=owner, epoch=epoch + 1, expires_ms=now + ttl_ms)
    db.execute(
        "INSERT INTO leases(sid, owner, epoch, expires_ms) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (sid) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch, "
        "expires_ms = excluded.expires_ms, stop_requested = false",
        [sid, owner, lease.epoch, lease.expires_ms],
    )
    return lease


def renew(db: Connection, sid: int, lease: Lease, ttl_ms: int) -> Lease:
    """Extend a held lease to `ttl_ms` from the server's now; raises LeaseLost if taken over."""
    row = db.execute(
        f"UPDATE leases SET expires_ms = {NOW_MS_SQL} + %s "
        "WHERE sid = %s AND epoch = %s AND owner = %s RETURNING expires_ms",
        [ttl_ms, sid, lease.epoch, lease.owner],
    ).fetchone()
    if row is None:
        raise LeaseLost(f"the lease on session {lease.session} was taken over by another runner")
    return Lease(
        session=lease.session, owner=lease.owner, epoch=lease.epoch, expires_ms=int(row[0])
    )


def release(db: Connection, sid: int, lease: Lease) -> None:
    """Give the lease up if it is still this one (the epoch stays, so fencing still holds)."""
    db.execute(
        "UPDATE leases SET owner = '', expires_ms = 0 WHERE sid = %s AND epoch = %s AND owner = %s",
        [sid, lease.epoch, lease.owner],
    )


def current(db: Connection, sid: int, session: str) -> Lease | None:
    """The session's lease row, expired or not, if any."""
    row = db.execute(
        "SELECT owner, epoch, expires_ms, stop_requested FROM leases WHERE sid = %s", [sid]
    ).fetchone()
    return None if row is None else _lease(session, row)


def request_stop(db: Connection, sid: int, session: str) -> Lease | None:
    """Flag the live lease (by the server's clock) as asked to stop; the lease, or None."""
    row = db.execute(
        f"UPDATE leases SET stop_requested = true WHERE sid = %s AND owner <> '' "
        f"AND expires_ms > {NOW_MS_SQL} RETURNING owner, epoch, expires_ms, stop_requested",
        [sid],
    ).fetchone()
    return None if row is None else _lease(session, row)


def _lease(session: str, row: Row) -> Lease:
    return Lease(
        session=session,
        owner=str(row[0]),
        epoch=int(row[1]),
        expires_ms=int(row[2]),
        stop_requested=bool(row[3]),
    )


def epochs_of(db: Connection, sessions: list[str]) -> Cursor[Row]:
    """The query for the current lease epoch, by sid, of each of `sessions` that has a lease row
    (its cursor: a pipelined append reads it together with its head rows)."""
    return db.execute(
        "SELECT l.sid, l.epoch FROM leases l JOIN sessions s ON s.sid = l.sid WHERE s.id = ANY(%s)",
        [sessions],
    )
