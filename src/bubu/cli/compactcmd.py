"""`bubu compact SESSION`: build a compaction checkpoint now, as the engine does before a model
call whose request would pass the budget (the session's model writes the summary)."""

from __future__ import annotations

import sys
from typing import Any

import click
from msgspec.structs import asdict

from bubu.cli.agentcmds import default_model, make_host, model_options, observer_for
from bubu.cli.app import Ctx, cli, emit_json, pass_ctx
from bubu.engine.compacting import compact_now
from bubu.events import Compaction
from bubu.log.store import SessionInfo


@cli.command("compact")
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@model_options
@pass_ctx
def compact_cmd(ctx: Ctx, /, session: str, as_json: bool, **opts: Any) -> None:
    """Summarize SESSION's older events into a checkpoint now (the newest steps stay raw)."""
    store = ctx.store
    info = store.session(session)
    model = opts["model"] or info.model or default_model()
    host = make_host(store, model, opts, observer_for(opts["jsonl"]))
    with host.runner_for(info) as runner:
        note = compact_now(runner)
    report(info, note, as_json=as_json)
    if note is not None and not note.ok:
        sys.exit(1)


def report(info: SessionInfo, note: Compaction | None, *, as_json: bool = False) -> None:
    """Say what a compaction of `info` did (`note`; None: there was nothing to compact)."""
    if as_json:
        # Every field, defaults included: a reader should not have to know them.
        emit_json({"session": info.id, "compaction": None if note is None else asdict(note)})
    elif note is None:
        click.echo(
            f"{info.id}: nothing to compact (fewer than two steps after the last checkpoint)"
        )
    elif note.ok:
        click.echo(
            f"{info.id}: checkpoint {note.checkpoint} covers events 1–{note.watermark} "
            f"({note.chunks} summarizer call{'s' if note.chunks != 1 else ''})"
        )
    else:
        click.echo(f"{info.id}: {note.message}", err=True)
