"""`--db` after the subcommand too (`bubu sessions --db x.db` as well as `bubu --db x.db
sessions`), for every command: people put options where they remember them."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import click

HELP = "The log database (as `bubu --db`); accepted after the command name too."


@runtime_checkable
class _HoldsDb(Protocol):
    """The per-invocation state (`bubu.cli.app.Ctx`) as far as `--db` sets it."""

    db: str | None


def _set_db(ctx: click.Context, _: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    node: click.Context | None = ctx
    while node is not None and not isinstance(node.obj, _HoldsDb):
        node = node.parent
    if node is not None:
        node.obj.db = value


def accept_db(command: click.Command) -> None:
    """Give `command` (and its subcommands) a `--db` option that sets the global one; commands
    with a `--db` of their own keep it."""
    if not any("--db" in getattr(p, "opts", ()) for p in command.params):
        command.params.append(
            click.Option(
                ["--db"],
                metavar="PATH|URL",
                default=None,
                expose_value=False,
                is_eager=True,
                callback=_set_db,
                help=HELP,
            )
        )
    if isinstance(command, click.Group):
        accept_db_everywhere(command)


def accept_db_everywhere(group: click.Group) -> None:
    """`accept_db` for every command of `group`."""
    for command in group.commands.values():
        accept_db(command)
