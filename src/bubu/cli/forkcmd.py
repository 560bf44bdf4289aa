"""`bubu fork SESSION --at SEQ`: a new session whose log begins with a verified copy of a prefix
(`bubu.engine.fork` makes it)."""

from __future__ import annotations

import click

from bubu.cli.app import Ctx, cli, emit_json, pass_ctx
from bubu.engine.fork import FORK_KEY, Fork, fork_session
from bubu.errors import ConfigError


@cli.command("fork")
@click.argument("session")
@click.option("--at", "at", type=int, required=True, metavar="SEQ", help="The last seq to copy.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--restore-files",
    is_flag=True,
    help="Also put back the files SESSION changed after SEQ (deleting none).",
)
@click.option("--yes", "-y", is_flag=True, help="With --restore-files: do it without asking.")
@click.option(
    "--force-file",
    "force",
    multiple=True,
    metavar="PATH",
    help="With --restore-files: overwrite PATH though it changed since Bubu's last write.",
)
@pass_ctx
def fork_cmd(
    ctx: Ctx,
    /,
    *,
    session: str,
    at: int,
    as_json: bool,
    restore_files: bool,
    yes: bool,
    force: tuple[str, ...],
) -> None:
    """Start a new session from events 1..SEQ of SESSION (verified first) and print its id."""
    if restore_files:
        from bubu.cli.rewindcmd import run_rewind

        run_rewind(ctx.store, session, at, yes=yes, force=force, delete=False, as_json=as_json)
        return
    if yes or force:
        raise ConfigError("--yes and --force-file go with --restore-files")
    fork = fork_session(ctx.store, session, at)
    if as_json:
        emit_json(
            {
                "session": fork.session,
                "source": {"session": fork.source, "seq": fork.seq, "digest": fork.digest},
                "events": fork.events,
                "open_turn": fork.open_turn,
                "dangling_calls": fork.dangling_calls,
            }
        )
        return
    click.echo(fork.session)
    if fork.open_turn:
        calls = (
            f" with {fork.dangling_calls} dispatched call(s) without an outcome"
            if fork.dangling_calls
            else ""
        )
        click.echo(
            f"the fork starts inside an open turn{calls}; it is not continued by itself: "
            f"`bubu recover {fork.session}` continues it, as after a crash",
            err=True,
        )


__all__ = ["FORK_KEY", "Fork", "fork_session"]
