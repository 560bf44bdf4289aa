"""`bubu context SESSION`: the next model request as the model would see it, with why each event
is in it, summarized, a placeholder, hidden or skipped (the body: `bubu.cli.contextview`)."""

from __future__ import annotations

import click

from bubu.cli import checks
from bubu.cli.app import Ctx, cli, pass_ctx


@cli.command("context")
@click.argument("session")
@click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (the request and a row per event)."
)
@click.option(
    "--context-window",
    type=int,
    default=None,
    callback=checks.context_window,
    help="Override the model's window (tokens).",
)
@pass_ctx
def context_cmd(ctx: Ctx, /, session: str, as_json: bool, context_window: int | None) -> None:
    """Show the next model request of SESSION and what happened to each event."""
    from bubu.cli.contextview import context

    context(ctx, session, as_json, context_window)
