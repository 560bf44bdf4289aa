"""`bubu rewind SESSION --to SEQ`: put the files back as they were at SEQ and fork the log there;
`bubu undo SESSION`: the same, to the start of the last turn.

The preview comes first (`bubu.engine.rewind.preview`): each file and what will happen to it,
and the commands whose effects cannot be undone. Then, once confirmed (``--yes``, or an answer
at the terminal), the restores and the fork are carried out as one recorded operation. Without
a terminal and without ``--yes`` the preview is printed and nothing is done (exit status 2).
A file changed since Bubu's last write is left alone unless it is named with ``--force-file``
or the user says so at the terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Sequence

import click

from bubu.cli.app import Ctx, cli, emit_json, fail, pass_ctx
from bubu.cli.term import printable
from bubu.engine.rewind import NoModel, Preview, preview, rewind, unfinished
from bubu.events import Record, SystemNote, TurnStarted
from bubu.log.store import Store
from bubu.projections.rewind import boundaries


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _complete_unfinished(store: Store, session: str) -> bool:
    """Finish a rewind of `session` that a crash interrupted (True when there was one)."""
    from bubu.engine.recovery import needs_recovery, recover_session
    from bubu.engine.session import Host

    info = store.session(session)
    if unfinished(store.read(info.id)) is None or not needs_recovery(store, info):
        return False
    host = Host(store=store, provider=NoModel(info.model or "none"), tools={})
    done = recover_session(host, info)
    click.echo(
        f"finished the rewind of {info.id} that was interrupted ({done.outcome or 'not ended'})",
        err=True,
    )
    return True


def run_rewind(
    store: Store,
    session: str,
    to: int,
    *,
    yes: bool,
    force: Collection[str] = (),
    delete: bool = True,
    as_json: bool = False,
) -> str | None:
    """Preview, confirm and carry out a rewind (or a fork that restores files, `delete` false);
    returns the new session's id, or None when nothing was done."""
    if _complete_unfinished(store, session):
        return None
    p = preview(store, session, to, delete=delete, force=force)
    if not as_json:
        for line in p.lines():
            click.echo(printable(line))
    if not yes:
        if not _interactive():
            if as_json:
                emit_json({"preview": p.to_json(), "done": None})
            click.echo(
                "bubu: nothing was done: confirm with --yes (the preview is above)", err=True
            )
            sys.exit(2)
        asked = _ask(store, p, force)
        if asked is None:
            click.echo("nothing was done")
            return None
        p = asked
    done = rewind(store, p)
    if as_json:
        emit_json({"preview": p.to_json(), "done": done.to_json()})
        return done.fork
    for path, text, failed in done.results:
        click.echo(printable(f"  {'failed ' if failed else ''}{path}: {text}"))
    click.echo(done.fork)
    click.echo(
        f"the fork {done.fork} starts at seq {done.to}; continue it with "
        f'`bubu run --session {done.fork} "…"`',
        err=True,
    )
    return done.fork


def _ask(store: Store, p: Preview, force: Collection[str]) -> Preview | None:
    """Ask about each file changed since Bubu's last write, then about the whole rewind."""
    named = list(force)
    for f in p.changed:
        if click.confirm(f"{f.path} was changed since Bubu's last write; overwrite it?"):
            named.append(f.path)
    if len(named) != len(force):
        p = preview(store, p.session, p.to, delete=p.delete, force=named)
        for line in p.lines():
            click.echo(printable(line))
    what = "restore these files and fork" if p.delete else "restore these files in a fork"
    if not click.confirm(f"{what} at seq {p.to}?"):
        return None
    return p


@cli.command("rewind")
@click.argument("session")
@click.option(
    "--to",
    "to",
    type=int,
    required=True,
    metavar="SEQ",
    help="The seq to go back to: a turn boundary (0: before the first request).",
)
@click.option("--yes", "-y", is_flag=True, help="Do it without asking (for scripts).")
@click.option(
    "--force-file",
    "force",
    multiple=True,
    metavar="PATH",
    help="Overwrite PATH even though it changed since Bubu's last write (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the preview and the result as JSON.")
@pass_ctx
def rewind_cmd(
    ctx: Ctx, /, *, session: str, to: int, yes: bool, force: tuple[str, ...], as_json: bool
) -> None:
    """Restore the files SESSION changed after SEQ and fork its log at SEQ.

    Shows what will happen to each file first. What commands changed is restored from the
    workspace snapshots; without them (snapshots off), commands' effects cannot be undone."""
    if to < 0:
        fail(f"--to {to} is negative; give a seq of the session (0 is before its first request)")
    run_rewind(ctx.store, session, to, yes=yes, force=force, as_json=as_json)


def last_turn_start(records: Sequence[Record]) -> int | None:
    """The boundary just before the session's last turn (what `bubu undo` rewinds to), or None
    when it has had no turn."""
    started = [
        r.seq
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
    ]
    if not started:
        return None
    before = [b for b in boundaries(records) if b < started[-1]]
    return before[-1] if before else None


@cli.command("undo")
@click.argument("session")
@click.option("--yes", "-y", is_flag=True, help="Do it without asking (for scripts).")
@click.option(
    "--force-file",
    "force",
    multiple=True,
    metavar="PATH",
    help="Overwrite PATH even though it changed since Bubu's last step (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the preview and the result as JSON.")
@pass_ctx
def undo_cmd(
    ctx: Ctx, /, *, session: str, yes: bool, force: tuple[str, ...], as_json: bool
) -> None:
    """Revert SESSION's last turn: the workspace as it was before it (what its commands did
    too), and the log forked there (`bubu rewind` to the start of that turn)."""
    info = ctx.store.session(session)
    to = last_turn_start(ctx.store.read(info.id))
    if to is None:
        fail(f"session {info.id} has no turn to undo")
    run_rewind(ctx.store, info.id, to, yes=yes, force=force, as_json=as_json)


__all__ = ["last_turn_start", "run_rewind"]
