"""Search sessions by what was said in them: a derived full-text index of the transcript.

What is indexed: the user's requests, the model's text, its tool calls (the tool's name and its
arguments' values: commands, paths, patterns) and the tool results the model saw (their first
`RESULT_CHARS` characters, the placeholder of an offloaded one). The index is a derived
store (DESIGN §1): it records, per session, the seq and chain digest it was built up to, is caught
up idempotently before every search (in one transaction, so two searchers never index an event
twice), and is rebuilt for a session whose log no longer has that digest at that seq. The log
stays the only truth; dropping the index loses nothing. An existing database gets its index on
the first search; a database that cannot be written is searched by reading the log itself.

- SQLite: an FTS5 table (``unicode61`` tokens).
- PostgreSQL: ``to_tsvector('simple', …)`` with a GIN index.

Both index the same normalised text (lower-case runs of letters and digits), so the same data
gives the same results on both. A query is plain words and ``"quoted phrases"``: every one must
occur; a word (or a phrase's last word) ending in ``*`` matches as a prefix (``pyte*`` finds
``pytest``); FTS5 operators and other punctuation are taken as words, never as syntax.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from bubu.events import FunctionCall, FunctionResponse, Record, Text
from bubu.log.store import Store

RESULT_CHARS = 4000
"""How much of a tool result is indexed."""
KINDS = ("text", "function_call", "function_response")
PREFIX = "*"
"""Ends a term's last word that matches as a prefix (kept on that word in `terms`)."""

_WORD = re.compile(r"[^\W_]+")
_VERSION = "v2:"
"""Marks the digests an index of this content records: rows of an older index (which held no
tool calls) do not match, so their sessions are rebuilt on the next search."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Hit:
    """A session that matches, where it first matches and a snippet of the match."""

    session: str
    seq: int
    snippet: str


def words(text: str) -> list[str]:
    """The normalised words of `text`: what is indexed and what is looked for."""
    return _WORD.findall(text.lower())


def terms(query: str) -> list[list[str]]:
    """A query as terms that must all occur: each a phrase (a list of consecutive words), whose
    last word ends in `PREFIX` when it matches as a prefix."""
    out: list[list[str]] = []
    parts = query.split('"')
    for i, part in enumerate(parts):
        if i % 2:  # inside quotes: one phrase, a prefix if a * follows the closing quote
            ws = words(part)
            if ws:
                after = parts[i + 1] if i + 1 < len(parts) else ""
                if after.startswith(PREFIX):
                    ws[-1] += PREFIX
                out.append(ws)
        else:
            for raw in part.split():
                # A leading * is the mark of the phrase before.
                token = raw[1:] if i and raw.startswith(PREFIX) and out else raw
                ws = words(token)
                if ws and token.endswith(PREFIX):
                    ws[-1] += PREFIX
                out.extend([w] for w in ws[:-1])
                if ws:
                    out.append([ws[-1]])
    return out


def _plain(term: Sequence[str]) -> str:
    """A term's words as indexed text (its prefix mark dropped)."""
    return " ".join(term).removesuffix(PREFIX)


def _call_text(c: FunctionCall) -> str:
    """A tool call as indexed: the tool's name, then its arguments' values (or their raw text)."""
    if c.raw_arguments is not None:
        return f"{c.name} {c.raw_arguments}"
    values: list[str] = []

    def walk(v: object) -> None:
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif v is not None:
            values.append(str(v))

    walk(c.arguments)
    return " ".join([c.name, *values])[:RESULT_CHARS]


def indexed_text(r: Record) -> str | None:
    """What of an event is indexed, or None."""
    c = r.event.content
    if (
        isinstance(c, Text)
        and r.event.visibility == "visible"
        and r.event.role in ("user", "model")
    ):
        return c.text
    if isinstance(c, FunctionResponse) and r.event.visibility == "visible":
        return c.result[:RESULT_CHARS]
    if isinstance(c, FunctionCall) and r.event.role == "model":
        return _call_text(c)
    return None


def snippet(text: str, found: Sequence[Sequence[str]], width: int = 70) -> str:
    """A short excerpt of `text` around the first term, on one line."""
    flat = " ".join(text.split())
    low = flat.lower()
    at = min((i for t in found if (i := low.find(t[0].removesuffix(PREFIX))) >= 0), default=0)
    start = max(0, at - width // 3)
    cut = flat[start : start + width]
    return ("…" if start else "") + cut + ("…" if start + width < len(flat) else "")


def search(store: Store, query: str, *, limit: int = 100) -> list[Hit]:
    """The sessions whose transcript holds every term of `query`, newest first (one hit each)."""
    found = terms(query)
    if not found:
        return []
    from bubu.log.sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        rows = _SQLite(store).search(found)
    else:
        from bubu.log.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        rows = _Postgres(store).search(found)
    first: dict[str, tuple[int, str]] = {}
    for session, seq, body in rows:
        if session not in first or seq < first[session][0]:
            first[session] = (seq, body)
    hits = []
    for info in store.sessions():
        if info.id in first:
            seq, body = first[info.id]
            hits.append(Hit(session=info.id, seq=seq, snippet=snippet(body, found)))
    return hits[:limit]


def matching(store: Store, query: str) -> dict[str, dict[str, object]]:
    """Sessions whose title or transcript holds every term of `query`: id -> the match (its seq,
    0 for the title, and a snippet)."""
    found = terms(query)
    out: dict[str, dict[str, object]] = {
        h.session: {"seq": h.seq, "snippet": h.snippet} for h in search(store, query)
    }
    for info in store.sessions():
        title = " ".join(words(info.title))
        if info.id not in out and found and all(_plain(t) in title for t in found):
            out[info.id] = {"seq": 0, "snippet": snippet(info.title, found)}
    return out


def _todo(
    store: Store, done: dict[str, tuple[int, str]]
) -> Iterator[tuple[str, list[Record], bool]]:
    """Per session: the records to index and whether its rows must be dropped first."""
    for info in store.sessions():
        hw, digest = done.get(info.id, (0, ""))
        if hw and not digest.startswith(_VERSION):
            yield info.id, store.read(info.id), True  # an older index's rows: built anew
            continue
        if info.high_water == hw:
            continue  # nothing new (the log only grows; a replaced one is seen when it differs)
        rebuild = False
        if hw:
            at = store.read(info.id, after=hw - 1, upto=hw)
            if not at or _VERSION + at[0].hash != digest:
                rebuild, hw = True, 0
        if info.high_water > hw or rebuild:
            yield info.id, store.read(info.id, after=hw), rebuild


def _scan(store: Store, found: list[list[str]]) -> list[tuple[str, int, str]]:
    """The search without an index: every term's words, consecutive, in one event."""
    out = []
    for info in store.sessions():
        for r in store.read(info.id, kinds=KINDS):
            text = indexed_text(r)
            if text is None:
                continue
            padded = f" {' '.join(words(text))} "
            if all(f" {_plain(t)}{'' if t[-1].endswith(PREFIX) else ' '}" in padded for t in found):
                out.append((info.id, r.seq, text))
    return out


class _SQLite:
    def __init__(self, store: Store) -> None:
        from bubu.log.sqlite import SQLiteStore

        assert isinstance(store, SQLiteStore)
        self.store = store
        self.db = store._db

    def _tables(self, schema: str) -> None:
        self.db.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {schema}.search_fts USING fts5("
            "session UNINDEXED, seq UNINDEXED, body UNINDEXED, words, "
            "tokenize='unicode61 remove_diacritics 0')"
        )
        self.db.execute(
            f"CREATE TABLE IF NOT EXISTS {schema}.search_done(session TEXT PRIMARY KEY, "
            "high_water INTEGER NOT NULL, digest TEXT NOT NULL)"
        )

    def search(self, found: list[list[str]]) -> list[tuple[str, int, str]]:
        try:
            self._index("main")
        except sqlite3.OperationalError as e:
            if "readonly" not in str(e) and "read-only" not in str(e):
                raise
            return _scan(self.store, found)  # the index cannot be written: read the log itself
        match = " AND ".join(
            '"' + _plain(t) + '"' + (" *" if t[-1].endswith(PREFIX) else "") for t in found
        )
        with self.store._lock:
            rows = self.db.execute(
                "SELECT session, seq, body FROM main.search_fts WHERE search_fts MATCH ?",
                (match,),
            ).fetchall()
        return [(str(s), int(q), str(b)) for s, q, b in rows]

    def _index(self, schema: str) -> None:
        db = self.db
        with self.store._lock:
            db.execute("BEGIN IMMEDIATE" if schema == "main" else "BEGIN")
            try:
                self._tables(schema)
                done = {
                    str(s): (int(h), str(d))
                    for s, h, d in db.execute(
                        f"SELECT session, high_water, digest FROM {schema}.search_done"
                    )
                }
                for session, records, rebuild in _todo(self.store, done):
                    if rebuild:
                        db.execute(f"DELETE FROM {schema}.search_fts WHERE session=?", (session,))
                    rows = [
                        (session, r.seq, text, " ".join(words(text)))
                        for r in records
                        if (text := indexed_text(r))
                    ]
                    db.executemany(
                        f"INSERT INTO {schema}.search_fts(session, seq, body, words)"
                        " VALUES (?,?,?,?)",
                        rows,
                    )
                    head = self.store.head(session)
                    db.execute(
                        f"INSERT OR REPLACE INTO {schema}.search_done(session, high_water, digest) "
                        "VALUES (?,?,?)",
                        (session, head.high_water, _VERSION + head.digest),
                    )
                db.execute("COMMIT")
            except BaseException:  # undone, then re-raised: Ctrl-C and exits too
                db.execute("ROLLBACK")
                raise


class _Postgres:
    def __init__(self, store: Store) -> None:
        from bubu.log.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        self.store = store

    def search(self, found: list[list[str]]) -> list[tuple[str, int, str]]:
        self._catch_up()
        # Words are runs of letters and digits, so a term written as tsquery text is safe.
        q = " && ".join(["to_tsquery('simple', %s)"] * len(found))
        as_query = [
            " <-> ".join(w.removesuffix(PREFIX) + (":*" if w.endswith(PREFIX) else "") for w in t)
            for t in found
        ]
        with self.store._using() as db:
            rows = db.execute(
                f"SELECT session, seq, body FROM search_docs WHERE tsv @@ ({q})", as_query
            ).fetchall()
        return [(str(s), int(q_), str(b)) for s, q_, b in rows]

    def _catch_up(self) -> None:
        with self.store._using() as db, db.transaction():
            db.execute(
                "CREATE TABLE IF NOT EXISTS search_docs(session text NOT NULL, "
                "seq bigint NOT NULL, body text NOT NULL, tsv tsvector NOT NULL, "
                "PRIMARY KEY(session, seq))"
            )
            db.execute("CREATE INDEX IF NOT EXISTS search_docs_tsv ON search_docs USING GIN(tsv)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS search_done(session text PRIMARY KEY, "
                "high_water bigint NOT NULL, digest text NOT NULL)"
            )
            db.execute("LOCK TABLE search_done IN EXCLUSIVE MODE")
            done = {
                str(s): (int(h), str(d))
                for s, h, d in db.execute("SELECT session, high_water, digest FROM search_done")
            }
        # The store's reads take the same connection: gather first, then write in one transaction.
        todo = [
            (s, [(r.seq, t) for r in recs if (t := indexed_text(r))], rebuild, self.store.head(s))
            for s, recs, rebuild in _todo(self.store, done)
        ]
        if not todo:
            return
        with self.store._using() as db, db.transaction():
            for session, rows, rebuild, head in todo:
                if rebuild:
                    db.execute("DELETE FROM search_docs WHERE session = %s", [session])
                with db.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO search_docs(session, seq, body, tsv) VALUES "
                        "(%s, %s, %s, to_tsvector('simple', %s)) ON CONFLICT DO NOTHING",
                        [(session, seq, text, " ".join(words(text))) for seq, text in rows],
                    )
                db.execute(
                    "INSERT INTO search_done(session, high_water, digest) VALUES (%s, %s, %s) "
                    "ON CONFLICT (session) DO UPDATE SET high_water = EXCLUDED.high_water, "
                    "digest = EXCLUDED.digest",
                    [session, head.high_water, _VERSION + head.digest],
                )


__all__ = ["Hit", "matching", "search", "terms", "words"]
