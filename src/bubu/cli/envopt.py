"""The ``--env NAME`` option: secret environment variables passed on to commands by name."""

from __future__ import annotations

import os
from collections.abc import Callable

import click

from bubu.secrets import check_name

Callback = Callable[[click.Context, click.Parameter, tuple[str, ...]], tuple[str, ...]]


def env_names(*, must_be_set: bool) -> Callback:
    """A click callback checking each --env NAME: a variable name (never NAME=value), and set in
    this environment when `must_be_set` (a fleet's values come from the workers' instead)."""

    def check(_: click.Context, param: click.Parameter, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            try:
                check_name(name)
            except ValueError as e:
                raise click.BadParameter(str(e), param=param) from None
            if must_be_set and name not in os.environ:
                raise click.BadParameter(
                    f"{name} is not set in the environment; export it first", param=param
                )
        return tuple(dict.fromkeys(names))

    return check


ENV_HELP = (
    "Pass the secret environment variable NAME on to commands and MCP servers "
    "(repeatable; its value is still redacted in the log)."
)
