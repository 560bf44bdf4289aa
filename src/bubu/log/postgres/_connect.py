"""Reaching the server: the URL, the connection's settings, and psycopg errors translated into
Bubu's error tree (each one sentence a user can act on)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pge
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bubu.errors import BubuError, ConfigError, StorageError

Row = tuple[Any, ...]
Connection = psycopg.Connection[Row]

DEFAULT_SCHEMA = "bubu"

SETTINGS = {
    # A writer frozen inside a transaction (SIGSTOP, a debugger) must not hold a session forever:
    # the server ends its connection (which also fences it) before a waiting writer gives up.
    "idle_in_transaction_session_timeout": "30s",
    "lock_timeout": "60s",
}

_LOST = (
    "lost the connection to PostgreSQL at {where} ({detail}); the last write may or may not "
    "have committed, so re-read the log and retry"
)


def where_of(params: Mapping[str, object]) -> str:
    """`user@host:port/dbname` from libpq connection parameters, without the password."""
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = str(params.get("port") or "5432")
    user = params.get("user")
    db = params.get("dbname") or user or ""
    return f"{f'{user}@' if user else ''}{host}:{port}/{db}"


def _detail(e: psycopg.Error) -> str:
    diag = getattr(e, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    text = primary or str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else type(e).__name__
    # libpq prefixes connection failures with where it tried; the URL already says that.
    for marker in ("failed: FATAL:", "failed:"):
        if marker in first:
            first = first.rsplit(marker, 1)[1].strip()
            break
    return first.removeprefix("connection failed:").strip().rstrip(".")


def _connect_error(where: str, detail: str, connecting: bool) -> BubuError:
    low = detail.lower()
    if any(s in low for s in ("connection refused", "no such file or directory", "timeout")):
        return StorageError(f"cannot reach PostgreSQL at {where}; is the server running?")
    if "resolve host" in low or "translate host name" in low:
        return StorageError(f"cannot resolve the host of {where} ({detail}); check the URL")
    if "database" in low and "does not exist" in low:
        db = where.rsplit("/", 1)[-1]
        return StorageError(
            f"the database {db} does not exist at {where}; create it with `createdb {db}` "
            "or fix the URL"
        )
    if any(
        s in low for s in ("authentication", "password", "role", "pg_hba.conf", "permission denied")
    ):
        return StorageError(
            f"PostgreSQL at {where} refused the login ({detail}); check the user and password "
            "in the URL"
        )
    if connecting:
        return StorageError(
            f"cannot connect to PostgreSQL at {where} ({detail}); check the URL and the server"
        )
    return StorageError(_LOST.format(where=where, detail=detail))


def pg_error(where: str, e: psycopg.Error, *, connecting: bool = False) -> BubuError:
    """The Bubu error for a psycopg failure talking to the server at `where`."""
    detail = _detail(e)
    if connecting or (isinstance(e, psycopg.OperationalError) and e.sqlstate is None):
        return _connect_error(where, detail, connecting)
    match e:
        case pge.AdminShutdown() | pge.IdleInTransactionSessionTimeout() | pge.CrashShutdown():
            return StorageError(_LOST.format(where=where, detail=detail))
        case pge.LockNotAvailable():
            return StorageError(
                f"a session at {where} stayed locked by another writer ({detail}); try again"
            )
        case pge.DeadlockDetected() | pge.SerializationFailure():
            return StorageError(
                f"a write at {where} collided with another writer ({detail}); try again"
            )
        case pge.InsufficientPrivilege():
            return StorageError(
                f"the PostgreSQL user at {where} lacks a privilege ({detail}); grant it or use "
                "another user"
            )
        case pge.DiskFull() | pge.OutOfMemory():
            return StorageError(f"PostgreSQL at {where} is out of space ({detail}); free some")
        case pge.ReadOnlySqlTransaction():
            return StorageError(
                f"PostgreSQL at {where} is read-only ({detail}); point --db at the primary"
            )
        case pge.IntegrityConstraintViolation() if detail.startswith("bubu:"):
            return StorageError(
                f"PostgreSQL refused the write ({detail.removeprefix('bubu: ')}); the log only "
                "grows by appending"
            )
        case pge.UndefinedTable() | pge.UndefinedFunction() | pge.UndefinedColumn():
            return StorageError(
                f"the Bubu tables at {where} are missing or damaged ({detail}); point --db at "
                "another schema or restore it"
            )
        case _:
            return StorageError(f"PostgreSQL at {where} failed: {detail}")


def split_url(url: str) -> tuple[str, str | None]:
    """The libpq URL without Bubu's `schema=` query parameter, and that parameter (if any)."""
    try:
        parts = urlsplit(url)
    except ValueError as e:  # e.g. an unclosed [ of an IPv6 host; the URL may hold a password
        raise ConfigError(f"the PostgreSQL URL is not valid ({e}); check the URL") from e
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    if schema is None:
        return url, None
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """Where a store lives: libpq connection info, the schema, and a printable name."""

    conninfo: str
    schema: str
    where: str

    @classmethod
    def parse(cls, url: str, schema: str | None) -> Target:
        """The target named by a postgresql:// URL (`?schema=` or `schema` picks the schema)."""
        conninfo, url_schema = split_url(url)
        try:
            params = conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as e:
            raise StorageError(f"the PostgreSQL URL is not usable ({_detail(e)}); fix --db") from e
        defaults = {"connect_timeout": "10", "application_name": "bubu"}
        extra = {k: v for k, v in defaults.items() if k not in params}
        return cls(
            conninfo=make_conninfo(conninfo, **extra) if extra else conninfo,
            schema=schema or url_schema or DEFAULT_SCHEMA,
            where=where_of(params),
        )

    def connect(self) -> Connection:
        """A new autocommit connection whose search_path is the store's schema."""
        try:
            db = psycopg.connect(
                self.conninfo,
                autocommit=True,
            )
        except psycopg.Error as e:
            raise pg_error(self.where, e, connecting=True) from e
        try:
            settings = {"search_path": sql.Identifier(self.schema).as_string(db), **SETTINGS}
            db.execute(
                "SELECT " + ", ".join("set_config(%s, %s, false)" for _ in settings),
                [x for kv in settings.items() for x in kv],
            )
        except psycopg.Error as e:
            db.close()
            raise pg_error(self.where, e) from e
        return db
