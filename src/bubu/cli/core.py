"""What every command shares that needs no click: the per-invocation state, the output helpers
and the one-line failure, so that the read-only commands' fast path (`bubu.cli.fast`) runs them
without loading the command line's framework."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from bubu.log import Store


class Ctx:
    """Per-invocation state: the --db option and a lazily opened store."""

    def __init__(self, db: str | None, *, readonly: bool = False) -> None:
        self.db = db
        self.readonly = readonly
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        """The store named by --db / BUBU_DB / BUBU_HOME, opened on first use."""
        if self._store is None:
            from bubu.log import open_store  # `bubu --help` needs no store

            self._store = open_store(self.db, readonly=self.readonly)
        return self._store

    def close(self) -> None:
        """Close the store if it was opened."""
        if self._store is not None:
            self._store.close()


READ_ONLY_COMMANDS = frozenset({"sessions", "show", "status", "log", "verify", "export", "context"})
"""Commands that only read the log: they never create, migrate or write the database."""


def echo(text: str = "", *, err: bool = False) -> None:
    """One line on stdout (or stderr), as `click.echo` writes a string (`term.plain_echo`)."""
    from bubu.cli.term import plain_echo

    plain_echo(text, err=err)


def to_builtins(obj: Any) -> Any:
    """Plain JSON-able data from dataclasses, Structs and containers."""
    import msgspec  # `bubu --help` prints no JSON

    return msgspec.to_builtins(obj, order="sorted")


def emit_json(obj: Any) -> None:
    """Print one JSON document (stable, sorted keys) on stdout."""
    import msgspec

    text = msgspec.json.format(msgspec.json.encode(to_builtins(obj), order="sorted"), indent=2)
    sys.stdout.write(text.decode() + "\n")


def emit_jsonl(obj: Any) -> None:
    """Print one compact JSON line on stdout."""
    import msgspec

    sys.stdout.buffer.write(msgspec.json.encode(to_builtins(obj), order="sorted") + b"\n")
    sys.stdout.flush()


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `bubu: error: message` on stderr and exit with `code`."""
    from bubu.cli.term import printable  # messages can quote a model's or a server's words

    echo(f"bubu: error: {printable(message)}", err=True)
    sys.exit(code)
