"""Ordered schema migrations, each recorded in the database when applied.

A database that records a migration this code does not know was written by a newer Bubu and is
refused. Never edit a released step: add a new one.
"""

from __future__ import annotations

import msgspec


class Migration(msgspec.Struct, frozen=True):
    """One schema step."""

    version: int
    name: str
    statements: tuple[str, ...]
    needed_to_read: bool = True
    """False for a step a database without it is read correctly without (a read-only open, which
    never migrates, does not refuse such a database)."""


def _immutable(table: str) -> tuple[str, ...]:
    return (
        f"CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table} "
        f"BEGIN SELECT RAISE(ABORT, 'bubu: {table} are append-only'); END",
        f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
        f"BEGIN SELECT RAISE(ABORT, 'bubu: {table} are append-only'); END",
    )


_INDEXED_FROM_7 = (
    "session_started",
    "process_started",
    "process_output",
    "process_ended",
    "child_started",
    "child_finished",
)
"""What a run reads before it starts: the session's copied facts, its processes, its sub-agents."""

INDEXED_KINDS = (
    "text",
    "turn_started",
    "turn_ended",
    "run_started",
    "step_limit",
    "recovery_notice",
    "notice_dismissed",
    "compaction",
    "info",
    "error",
    "permission_request",
    "permission_decision",
    "tool_recovery",
    # Added after migration 2: no log held either kind before, so there is nothing to backfill.
    "task_held",
    "task_approved",
    # Backfilled by migration 7 (`LATE_INDEXED`).
    *_INDEXED_FROM_7,
)
"""The kinds a session's status is folded from (`BOUNDARY_KINDS`): user requests, answers and the
boundaries of turns and runs, a few per turn, and what a run reads before it starts (the
session's copied facts, its background processes and sub-agents), so SQLite indexes them by kind
(in `kind_index`) and neither a status nor a run's start scans the log. Every other kind —
thinking, calls, results, the per-call `model_request` notes and `tool_dispatch` facts — is
written every step and read by seq range."""
INDEXED_KINDS_SQL = "kind IN (" + ", ".join(f"'{k}'" for k in INDEXED_KINDS) + ")"
LATE_INDEXED = {7: _INDEXED_FROM_7}
"""Kinds indexed from a later migration on (by its version): a database without that migration
holds them unindexed, and a read-only open of it reads them off the events themselves."""

SEQ_BITS = 32
"""An event's row key is `sid << SEQ_BITS | seq`: one b-tree holds every session's events in
(session, seq) order, so an append writes no separate index (and a session holds up to 2^32 − 1
events)."""

SQLITE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "log, sessions, blobs, leases, views",
        (
            "CREATE TABLE sessions(sid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, "
            "title TEXT NOT NULL, workspace TEXT NOT NULL, model TEXT, "
            "created_ms INTEGER NOT NULL, last_ms INTEGER)",
            # sid and seq are derived from the row key (virtual: they take no space).
            "CREATE TABLE events(pos INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
            "payload BLOB NOT NULL, hash BLOB NOT NULL CHECK (length(hash) = 32), "
            "sid INTEGER GENERATED ALWAYS AS (pos >> 32) VIRTUAL, "
            "seq INTEGER GENERATED ALWAYS AS (pos & 4294967295) VIRTUAL, "
            "CHECK ((pos & 4294967295) > 0))",
            # (Replaced by the kind_index table in migration 2.)
            "CREATE INDEX events_rare_kind ON events(sid, kind, seq) WHERE kind NOT IN "
            "('text', 'thinking', 'function_call', 'function_response')",
            # Gapless per-session seq, enforced by the database as well as by the code.
            "CREATE TRIGGER events_gapless BEFORE INSERT ON events "
            "WHEN NEW.pos != coalesce((SELECT max(pos) FROM events "
            "WHERE pos > (NEW.pos >> 32) << 32 AND pos < ((NEW.pos >> 32) + 1) << 32), "
            "(NEW.pos >> 32) << 32) + 1 "
            "BEGIN SELECT RAISE(ABORT, 'bubu: seq must be gapless'); END",
            *_immutable("events"),
            "CREATE TABLE blobs(sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, "
            "data BLOB NOT NULL)",
            *_immutable("blobs"),
            "CREATE TABLE leases(sid INTEGER PRIMARY KEY REFERENCES sessions(sid), "
            "owner TEXT NOT NULL, epoch INTEGER NOT NULL, expires_ms INTEGER NOT NULL)",
            "CREATE TABLE views(kind TEXT NOT NULL, session TEXT NOT NULL, key TEXT NOT NULL, "
            "source_hw INTEGER NOT NULL, source_digest TEXT NOT NULL, data BLOB NOT NULL, "
            "created_ms INTEGER NOT NULL, PRIMARY KEY (kind, session, key))",
        ),
    ),
    Migration(
        2,
        "kinds indexed in a table the store writes",
        (
            # A partial index is evaluated, and its b-tree opened, on every insert, even for rows
            # it never holds: on a synced disk that was a tenth of an append. The store now writes
            # (sid, kind, seq) of the indexed kinds itself, in the append's transaction, so an
            # append of any other kind touches the events b-tree alone. `verify` checks that the
            # two agree.
            "CREATE TABLE kind_index(sid INTEGER NOT NULL, kind TEXT NOT NULL, "
            "seq INTEGER NOT NULL, PRIMARY KEY (sid, kind, seq)) WITHOUT ROWID",
            f"INSERT INTO kind_index(sid, kind, seq) SELECT sid, kind, seq FROM events "
            f"WHERE {INDEXED_KINDS_SQL}",
            "DROP INDEX events_rare_kind",
            *_immutable("kind_index"),
        ),
    ),
    Migration(
        3,
        "stop requests on leases",
        ("ALTER TABLE leases ADD COLUMN stop_requested INTEGER NOT NULL DEFAULT 0",),
    ),
    Migration(
        4,
        "large payloads stored compressed",
        # No schema change: from here on an event payload over `COMPRESS_OVER` bytes may be
        # stored as a zlib stream of its canonical bytes (sqlite.py, `Packer`). The step
        # is recorded so that an older Bubu, which would read such a row as JSON, refuses the
        # database instead; a database without it holds canonical bytes only and reads as before.
        (),
        needed_to_read=False,
    ),
    Migration(
        5,
        "workspace snapshot objects",
        (
            # Content-addressed by the sha-256 of the uncompressed bytes (`bubu.log.objects`),
            # shared by every session: a workspace's files are stored once across its sessions.
            "CREATE TABLE objects(sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, "
            "data BLOB NOT NULL)",
            *_immutable("objects"),
        ),
        # A database without it holds no snapshot; a reader finds no object there.
        needed_to_read=False,
    ),
    Migration(
        6,
        "workspace objects stored as deltas",
        # No schema change: from here on an object may be stored as a delta against an earlier
        # version (`bubu.log.objects`). Recorded so that an older Bubu, which would read a delta
        # as a damaged object, refuses the database; one without it holds whole objects only.
        (),
        needed_to_read=False,
    ),
    Migration(
        7,
        "session facts, background processes and sub-agents indexed by kind",
        # Read before every run (the session's facts, its background processes, its sub-agents):
        # read off the whole session, each of those reads grew with the log.
        (
            "INSERT OR IGNORE INTO kind_index(sid, kind, seq) SELECT sid, kind, seq FROM events "
            "WHERE kind IN (" + ", ".join(f"'{k}'" for k in _INDEXED_FROM_7) + ")",
        ),
        needed_to_read=False,
    ),
)
