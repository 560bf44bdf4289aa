"""`bubu diff` and `bubu checkout`: a session's workspace, from the snapshots in the store."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bubu.cli.app import Ctx, cli, emit_json, fail, pass_ctx
from bubu.cli.term import printable
from bubu.errors import CorruptLog
from bubu.events import Record
from bubu.log.store import Store
from bubu.snapshot import diff, refs, tree
from bubu.snapshot.restore import materialize

NO_SNAPSHOT = (
    "session {sid} has no workspace snapshot {where}; snapshots are recorded by steps that may "
    "change the workspace (unless BUBU_SNAPSHOTS=off)"
)


def changed_by_turn(store: Store, records: list[Record]) -> list[diff.Changed]:
    """What the last (or running) turn has changed in the workspace so far, from its snapshots."""
    spans = refs.turn_spans(records)
    if not spans:
        return []
    a, b = refs.span(records, *spans[-1])
    if a is None or b is None or a == b:
        return []
    try:
        return diff.summarize(store.get_object, tree.changes(store.get_object, a, b))
    except CorruptLog:
        return []


def _range(
    records: list[Record], sid: str, turn: int | None, start: int | None, end: int | None
) -> tuple[str, str, str]:
    """(old tree, new tree, what the range is) for `bubu diff`'s options."""
    last = records[-1].seq if records else 0
    if turn is not None:
        spans = refs.turn_spans(records)
        if not 1 <= turn <= len(spans):
            fail(f"session {sid} has {len(spans)} turn(s); give a --turn from 1 to {len(spans)}")
        start, end = spans[turn - 1]
        what = f"turn {turn} (seq {start}..{end})"
    else:
        start = 0 if start is None else start
        end = last if end is None else end
        if not 0 <= start <= end <= last:
            fail(f"--from {start} --to {end} is not a range of the session's seqs 0..{last}")
        what = f"seq {start}..{end}"
    a, b = refs.span(records, start, end)
    if a is None or b is None:
        fail(NO_SNAPSHOT.format(sid=sid, where=f"for {what}"))
    return a, b, what


@cli.command("diff")
@click.argument("session")
@click.option("--turn", type=int, metavar="N", help="Only what turn N (1 = the first) changed.")
@click.option("--from", "start", type=int, metavar="SEQ", help="From the workspace at SEQ.")
@click.option("--to", "end", type=int, metavar="SEQ", help="To the workspace at SEQ.")
@click.option("--stat", is_flag=True, help="One line per changed path, with line counts.")
@click.option("--json", "as_json", is_flag=True, help="Print the changed paths as JSON.")
@pass_ctx
def diff_cmd(
    ctx: Ctx,
    /,
    *,
    session: str,
    turn: int | None,
    start: int | None,
    end: int | None,
    stat: bool,
    as_json: bool,
) -> None:
    """Print the unified diff of what SESSION changed in its workspace (all of it, one turn, or
    a range of seqs), from the workspace snapshots, commands' changes included."""
    if turn is not None and (start is not None or end is not None):
        fail("give either --turn or --from/--to, not both")
    store = ctx.store
    info = store.session(session)
    records = store.read(info.id)
    a, b, what = _range(records, info.id, turn, start, end)
    try:
        changes = tree.changes(store.get_object, a, b)
        changed = diff.summarize(store.get_object, changes)
    except CorruptLog as e:
        fail(f"{e}; `bubu verify {info.id}` tells what is damaged")
    if as_json:
        emit_json(
            {
                "session": info.id,
                "range": what,
                "from_tree": a,
                "to_tree": b,
                "changes": [
                    {"path": c.path, "kind": c.kind, "added": c.added, "removed": c.removed}
                    for c in changed
                ],
            }
        )
        return
    if stat:
        for line in diff.stat_lines(changed):
            click.echo(printable(line))
        return
    sys.stdout.write(diff.unified(store.get_object, changes))


@cli.command("checkout")
@click.argument("session")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--at", "at", type=int, metavar="SEQ", help="The workspace as it was at SEQ.")
@pass_ctx
def checkout_cmd(ctx: Ctx, /, *, session: str, directory: Path, at: int | None) -> None:
    """Write SESSION's workspace (as its last snapshot, or the one at SEQ, left it) into
    DIRECTORY, which must be new or empty: files, links and modes."""
    store = ctx.store
    info = store.session(session)
    records = store.read(info.id)
    last = records[-1].seq if records else 0
    seq = last if at is None else at
    if not 0 <= seq <= last:
        fail(f"--at {seq} is outside the session's seqs 0..{last}")
    snap = refs.snapshot_at(records, seq)
    if snap is None or snap.tree is None:
        fail(NO_SNAPSHOT.format(sid=info.id, where=f"for seq {seq}"))
    try:
        n = materialize(store.get_object, snap.tree, directory)
    except FileExistsError:
        fail(f"{directory} is not empty; check out into a new or empty directory")
    except CorruptLog as e:
        fail(f"{e}; `bubu verify {info.id}` tells what is damaged")
    click.echo(f"checked out {n} files of {info.id} into {directory}")
    if snap.skipped or snap.partial:
        click.echo(
            f"bubu: the snapshot left out {snap.skipped} paths"
            f"{f' ({snap.partial})' if snap.partial else ''}; they are not in the checkout",
            err=True,
        )


__all__ = ["changed_by_turn"]
