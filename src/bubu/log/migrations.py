"""Ordered schema migrations, each recorded in the database when applied.

A database that records a migration this code does not know was written by a newer Bubu and is
refused. Never edit a released step: add a new one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step."""

    version: int
    name: str
    statements: tuple[str, ...]


def _immutable(table: str) -> tuple[str, ...]:
    return (
        f"CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table} "
        f"BEGIN SELECT RAISE(ABORT, 'bubu: {table} are append-only'); END",
        f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
        f"BEGIN SELECT RAISE(ABORT, 'bubu: {table} are append-only'); END",
    )


BULK_KINDS = ("text", "thinking", "function_call", "function_response")
"""The kinds almost every append has; they are read by seq range, never by kind. Every other
(rare) kind — turn and run boundaries, notes, errors — is indexed by kind."""
RARE_KINDS_SQL = "kind NOT IN ('text', 'thinking', 'function_call', 'function_response')"

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
            "title TEXT NOT NULL, workspace TEXT NOT NULL, model TEXT, created_ms INTEGER NOT NULL, "
            "last_ms INTEGER)",
            # sid and seq are derived from the row key (virtual: they take no space).
            "CREATE TABLE events(pos INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
            "payload BLOB NOT NULL, hash BLOB NOT NULL CHECK (length(hash) = 32), "
            "sid INTEGER GENERATED ALWAYS AS (pos >> 32) VIRTUAL, "
            "seq INTEGER GENERATED ALWAYS AS (pos & 4294967295) VIRTUAL, "
            "CHECK ((pos & 4294967295) > 0))",
            # The bulk kinds make up nearly every append; indexing them by kind would cost a
            # b-tree page per commit and buy nothing, so only the rare (boundary) kinds are.
            f"CREATE INDEX events_rare_kind ON events(sid, kind, seq) WHERE {RARE_KINDS_SQL}",
            # Gapless per-session seq, enforced by the database as well as by the code.
            "CREATE TRIGGER events_gapless BEFORE INSERT ON events "
            "WHEN NEW.pos != coalesce((SELECT max(pos) FROM events "
            "WHERE pos > (NEW.pos >> 32) << 32 AND pos < ((NEW.pos >> 32) + 1) << 32), "
            "(NEW.pos >> 32) << 32) + 1 "
            "BEGIN SELECT RAISE(ABORT, 'bubu: seq must be gapless'); END",
            *_immutable("events"),
            "CREATE TABLE blobs(sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL)",
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
        "rare kinds indexed in a table the store writes",
        (
            # A partial index is evaluated, and its b-tree opened, on every insert, even for the
            # bulk kinds it never holds: on a synced disk that was a tenth of an append. The store
            # now writes the rare kinds' (sid, kind, seq) itself, in the append's transaction, so
            # an append of a bulk kind touches the events b-tree alone. `verify` checks the two
            # agree.
            "CREATE TABLE rare_kinds(sid INTEGER NOT NULL, kind TEXT NOT NULL, "
            "seq INTEGER NOT NULL, PRIMARY KEY (sid, kind, seq)) WITHOUT ROWID",
            f"INSERT INTO rare_kinds(sid, kind, seq) SELECT sid, kind, seq FROM events "
            f"WHERE {RARE_KINDS_SQL}",
            "DROP INDEX events_rare_kind",
            *_immutable("rare_kinds"),
        ),
    ),
)
