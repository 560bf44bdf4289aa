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
"""The kinds almost every append has; they are read by seq range, never by kind."""
RARE_KINDS_SQL = "kind NOT IN ('text', 'thinking', 'function_call', 'function_response')"
"""The partial index's condition; a query must repeat it verbatim for the index to be used."""

SQLITE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "log, sessions, blobs, leases, views",
        (
            "CREATE TABLE sessions(sid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, "
            "title TEXT NOT NULL, workspace TEXT NOT NULL, model TEXT, created_ms INTEGER NOT NULL, "
            "last_ms INTEGER)",
            "CREATE TABLE events(sid INTEGER NOT NULL REFERENCES sessions(sid), "
            "seq INTEGER NOT NULL CHECK (seq > 0), kind TEXT NOT NULL, payload BLOB NOT NULL, "
            "hash BLOB NOT NULL CHECK (length(hash) = 32))",
            "CREATE UNIQUE INDEX events_seq ON events(sid, seq)",
            "CREATE INDEX events_kind ON events(sid, kind, seq)",
            # Gapless per-session seq, enforced by the database as well as by the code.
            "CREATE TRIGGER events_gapless BEFORE INSERT ON events "
            "WHEN NEW.seq != coalesce((SELECT max(seq) FROM events WHERE sid = NEW.sid), 0) + 1 "
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
        "index kinds only for the rare (boundary) events",
        (
            # The bulk kinds make up nearly every append; indexing them by kind costs a b-tree
            # page per commit and buys nothing (nobody reads "all the text events" by index).
            "DROP INDEX events_kind",
            f"CREATE INDEX events_rare_kind ON events(sid, kind, seq) WHERE {RARE_KINDS_SQL}",
        ),
    ),
)
