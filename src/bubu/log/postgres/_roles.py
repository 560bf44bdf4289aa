"""Least-privilege PostgreSQL roles for a fleet: what a worker and a submitter may do, as SQL.

The log's rules are enforced by triggers (`_schema`), and a trigger binds only those who cannot
drop or disable it: the owner of a table can, and so can a superuser. So the schema is owned by
an administrator role that migrates it, and workers and submitters connect as roles that own
nothing and may only read, insert, and move the few columns the triggers themselves move. None
may DELETE, TRUNCATE, create or alter anything; the triggers refuse their UPDATEs of the log. An
approver is a submitter who may also approve a task a worker held (`bubu approve-task`).

`roles_sql` is what `bubu fleet roles --sql` prints; the fleet tests run it against the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from bubu.log.postgres._connect import DEFAULT_SCHEMA

DEFAULT_WORKER_ROLE = "bubu_worker"
DEFAULT_SUBMITTER_ROLE = "bubu_submitter"
DEFAULT_APPROVER_ROLE = "bubu_approver"

_LOG_TABLES = (
    "bubu_migrations",
    "sessions",
    "events",
    "blobs",
    "leases",
    "work",
    "views",
    "approvals",
    "objects",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetRoles:
    """The names the role script uses."""

    schema: str = DEFAULT_SCHEMA
    worker: str = DEFAULT_WORKER_ROLE
    submitter: str = DEFAULT_SUBMITTER_ROLE
    approver: str = DEFAULT_APPROVER_ROLE
    """A person who approves held tasks (`bubu approve-task`): a submitter who may also approve."""
    create: bool = True
    """Create the three roles (LOGIN, no password); False grants to roles that already exist."""


def _grants(r: FleetRoles) -> list[tuple[str, str]]:
    """(statement template, who) pairs; `{s}` is the schema, `{who}` the grantee(s)."""
    everyone = "all"
    return [
        # Nobody but the owner creates in the schema or reads it unasked.
        ("REVOKE ALL ON SCHEMA {s} FROM PUBLIC", ""),
        ("REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM PUBLIC", ""),
        ("GRANT USAGE ON SCHEMA {s} TO {who}", everyone),
        (f"GRANT SELECT ON {', '.join('{s}.' + t for t in _LOG_TABLES)} TO {{who}}", everyone),
        # Appending: events and blobs are insert-only (their triggers refuse UPDATE, DELETE and
        # TRUNCATE whoever asks); a session row is inserted once, and the chain trigger, which
        # runs as the appender, moves its head (`sessions_guard` refuses anyone else moving it).
        ("GRANT INSERT ON {s}.events, {s}.blobs, {s}.objects TO {who}", everyone),
        (
            "GRANT INSERT (id, title, workspace, model, created_ms) ON {s}.sessions TO {who}",
            everyone,
        ),
        ("GRANT UPDATE (high_water, head, last_ms) ON {s}.sessions TO {who}", everyone),
        # The queue is an index the appender's trigger keeps; a worker re-reads the log before
        # it runs anything, so a row changed by hand can only make it look, never obey.
        ("GRANT INSERT, UPDATE ON {s}.work TO {who}", everyone),
        # A worker takes and renews leases and caches derived views (never deletes them).
        (
            "GRANT INSERT, UPDATE (owner, epoch, expires_ms, stop_requested) "
            "ON {s}.leases TO {who}",
            "worker",
        ),
        (
            "GRANT INSERT, UPDATE (source_hw, source_digest, data, created_ms) "
            "ON {s}.views TO {who}",
            "worker",
        ),
        # Appending a `task_approved` event inserts its row here as the appender: only an
        # approver can, and a worker runs a held task only on an approval with a row.
        ("GRANT INSERT ON {s}.approvals TO {who}", "approver"),
    ]


def roles_sql(roles: FleetRoles | None = None) -> str:
    """The SQL that creates (or grants to) the fleet's worker, submitter and approver roles; run
    it as the schema's owner once the schema exists (any `bubu` command on the URL migrates it)."""
    r = roles or FleetRoles()
    ident = {
        "s": sql.Identifier(r.schema).as_string(None),
        "worker": sql.Identifier(r.worker).as_string(None),
        "submitter": sql.Identifier(r.submitter).as_string(None),
        "approver": sql.Identifier(r.approver).as_string(None),
    }
    lines = [
        "-- Least-privilege roles for a Bubu fleet (bubu fleet roles --sql).",
        f"-- Run as the owner of schema {r.schema} (the administrator that migrated it), never",
        "-- as a role a worker or submitter uses: an owner or superuser can disable triggers.",
        "BEGIN;",
    ]
    if r.create:
        lines.append(
            "-- LOGIN without a password: set one (ALTER ROLE … PASSWORD) or use your pg_hba.conf."
        )
        lines.append(
            "-- A role that exists already (another schema's fleet) is kept, with its rights cut"
        )
        lines.append("-- back to these: the script can be run again and for several schemas.")
        for role in ("worker", "submitter", "approver"):
            lines.append(_create_role(ident[role], getattr(r, role)))
    for template, who in _grants(r):
        grantees = {
            "all": f"{ident['worker']}, {ident['submitter']}, {ident['approver']}",
            "worker": ident["worker"],
            "approver": ident["approver"],
            "": "",
        }[who]
        lines.append(template.format(s=ident["s"], who=grantees) + ";")
    lines.append("COMMIT;")
    return "\n".join(lines) + "\n"


_ATTRIBUTES = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"


def _create_role(ident: str, name: str) -> str:
    """Create the role unless it exists, then hold it to the fleet's attributes either way."""
    literal = sql.Literal(name).as_string(None)
    return (
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {literal}) THEN "
        f"CREATE ROLE {ident}; END IF; END $$;\n"
        f"ALTER ROLE {ident} {_ATTRIBUTES};"
    )


def drop_roles_sql(roles: FleetRoles | None = None) -> str:
    """The SQL that takes the roles' grants back and drops them (run as the schema's owner)."""
    r = roles or FleetRoles()
    out = []
    for role in (r.worker, r.submitter, r.approver):
        name = sql.Identifier(role).as_string(None)
        out += [f"DROP OWNED BY {name};", f"DROP ROLE {name};"]
    return "\n".join(out) + "\n"


__all__ = [
    "DEFAULT_APPROVER_ROLE",
    "DEFAULT_SUBMITTER_ROLE",
    "DEFAULT_WORKER_ROLE",
    "FleetRoles",
    "drop_roles_sql",
    "roles_sql",
]
