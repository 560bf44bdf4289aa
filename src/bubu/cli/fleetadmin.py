"""A person's side of the fleet: the queue and its held tasks (`bubu fleet tasks`), approving a
held task (`bubu approve-task`), and the least-privilege roles (`bubu fleet roles --sql`)."""

from __future__ import annotations

import getpass
import socket

import click

from bubu import clock
from bubu.cli.app import Ctx, cli, emit_json, fail, pass_ctx
from bubu.cli.fleetcmds import db_option, fleet_store
from bubu.cli.term import printable
from bubu.errors import BubuError


@cli.group("fleet")
def fleet_group() -> None:
    """The fleet's queue and its PostgreSQL roles."""


@fleet_group.command("tasks")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def tasks_cmd(ctx: Ctx, /, *, db: str | None, as_json: bool) -> None:
    """List the fleet's sessions with work or waiting for a person: queued, held (and why),
    running or open, blocked, waiting to retry."""
    from bubu.engine.ceiling import held_request
    from bubu.log.postgres import WorkQueue

    store = fleet_store(ctx, db)
    queue = WorkQueue(store)
    rows: list[dict[str, object]] = []
    for info, state in queue.listing(("queued", "held", "open", "blocked", "retry")):
        held = held_request(store.read(info.id, kinds=("task_held", "task_approved")))
        rows.append(
            {
                "session": info.id,
                "state": state,
                "title": info.title,
                "workspace": info.workspace,
                "held_reasons": list(held.reasons) if state == "held" and held else [],
            }
        )
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no fleet work: nothing queued, held, running or blocked")
        return
    for r in rows:
        title = printable(str(r["title"]).replace("\n", " "))[:60]
        click.echo(f"{r['session']}  {r['state']:<8} {title}")
        for reason in r["held_reasons"]:  # type: ignore[attr-defined]  # a list, built above
            click.echo(f"    held: {printable(reason)}")
    if any(r["state"] == "held" for r in rows):
        click.echo("approve a held task with `bubu approve-task SESSION`")


@cli.command("approve-task")
@click.argument("session")
@db_option
@pass_ctx
def approve_task_cmd(ctx: Ctx, /, session: str, *, db: str | None) -> None:
    """Approve a task a worker held above its ceiling: the next worker runs it under the policy it
    was submitted with (the approval is a fact in the session's log)."""
    from bubu.engine.ceiling import held_request
    from bubu.events import SystemNote, TaskApproved, make

    if db is not None:
        ctx.db = db
    store = ctx.store
    info = store.session(session)
    held = held_request(store.read(info.id, kinds=("task_held", "task_approved")))
    if held is None:
        fail(f"session {info.id} is not held by a worker; `bubu fleet tasks` lists those that are")
    by = f"{getpass.getuser()}@{socket.gethostname()}"
    note = TaskApproved(request_seq=held.request_seq, reasons=list(held.reasons), by=by)
    ev = make(
        session=info.id,
        role="system",
        author="user",
        ts=clock.now_ms(),
        content=SystemNote(note=note),
        visibility="hidden",
    )
    try:
        store.append(info.id, [ev], expect=store.head(info.id).high_water, durable=True)
    except BubuError as e:
        if "approvals" not in str(e):
            raise
        fail(
            f"this PostgreSQL role may not approve held tasks ({e}); approve as the fleet's "
            "approver role (`bubu fleet roles --sql`) or the schema's owner"
        )
    click.echo(f"approved {info.id}; a worker runs it as submitted, although:")
    for reason in held.reasons:
        click.echo(f"  {printable(reason)}")


@fleet_group.command("roles")
@click.option("--sql", "as_sql", is_flag=True, help="Print the SQL script (the only output today).")
@click.option("--schema", default=None, metavar="NAME", help="The log's schema (default bubu).")
@click.option("--worker", "worker", default=None, metavar="ROLE", help="The workers' role name.")
@click.option("--submitter", default=None, metavar="ROLE", help="The submitters' role name.")
@click.option(
    "--approver", default=None, metavar="ROLE", help="The role of those who approve held tasks."
)
@click.option("--grant-only", is_flag=True, help="Grant to roles that exist; create none.")
def roles_cmd(
    *,
    as_sql: bool,
    schema: str | None,
    worker: str | None,
    submitter: str | None,
    approver: str | None,
    grant_only: bool,
) -> None:
    """Print the SQL that sets up least-privilege PostgreSQL roles for workers, submitters and
    approvers (run it with psql as the schema's owner; see docs/fleet.md)."""
    from bubu.log.postgres import DEFAULT_SCHEMA
    from bubu.log.postgres._roles import (
        DEFAULT_APPROVER_ROLE,
        DEFAULT_SUBMITTER_ROLE,
        DEFAULT_WORKER_ROLE,
        FleetRoles,
        roles_sql,
    )

    del as_sql  # the script is the output; the flag says so where it is run
    roles = FleetRoles(
        schema=schema or DEFAULT_SCHEMA,
        worker=worker or DEFAULT_WORKER_ROLE,
        submitter=submitter or DEFAULT_SUBMITTER_ROLE,
        approver=approver or DEFAULT_APPROVER_ROLE,
        create=not grant_only,
    )
    if len({roles.worker, roles.submitter, roles.approver}) < 3:
        fail("--worker, --submitter and --approver must name three roles; each may do other things")
    click.echo(roles_sql(roles), nl=False)
