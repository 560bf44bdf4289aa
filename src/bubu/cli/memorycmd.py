"""`bubu memory [list|show KEY|forget KEY|accept KEY|--all] [-w DIR] [--json]`: a workspace's notes.

Notes are what `remember` wrote in any session of the workspace; `forget` appends a
`memory_forgotten` note to the workspace's newest session (nothing is deleted in place). Notes
that came with an imported session are listed apart and not recalled until `accept` appends a
`memory_accepted` note naming each one's text hash.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from bubu import clock
from bubu.cli.app import Ctx, cli, emit_json, fail, pass_ctx
from bubu.cli.term import printable
from bubu.engine.memory import memory_of, workspace_memory, workspace_sessions
from bubu.events import MemoryAccepted, MemoryForgotten, SystemNote, make
from bubu.events import Note as NoteFact
from bubu.log.store import SessionInfo, Store
from bubu.projections.memory import (
    Note,
    clean_key,
)


def _workspace(raw: str) -> str:
    path = Path(raw).expanduser().resolve()
    if not path.is_dir():
        fail(f"the workspace {path} is not a directory; pass -w DIR")
    return str(path)


def note_dict(note: Note) -> dict[str, object]:
    """A note as `--json` prints it."""
    return {
        "key": note.key,
        "text": note.text,
        "ts": note.ts,
        "session": note.session,
        "accepted": note.accepted,
    }


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
    """List the workspace's notes, newest first, then the imported ones that wait for
    `bubu memory accept` (they are not recalled)."""
    ws = _workspace(workspace)
    memory = memory_of(ctx.store, ws)
    notes = sorted(memory.live.values(), key=lambda n: (-n.ts, n.key))
    waiting = sorted(memory.imported.values(), key=lambda n: (-n.ts, n.key))
    if as_json:
        emit_json(
            {
                "workspace": ws,
                "notes": [note_dict(n) for n in notes],
                "imported": [note_dict(n) for n in waiting],
            }
        )
        return
    if not notes and not waiting:
        click.echo(f"no notes remembered in {printable(ws)}")
        return
    for n in notes:
        click.echo(f"{printable(n.key)}  {printable(_first(n.text))}")
    if waiting:
        click.echo(
            "imported, not recalled until you accept them (`bubu memory accept KEY` or --all):"
        )
        for n in waiting:
            click.echo(f"  {printable(n.key)}  {printable(_first(n.text))}  (from {n.session})")


def _first(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:100]


@memory_group.command("show")
@click.argument("key")
@_options
@pass_ctx
def show_cmd(ctx: Ctx, /, key: str, workspace: str, as_json: bool) -> None:
    """Print one note in full."""
    ws = _workspace(workspace)
    memory = memory_of(ctx.store, ws)
    note = memory.live.get(clean_key(key))
    waiting = note is None and clean_key(key) in memory.imported
    if note is None:
        note = memory.imported.get(clean_key(key))
    if note is None:
        fail(f"no note {key!r} is remembered in {ws}; see bubu memory list -w {ws}")
    if as_json:
        emit_json({"workspace": ws, "note": note_dict(note), "imported": waiting})
        return
    if waiting:
        click.echo(
            f"{printable(note.key)}  (imported with {note.session}; not recalled until "
            f"`bubu memory accept {printable(note.key)}`)"
        )
    else:
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
    _append_notes(store, target, [MemoryForgotten(key=note.key)])
    if as_json:
        emit_json({"workspace": ws, "forgotten": note.key, "session": target.id})
        return
    click.echo(f"forgot {printable(note.key)} (recorded in {target.id})")


@memory_group.command("accept")
@click.argument("key", required=False)
@click.option("--all", "every", is_flag=True, help="Accept every imported note.")
@_options
@pass_ctx
def accept_cmd(ctx: Ctx, /, key: str | None, every: bool, workspace: str, as_json: bool) -> None:
    """Accept an imported note (or --all): from now on it is recalled as this workspace's."""
    store = ctx.store
    ws = _workspace(workspace)
    if (key is None) == (not every):
        fail("name one imported note (bubu memory accept KEY) or pass --all, not both")
    waiting = memory_of(store, ws).imported
    if key is not None and clean_key(key) not in waiting:
        fail(f"no imported note {key!r} waits in {ws}; `bubu memory list -w {ws}` shows them")
    chosen = list(waiting.values()) if every else [waiting[clean_key(key or "")]]
    if not chosen:
        fail(f"no imported note waits in {ws}; there is nothing to accept")
    target = _newest_session(store, ws)
    _append_notes(
        store,
        target,
        [MemoryAccepted(key=n.key, sha256=n.sha256, source=n.session) for n in chosen],
    )
    if as_json:
        emit_json({"workspace": ws, "accepted": [n.key for n in chosen], "session": target.id})
        return
    for n in chosen:
        click.echo(
            f"accepted {printable(n.key)} (imported with {n.session}; recorded in {target.id})"
        )


def _newest_session(store: Store, workspace: str) -> SessionInfo:
    return max(workspace_sessions(store, workspace), key=lambda s: (s.created_ms, s.id))


def _append_notes(store: Store, info: SessionInfo, notes: Sequence[NoteFact]) -> None:
    """Append the user's memory facts; under the lease when it is free, else beside the running
    turn (whose runner folds them in as it does a notice dismissal)."""
    from bubu.engine.driver import owner_id
    from bubu.engine.scope import session_free

    lease = (
        store.acquire_lease(info.id, owner_id(), 10, steal=False)
        if session_free(store, info.id)
        else None
    )
    now = clock.now_ms()
    events = [
        make(
            session=info.id,
            role="system",
            author="user",
            ts=now,
            content=SystemNote(note=n),
            visibility="hidden",
        )
        for n in notes
    ]
    try:
        store.append(
            info.id, events, expect=store.head(info.id).high_water, durable=True, lease=lease
        )
    finally:
        if lease is not None:
            store.release_lease(lease)
