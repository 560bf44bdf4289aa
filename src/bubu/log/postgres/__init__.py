"""The PostgreSQL log backend: the store contract, with the server enforcing the log's rules.

All tables live in one schema (default `bubu`, or `?schema=NAME` in the URL). Triggers refuse
UPDATE, DELETE and TRUNCATE on events and blobs, and check on every insert that a session's events
continue its head row (gapless seq, `sha256(previous hash || payload)`). An append locks the head
rows of its sessions in sid order, so writers in many processes serialise per session and group
commits never deadlock; lease times come from the server's clock. A `work` table derived from the
log by a trigger tells a fleet of workers which sessions have work (`WorkQueue`).
"""

from __future__ import annotations

from bubu.log.postgres._connect import DEFAULT_SCHEMA, split_url
from bubu.log.postgres._schema import NOW_MS_SQL, PG_MIGRATIONS
from bubu.log.postgres._store import PostgresStore
from bubu.log.postgres._work import Claim, WorkQueue, WorkState

__all__ = [
    "DEFAULT_SCHEMA",
    "NOW_MS_SQL",
    "PG_MIGRATIONS",
    "Claim",
    "PostgresStore",
    "WorkQueue",
    "WorkState",
    "split_url",
]
