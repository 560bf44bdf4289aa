"""The `bubu` command: thin commands over the log, the engine and the projections.

`main` first offers the command line to the read-only commands' fast path (`bubu.cli.fast`),
which runs `sessions`, `status`, `show`, `log`, `verify` and `context` without loading click when
it understands every word of it, and ends the process as soon as their output is out
(`bubu.cli.fast.leave`); anything else goes to the click group (`bubu.cli.app.cli`), unchanged.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bubu.cli.app import cli


def main() -> None:
    """Entry point: run the CLI; expected failures print one line, never a traceback."""
    from bubu.cli import fast

    try:
        ran = fast.run(sys.argv[1:])
    except SystemExit as e:  # a fast-path command's own exit status
        fast.leave(e.code)
    if ran:
        fast.leave(0)
    click_main()


def click_main() -> None:
    """The whole command line through click (what `main` does when the fast path declines)."""
    import click

    from bubu.cli.app import cli
    from bubu.cli.core import fail
    from bubu.errors import BubuError

    try:
        cli.main(standalone_mode=False, prog_name="bubu")
    except click.exceptions.Abort:
        click.echo("bubu: aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except BubuError as e:
        fail(str(e), e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)


def __getattr__(name: str) -> Any:
    """`bubu.cli.cli` and `bubu.cli.fail`, loaded on first use (the fast path needs neither)."""
    if name == "cli":
        from bubu.cli.app import cli

        return cli
    if name == "fail":
        from bubu.cli.core import fail

        return fail
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["cli", "click_main", "main"]
