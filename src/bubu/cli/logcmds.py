"""Commands that look inside the log: sessions, log, verify, export, import."""

from __future__ import annotations

import sys

import click
import msgspec

from bubu.cli import reading
from bubu.cli.app import Ctx, cli, emit_jsonl, fail, pass_ctx
from bubu.cli.states import STATES, check_state
from bubu.cli.term import printable
from bubu.errors import BubuError, CorruptLog
from bubu.lines import LineTooLong
from bubu.log.store import SessionInfo, Store
from bubu.projections.status import BOUNDARY_KINDS, fold_status


@cli.command("sessions")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--status",
    "status_filter",
    default=None,
    metavar="STATE",
    callback=lambda _c, _p, v: check_state(v),
    help=f"Only sessions in this state: {', '.join(STATES)}.",
)
@click.option(
    "--search",
    "text",
    default=None,
    metavar="TEXT",
    help='Only sessions whose title or transcript holds every word ("a phrase" too).',
)
@pass_ctx
def sessions_cmd(ctx: Ctx, as_json: bool, status_filter: str | None, text: str | None) -> None:
    """List sessions, newest first, with their status derived from the log."""
    reading.sessions(ctx, as_json, status_filter, text)


@cli.command("log")
@click.argument("session")
@click.option(
    "--jsonl", is_flag=True, help="One canonical JSON event per line (with seq and hash)."
)
@click.option("--after", type=int, default=0, help="Only events after this seq.")
@pass_ctx
def log_cmd(ctx: Ctx, session: str, jsonl: bool, after: int) -> None:
    """Print a session's events in seq order."""
    reading.log(ctx, session, jsonl, after)


@cli.command("verify")
@click.argument("session", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def verify_cmd(ctx: Ctx, session: str | None, as_json: bool) -> None:
    """Recompute the hash chain of one session (or all); exit 1 if anything is wrong."""
    reading.verify(ctx, session, as_json)


@cli.command("export")
@click.argument("session")
@pass_ctx
def export_cmd(ctx: Ctx, session: str) -> None:
    """Write a session (header, then one event per line) as JSONL to stdout."""
    info = ctx.store.session(session)
    from bubu.log.transfer import export_lines  # only export and import move whole sessions

    for line in export_lines(ctx.store, info):
        sys.stdout.buffer.write(line + b"\n")
    sys.stdout.flush()


@cli.command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def import_cmd(ctx: Ctx, file: str, as_json: bool) -> None:
    """Import a session exported with `bubu export`; refuses a file whose chain does not verify."""
    from bubu.log.transfer import import_file, import_source

    try:
        source = import_source(file)
    except OSError as e:
        fail(f"cannot read {file}: {e.strerror}")
    except LineTooLong as e:
        fail(f"refused to import {file}: {e}")
    try:
        with source:
            info, head = import_file(ctx.store, source)
    except OSError as e:
        fail(f"cannot read {file}: {e.strerror}")
    except LineTooLong as e:
        fail(f"refused to import {file}: {e}")
    except (CorruptLog, msgspec.DecodeError) as e:
        fail(f"refused to import {file}: {e}")
    except BubuError as e:
        fail(f"refused to import {file}: {e}")
    if as_json:
        emit_jsonl({"session": info.id, "high_water": head.high_water, "digest": head.digest})
    else:
        click.echo(f"imported {info.id}: {head.high_water} events, digest {head.digest[:16]}")
    _import_notes(ctx.store, info, head.high_water)


def _import_notes(store: Store, info: SessionInfo, copied: int) -> None:
    """Say, on stderr, what an import leaves to the user: a workspace only the header vouches
    for, and an unfinished turn that waits for an explicit `bubu recover`."""
    from bubu.engine.memory import memory_of
    from bubu.projections.origin import FACT_KINDS, fold_facts

    # A session's facts are chained by its turns' notes as well as by a session_started note
    # (which only imports and forks write): an export of a plain session has the former only.
    facts = fold_facts(
        store.read(info.id, upto=copied, kinds=FACT_KINDS),
        workspace=info.workspace,
        title=info.title,
        model=info.model,
    )
    if not facts.chained:
        click.echo(
            f"bubu: the export predates chained session facts, so its workspace "
            f"{printable(info.workspace)} is the file header's word alone",
            err=True,
        )
    brought = [
        n for n in memory_of(store, info.workspace).imported.values() if n.session == info.id
    ]
    if brought:
        keys = ", ".join(repr(n.key) for n in brought)
        click.echo(
            f"bubu: the export carries {len(brought)} remembered note(s) ({printable(keys)}); "
            "they are not recalled here until you accept them: `bubu memory accept KEY -w "
            f"{printable(info.workspace)}` (`bubu memory list` shows them)",
            err=True,
        )
    if fold_status(store.read(info.id, kinds=BOUNDARY_KINDS)).state == "open":
        click.echo(
            f"bubu: session {info.id} has an unfinished turn; an imported session is not "
            f"continued by itself: `bubu recover {info.id}` continues it in "
            f"{printable(info.workspace)}",
            err=True,
        )
