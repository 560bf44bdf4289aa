"""`bubu memory [list|show KEY|forget KEY] [-w DIR] [--json]`: the notes of a workspace.

Notes are what `remember` wrote in any session of the workspace; `forget` appends a
`memory_forgotten` note to the workspace's newest session (nothing is deleted in place).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from bubu import clock
from bubu.cli.app import Ctx, cli, emit_json, fail, pass_ctx
from bubu.cli.term import printable
from bubu.engine.memory import workspace_memory, workspace_sessions
from bubu.events import MemoryForgotten, SystemNote, make
from bubu.log.store import SessionInfo, Store
from bubu.projections.memory import (
    Note,
    clean_key,
    plan_counts,
    plan_items,
    plan_lines,
)


def _workspace(raw: str) -> str:
    path = Path(raw).expanduser().resolve()
    if not path.is_dir():
        fail(f"the workspace {path} is not a directory; pass -w DIR")
    return str(path)


def note_dict(note: Note) -> dict[str, object]:
    """A note as `--json` prints it."""
    return {"key": note.key, "text": note.text, "ts": note.ts, "session": note.session}


def plan_text(plan: Sequence[dict[str, str]]) -> str:
    """The plan for `bubu status`: ``  plan 2/5`` and one checklist line per step."""
    items = plan_items(list(plan))
    if isinstance(items, str):
        return f"  plan: {items}"
    return "\n".join([f"  plan {plan_counts(items)}", *(f"    {ln}" for ln in plan_lines(items))])


def _options(f: Any) -> Any:
    f = click.option("--json", "as_json", is_flag=True, help="Print JSON.")(f)
    return click.option(
        "-w",
        "--workspace",
        default=".",
        type=click.Path(file_okay=False),
        help="The workspace directory (default: the current one).",
    )(f)


@cli.group("memory", invoke_without_command=True)
@_options
@click.pass_context
def memory_group(click_ctx: click.Context, workspace: str, as_json: bool) -> None:
    """List, show or forget the notes remembered in a workspace (default: list)."""
    if click_ctx.invoked_subcommand is None:
        click_ctx.invoke(list_cmd, workspace=workspace, as_json=as_json)


@memory_group.command("list")
@_options
@pass_ctx
def list_cmd(ctx: Ctx, /, workspace: str = ".", as_json: bool = False) -> None:
    """List the workspace's notes, newest first."""
    ws = _workspace(workspace)
    notes = sorted(workspace_memory(ctx.store, ws).values(), key=lambda n: (-n.ts, n.key))
    if as_json:
        emit_json({"workspace": ws, "notes": [note_dict(n) for n in notes]})
        return
    if not notes:
        click.echo(f"no notes remembered in {printable(ws)}")
        return
    for n in notes:
        first = n.text.strip().splitlines()[0] if n.text.strip() else ""
        click.echo(f"{printable(n.key)}  {printable(first[:100])}")


@memory_group.command("show")
@click.argument("key")
@_options
@pass_ctx
def show_cmd(ctx: Ctx, /, key: str, workspace: str, as_json: bool) -> None:
    """Print one note in full."""
    ws = _workspace(workspace)
    note = workspace_memory(ctx.store, ws).get(clean_key(key))
    if note is None:
        fail(f"no note {key!r} is remembered in {ws}; see bubu memory list -w {ws}")
    if as_json:
        emit_json({"workspace": ws, "note": note_dict(note)})
        return
    click.echo(f"{printable(note.key)}  (remembered by {note.session})")
    click.echo(printable(note.text))


@memory_group.command("forget")
@click.argument("key")
@_options
@pass_ctx
def forget_cmd(ctx: Ctx, /, key: str, workspace: str, as_json: bool) -> None:
    """Forget a note: it is no longer recalled (the log keeps that it was written)."""
    store = ctx.store
    ws = _workspace(workspace)
    note = workspace_memory(store, ws).get(clean_key(key))
    if note is None:
        fail(f"no note {key!r} is remembered in {ws}; see bubu memory list -w {ws}")
    target = _newest_session(store, ws)
    _append_forget(store, target, note.key)
    if as_json:
        emit_json({"workspace": ws, "forgotten": note.key, "session": target.id})
        return
    click.echo(f"forgot {printable(note.key)} (recorded in {target.id})")


def _newest_session(store: Store, workspace: str) -> SessionInfo:
    return max(workspace_sessions(store, workspace), key=lambda s: (s.created_ms, s.id))


def _append_forget(store: Store, info: SessionInfo, key: str) -> None:
    """Append the forget fact; under the lease when it is free, else beside the running turn
    (whose runner folds it in as it does a notice dismissal)."""
    from bubu.cli.recovercmds import _free
    from bubu.engine.driver import owner_id

    lease = (
        store.acquire_lease(info.id, owner_id(), 10, steal=False) if _free(store, info.id) else None
    )
    ev = make(
        session=info.id,
        role="system",
        author="user",
        ts=clock.now_ms(),
        content=SystemNote(note=MemoryForgotten(key=key)),
        visibility="hidden",
    )
    try:
        store.append(
            info.id, [ev], expect=store.head(info.id).high_water, durable=True, lease=lease
        )
    finally:
        if lease is not None:
            store.release_lease(lease)
