"""The durable log: the store contract and its backends."""

from __future__ import annotations

import os
from pathlib import Path

from bubu.errors import ConfigError
from bubu.log.store import Appended, Durability, Head, Lease, SessionInfo, Store, VerifyReport, View

__all__ = [
    "Appended",
    "Durability",
    "Head",
    "Lease",
    "SessionInfo",
    "Store",
    "VerifyReport",
    "View",
    "default_db",
    "make_home",
    "open_store",
]


def make_home(home: Path) -> None:
    """Create the Bubu home directory `home` if missing, mode 0700: it holds the log, the chat
    history and the background logs, which only their owner should read. An existing one is kept
    as it is."""
    if home.is_dir():
        return
    home.parent.mkdir(parents=True, exist_ok=True)
    try:
        home.mkdir(mode=0o700)
    except FileExistsError:
        if not home.is_dir():
            raise
        return  # made by another process meanwhile
    os.chmod(home, 0o700)  # whatever the umask


def default_db() -> str:
    """The database named by BUBU_DB, else `$BUBU_HOME/bubu.db` (BUBU_HOME defaults to ~/.bubu)."""
    env = os.environ.get("BUBU_DB")
    if env:
        return env
    home = Path(os.environ.get("BUBU_HOME") or Path.home() / ".bubu").expanduser()
    try:
        make_home(home)
    except FileExistsError as e:
        raise ConfigError(
            f"BUBU_HOME is {home}, which is a file, not a directory; point BUBU_HOME at a "
            "directory (or unset it for ~/.bubu)"
        ) from e
    except OSError as e:
        raise ConfigError(
            f"cannot create the Bubu home directory {home} ({e.strerror}); point BUBU_HOME at a "
            "directory you can write"
        ) from e
    return str(home / "bubu.db")


def open_store(
    db: str | None = None, *, durability: Durability = "adaptive", readonly: bool = False
) -> Store:
    """Open the store at `db` (a path, or a postgresql:// URL); default as `default_db`.
    `readonly`: for a command that only reads; a SQLite file is then never created or migrated."""
    target = db or default_db()
    if target.startswith(("postgresql://", "postgres://")):
        try:
            from bubu.log.postgres import PostgresStore
        except ImportError as e:
            from bubu.extras import install_hint

            raise ConfigError(
                f"PostgreSQL support needs psycopg; {install_hint('postgres')}"
            ) from e
        return PostgresStore(target, durability=durability)
    from bubu.log.sqlite import SQLiteStore

    return SQLiteStore(target, durability=durability, readonly=readonly)
