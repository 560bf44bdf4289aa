"""The click group and what every command shares: the store option and the output helpers."""

from __future__ import annotations

import importlib
import sys
from typing import Any, NoReturn

import click
import msgspec

from bubu.log import Store, open_store


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
            self._store = open_store(self.db, readonly=self.readonly)
        return self._store

    def close(self) -> None:
        """Close the store if it was opened."""
        if self._store is not None:
            self._store.close()


pass_ctx = click.make_pass_decorator(Ctx)

READ_ONLY_COMMANDS = frozenset({"sessions", "show", "status", "log", "verify", "export", "context"})
"""Commands that only read the log: they never create, migrate or write the database."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.option(
    "--db",
    envvar="BUBU_DB",
    default=None,
    metavar="PATH|URL",
    help="The log database: a SQLite path or a postgresql:// URL (default $BUBU_HOME/bubu.db).",
)
@click.version_option(package_name="bubu-agent", prog_name="bubu")
@click.pass_context
def cli(ctx: click.Context, db: str | None) -> None:
    """Bubu: a coding agent for long tasks whose runtime is an append-only log."""
    state = Ctx(db, readonly=ctx.invoked_subcommand in READ_ONLY_COMMANDS)
    ctx.obj = state
    ctx.call_on_close(state.close)
    if ctx.invoked_subcommand is None:  # plain `bubu`: a chat on a terminal, else the help
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise click.exceptions.NoArgsIsHelpError(ctx)
        chat = cli.commands["chat"]
        with chat.make_context("chat", [], parent=ctx) as sub:
            chat.invoke(sub)


_json = msgspec.json.Encoder(order="sorted")


def to_builtins(obj: Any) -> Any:
    """Plain JSON-able data from dataclasses, Structs and containers."""
    return msgspec.to_builtins(obj, order="sorted")


def emit_json(obj: Any) -> None:
    """Print one JSON document (stable, sorted keys) on stdout."""
    sys.stdout.write(msgspec.json.format(_json.encode(to_builtins(obj)), indent=2).decode() + "\n")


def emit_jsonl(obj: Any) -> None:
    """Print one compact JSON line on stdout."""
    sys.stdout.buffer.write(_json.encode(to_builtins(obj)) + b"\n")
    sys.stdout.flush()


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `bubu: error: message` on stderr and exit with `code`."""
    from bubu.cli.term import printable  # messages can quote a model's or a server's words

    click.echo(f"bubu: error: {printable(message)}", err=True)
    sys.exit(code)


# Command modules register themselves on `cli` when imported.
for _module in (
    "logcmds",
    "agentcmds",
    "recovercmds",
    "democmd",
    "storecmds",
    "contextcmd",
    "uicmd",
    "forkcmd",
    "fleetcmds",
    "compactcmd",
    "memorycmd",
    "chat",
    "rewindcmd",
    "workspacecmds",
):
    importlib.import_module(f"bubu.cli.{_module}")

from bubu.cli.dbopt import accept_db_everywhere  # noqa: E402  # after every command registered

accept_db_everywhere(cli)
