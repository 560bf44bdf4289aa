"""The `bubu` command: thin commands over the log, the engine and the projections."""

from __future__ import annotations

import sys

import click

from bubu.cli.app import cli, fail


def main() -> None:
    """Entry point: run the CLI; expected failures print one line, never a traceback."""
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


__all__ = ["cli", "main"]
