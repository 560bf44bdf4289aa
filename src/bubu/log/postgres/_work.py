"""The fleet's work queue: which sessions have work, and claiming one under a lease.

The `work` table is derived from the log by a trigger in the same transaction as every append (see
`_schema`): `queued` (a user request waits for a turn), `open` (a turn has no end), `blocked`,
`idle`, `retry` (the turn gave up waiting for its provider; claimable again after a while), `held`
(a worker would not run the queued task under its ceiling; `bubu approve-task` queues it again). A
session is claimable when it is queued or open, its lease is free or expired by the server's clock,
and no worker deferred it. Claiming locks the session's head row with
`FOR NO KEY UPDATE … SKIP LOCKED` (the lock every append and lease change takes, so claimers never
wait on each other or deadlock with appends) and takes the lease in the same transaction.

"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

from bubu.errors import LeaseError
from bubu.log.postgres import _leases
from bubu.log.postgres._schema import NOW_MS_SQL
from bubu.log.postgres._store import PostgresStore
from bubu.log.store import Lease, SessionInfo

WorkState = Literal["queued", "open", "blocked", "idle", "retry", "held"]
"""Where a session stands for the fleet (derived from its log)."""

MAX_DEFER_MS = 600_000
"""The longest a failing session is put off (the back-off doubles from 5 s up to this)."""

_CANDIDATE = f"""
SELECT s.sid, s.id, s.title, s.workspace, s.created_ms, s.model, s.high_water, s.last_ms,
       w.state, l.owner
FROM work w
JOIN sessions s ON s.sid = w.sid
LEFT JOIN leases l ON l.sid = w.sid
WHERE w.state IN ('queued', 'open', 'retry') AND w.not_before <= {NOW_MS_SQL}
  AND (l.sid IS NULL OR l.owner = '' OR l.expires_ms <= {NOW_MS_SQL})
  AND w.sid <> ALL(%s::bigint[])
ORDER BY w.since_ms, w.sid
LIMIT 1
FOR NO KEY UPDATE OF s SKIP LOCKED
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A session a worker now holds the lease on, and why it has work."""

    session: SessionInfo
    lease: Lease
    state: Literal["queued", "open", "retry"]
    """`retry`: the turn ended because its provider stayed unavailable, a while ago."""
    released: bool
    """True when the previous runner gave the lease up (an orderly hand-off), False when it
    expired (the runner died or froze) or there was none."""


class WorkQueue:
    """The work queue of one PostgreSQL store (the store's connection does the talking)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    def claim(self, owner: str, ttl_s: float, *, attempts: int = 5) -> Claim | None:
        """Take the lease on the oldest claimable session, or return None when there is none.

        A candidate whose lease turns out to be live once locked (the snapshot was stale) is
        skipped; the next one is tried, up to `attempts` times.
        """
        skipped: list[int] = []
        with self.store._using() as db, db.transaction():
            for _ in range(attempts):
                row = db.execute(_CANDIDATE, [skipped]).fetchone()
                if row is None:
                    return None
                sid = int(row[0])
                # Fresh reads, now that the head row is ours: appends and lease takers wait on it.
                state = db.execute("SELECT state FROM work WHERE sid = %s", [sid]).fetchone()
                if state is None or state[0] not in ("queued", "open", "retry"):
                    skipped.append(sid)
                    continue
                try:
                    lease = _leases.acquire(
                        db, sid, str(row[1]), owner, int(ttl_s * 1000), steal=False
                    )
                except LeaseError:
                    skipped.append(sid)
                    continue
                return Claim(
                    session=PostgresStore._info(row[1:8]),
                    lease=lease,
                    state=cast(Literal["queued", "open", "retry"], state[0]),
                    released=row[9] == "",
                )
        return None

    def defer(self, session: str, *, error: str | None = None) -> int:
        """Put a session off after a worker failed on it (5 s, doubling per failure up to 10 min);
        returns the delay in milliseconds. A new turn or turn end resets the back-off."""
        del error  # the worker logs it; the log itself records what the model saw
        with self.store._using() as db:
            row = db.execute(
                "UPDATE work w SET tries = w.tries + 1, "
                f"not_before = {NOW_MS_SQL} "
                "+ least(%s, 5000 * power(2, least(w.tries, 20)))::bigint "
                "FROM sessions s WHERE s.sid = w.sid AND s.id = %s "
                f"RETURNING w.not_before - {NOW_MS_SQL}",
                [MAX_DEFER_MS, session],
            ).fetchone()
        return 0 if row is None else int(row[0])

    def state(self, session: str) -> WorkState | None:
        """The session's queue state, or None when its log never said anything the queue reads."""
        with self.store._using() as db:
            row = db.execute(
                "SELECT w.state FROM work w JOIN sessions s ON s.sid = w.sid WHERE s.id = %s",
                [session],
            ).fetchone()
        return None if row is None else cast(WorkState, row[0])

    def counts(self) -> dict[WorkState, int]:
        """How many sessions are in each state (states with none are left out)."""
        with self.store._using() as db:
            rows = db.execute("SELECT state, count(*) FROM work GROUP BY state").fetchall()
        return {cast(WorkState, str(r[0])): int(r[1]) for r in rows}

    def listing(self, states: Sequence[WorkState]) -> list[tuple[SessionInfo, WorkState]]:
        """The sessions in `states` with their state, oldest first (`bubu fleet tasks`)."""
        with self.store._using() as db:
            rows = db.execute(
                "SELECT s.sid, s.id, s.title, s.workspace, s.created_ms, s.model, s.high_water, "
                "s.last_ms, w.state FROM work w JOIN sessions s ON s.sid = w.sid "
                "WHERE w.state = ANY(%s) ORDER BY w.since_ms, w.sid",
                [list(states)],
            ).fetchall()
        return [(PostgresStore._info(r[1:8]), cast(WorkState, str(r[8]))) for r in rows]

    def waiting(self, states: Sequence[WorkState] = ("queued", "open")) -> list[str]:
        """Ids of the sessions in `states` whose lease is free or expired, oldest first."""
        with self.store._using() as db:
            rows = db.execute(
                "SELECT s.id FROM work w JOIN sessions s ON s.sid = w.sid "
                "LEFT JOIN leases l ON l.sid = w.sid WHERE w.state = ANY(%s) "
                f"AND (l.sid IS NULL OR l.owner = '' OR l.expires_ms <= {NOW_MS_SQL}) "
                "ORDER BY w.since_ms, w.sid",
                [list(states)],
            ).fetchall()
        return [str(r[0]) for r in rows]
