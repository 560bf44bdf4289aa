"""A click group that imports a command's module only when the command runs or shows its help.

Each command module registers its commands on the group when imported; the group knows from a
table which module holds a command, and the command's one-line help, so `bubu --help` lists every
command without importing any of them and `bubu status` imports only what `status` uses.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True, slots=True, kw_only=True)
class Lazy:
    """Where a command lives and its short help (the first sentence of its docstring)."""

    module: str
    short_help: str


class LazyGroup(click.Group):
    """A group whose commands are listed from a table and imported on first use."""

    def __init__(
        self,
        *args: Any,
        lazy: Mapping[str, Lazy],
        prepare: Callable[[click.Command], None] = lambda _: None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)
        self.prepare = prepare  # applied once to each command before its first use
        self._prepared: set[str] = set()

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command, loaded or not, by name."""
        return sorted(self.commands.keys() | self.lazy.keys())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command named `cmd_name`, importing its module first if needed."""
        if cmd_name not in self.commands and cmd_name in self.lazy:
            importlib.import_module(self.lazy[cmd_name].module)
            if cmd_name not in self.commands:  # the table names the wrong module
                raise RuntimeError(f"{self.lazy[cmd_name].module} defines no {cmd_name!r}")
        command = self.commands.get(cmd_name)
        if command is not None and cmd_name not in self._prepared:
            self.prepare(command)
            self._prepared.add(cmd_name)
        return command

    def load_all(self, ctx: click.Context) -> None:
        """Import and prepare every command (for what walks the whole command tree)."""
        for name in self.list_commands(ctx):
            self.get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of `--help`, from the table for commands not yet imported."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            command = self.commands.get(name)
            if command is None:
                stand_in = click.Command(name, help=self.lazy[name].short_help)  # click shortens it
                rows.append((name, stand_in.get_short_help_str(limit)))
            elif not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)
