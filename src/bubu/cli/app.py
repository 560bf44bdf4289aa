"""The click group and what every command shares: the store option, and the per-invocation
state and output helpers of `bubu.cli.core`, which the fast path uses without click."""

from __future__ import annotations

import sys

import click

from bubu.cli.core import (
    READ_ONLY_COMMANDS,
    Ctx,
    emit_json,
    emit_jsonl,
    fail,
    to_builtins,
)
from bubu.cli.dbopt import accept_db
from bubu.cli.lazy import Lazy, LazyGroup

pass_ctx = click.make_pass_decorator(Ctx)


# Where each command lives, and its short help for `bubu --help`: a command's module is imported
# only when the command runs or shows its own help. tests/cli/test_startup.py keeps it in step.
COMMANDS = {
    "agents": Lazy(
        module="bubu.cli.agentlist",
        short_help=(
            "List the named agents delegate can start (yours, and a trusted workspace's), and the "
            "ones that are ignored and why."
        ),
    ),
    "approve-plan": Lazy(
        module="bubu.cli.agentcmds",
        short_help=(
            "Approve the plan of SESSION's planning turn (bubu run --plan) and run a turn that "
            "carries it out, in the same session."
        ),
    ),
    "approve-task": Lazy(
        module="bubu.cli.fleetadmin",
        short_help=(
            "Approve a task a worker held above its ceiling: the next worker runs it under the "
            "policy it was submitted with (the approval is a fact in the session's log)."
        ),
    ),
    "chat": Lazy(
        module="bubu.cli.chat",
        short_help=(
            "Talk to Bubu in this terminal: each message is a turn of one session (/help inside)."
        ),
    ),
    "compact": Lazy(
        module="bubu.cli.compactcmd",
        short_help=(
            "Summarize SESSION's older events into a checkpoint now (the newest steps stay raw)."
        ),
    ),
    "checkout": Lazy(
        module="bubu.cli.workspacecmds",
        short_help=(
            "Write SESSION's workspace (as its last snapshot, or the one at SEQ, left it) into "
            "DIRECTORY, which must be new or empty: files, links and modes."
        ),
    ),
    "config": Lazy(
        module="bubu.cli.configcmd",
        short_help=(
            "Print the effective settings and where each came from (flag, env, profile, file, "
            "default)."
        ),
    ),
    "context": Lazy(
        module="bubu.cli.contextcmd",
        short_help="Show the next model request of SESSION and what happened to each event.",
    ),
    "copy-store": Lazy(
        module="bubu.cli.storecmds",
        short_help=(
            "Copy sessions from the store SRC to the store DST (SQLite paths or postgresql:// "
            "URLs)."
        ),
    ),
    "demo": Lazy(
        module="bubu.cli.democmd",
        short_help=(
            "Watch Bubu fix a failing test offline, survive a real SIGKILL, and finish by itself."
        ),
    ),
    "diff": Lazy(
        module="bubu.cli.workspacecmds",
        short_help=(
            "Print the unified diff of what SESSION changed in its workspace (all of it, one turn, "
            "or a range of seqs), from the workspace snapshots, commands' changes included."
        ),
    ),
    "dismiss": Lazy(
        module="bubu.cli.recovercmds",
        short_help="Dismiss the session's recovery notice (the continuation is not affected).",
    ),
    "export": Lazy(
        module="bubu.cli.logcmds",
        short_help="Write a session (header, then one event per line) as JSONL to stdout.",
    ),
    "fleet": Lazy(
        module="bubu.cli.fleetadmin", short_help="The fleet's queue and its PostgreSQL roles."
    ),
    "fork": Lazy(
        module="bubu.cli.forkcmd",
        short_help=(
            "Start a new session from events 1..SEQ of SESSION (verified first) and print its id."
        ),
    ),
    "import": Lazy(
        module="bubu.cli.logcmds",
        short_help=(
            "Import a session exported with `bubu export`; refuses a file whose chain does not "
            "verify."
        ),
    ),
    "log": Lazy(module="bubu.cli.logcmds", short_help="Print a session's events in seq order."),
    "mcp": Lazy(
        module="bubu.cli.mcpcmd",
        short_help="Sign in to (or out of) the remote MCP servers that require OAuth.",
    ),
    "memory": Lazy(
        module="bubu.cli.memorycmd",
        short_help="List, show or forget the notes remembered in a workspace (default: list).",
    ),
    "recover": Lazy(
        module="bubu.cli.recovercmds",
        short_help=(
            "Recover every session with an unfinished turn (or just SESSION) and continue it to "
            "its end."
        ),
    ),
    "resume": Lazy(
        module="bubu.cli.agentcmds",
        short_help=(
            "Continue a stopped or suspended turn, or one that gave up waiting for its provider (a "
            "crashed one is recovered by `bubu recover`); limits given here replace the turn's."
        ),
    ),
    "rewind": Lazy(
        module="bubu.cli.rewindcmd",
        short_help="Restore the files SESSION changed after SEQ and fork its log at SEQ.",
    ),
    "run": Lazy(
        module="bubu.cli.agentcmds",
        short_help="Run TASK as a new turn (in a new session unless --session or -c).",
    ),
    "sessions": Lazy(
        module="bubu.cli.logcmds",
        short_help="List sessions, newest first, with their status derived from the log.",
    ),
    "show": Lazy(module="bubu.cli.agentcmds", short_help="Print a session's transcript."),
    "status": Lazy(
        module="bubu.cli.agentcmds",
        short_help="Print a session's status (and its recovery notice until dismissed).",
    ),
    "stop": Lazy(
        module="bubu.cli.recovercmds",
        short_help="Stop the turn running in another process (a terminal, the web UI, a worker).",
    ),
    "submit": Lazy(
        module="bubu.cli.fleetcmds",
        short_help="Queue TASK for the fleet's workers and print its session id.",
    ),
    "trust": Lazy(
        module="bubu.cli.configcmd",
        short_help=(
            "Let DIRECTORY's .bubu/config.toml choose the model, server and MCP servers, as it is "
            "now (any change to the file revokes it); limits and permissions it may only ever "
            "tighten."
        ),
    ),
    "undo": Lazy(
        module="bubu.cli.rewindcmd",
        short_help=(
            "Revert SESSION's last turn: the workspace as it was before it (what its commands did "
            "too), and the log forked there (`bubu rewind` to the start of that turn)."
        ),
    ),
    "ui": Lazy(
        module="bubu.cli.uicmd",
        short_help="Serve the web UI: sessions, live transcripts, the recovery notice, approvals.",
    ),
    "verify": Lazy(
        module="bubu.cli.logcmds",
        short_help="Recompute the hash chain of one session (or all); exit 1 if anything is wrong.",
    ),
    "worker": Lazy(
        module="bubu.cli.fleetcmds",
        short_help="Claim sessions with work (queued tasks, turns whose runner died) and run them.",
    ),
}


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    prepare=accept_db,
    context_settings={"help_option_names": ["-h", "--help"]},
    invoke_without_command=True,
)
@click.option(
    "--db",
    envvar="BUBU_DB",
    default=None,
    metavar="PATH|URL",
    help="The log database: a SQLite path or a postgresql:// URL (default $BUBU_HOME/bubu.db).",
)
@click.version_option(package_name="bubu-agent", prog_name="bubu")
@click.pass_context
def cli(ctx: click.Context, db: str | None) -> None:
    """Bubu: a coding agent for long tasks whose runtime is an append-only log."""
    state = Ctx(db, readonly=ctx.invoked_subcommand in READ_ONLY_COMMANDS)
    ctx.obj = state
    ctx.call_on_close(state.close)
    if ctx.invoked_subcommand is None:  # plain `bubu`: a chat on a terminal, else the help
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise click.exceptions.NoArgsIsHelpError(ctx)
        chat = cli.get_command(ctx, "chat")
        assert chat is not None
        with chat.make_context("chat", [], parent=ctx) as sub:
            chat.invoke(sub)


__all__ = [
    "COMMANDS",
    "READ_ONLY_COMMANDS",
    "Ctx",
    "cli",
    "emit_json",
    "emit_jsonl",
    "fail",
    "pass_ctx",
    "to_builtins",
]
