"""Commands for a fleet on PostgreSQL: `bubu submit` queues a task, `bubu worker` runs them."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bubu.cli import checks
from bubu.cli.agentcmds import sandbox_box, sandbox_option, sandbox_options, store_quota_option
from bubu.cli.app import Ctx, cli, emit_json, pass_ctx
from bubu.cli.envopt import env_names
from bubu.cli.term import echo
from bubu.errors import ConfigError
from bubu.events import SandboxMode
from bubu.log.store import Store

if TYPE_CHECKING:
    from bubu.engine.ceiling import Ceiling
    from bubu.engine.worker import Queue
    from bubu.log.postgres import PostgresStore

_NEEDS_PG = (
    "the fleet needs a PostgreSQL log; pass --db postgresql://… (or set BUBU_DB), "
    'or run the task here with `bubu run "TASK"`'
)


def fleet_store(ctx: Ctx, db: str | None) -> PostgresStore:
    """The PostgreSQL store named by the command's --db (else the group's --db / BUBU_DB)."""
    if db is not None:
        ctx.db = db
    if not (ctx.db or "").startswith(("postgresql://", "postgres://")):
        raise ConfigError(_NEEDS_PG)
    from bubu.log.postgres import PostgresStore

    store = ctx.store
    assert isinstance(store, PostgresStore)
    return store


def db_option(f: Any) -> Any:
    return click.option(
        "--db",
        "db",
        default=None,
        metavar="URL",
        help="The fleet's log: a postgresql:// URL (default: the global --db or BUBU_DB).",
    )(f)


def check_model(spec: str) -> str:
    """Refuse a model spec that is not `provider:model` (workers resolve it, with the plugins they
    have); a script's path is made absolute, since workers do not share the submitter's
    directory."""
    name, sep, model = spec.partition(":")
    if not sep or not name or not model:
        raise ConfigError(
            f"the model spec {spec!r} is not provider:model; e.g. -m anthropic:claude-sonnet-5-5, "
            "-m openai:gpt-5 or -m scripted:PATH"
        )
    if name == "scripted":
        return f"scripted:{Path(model).expanduser().resolve()}"
    return spec


def _worker_socket(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
    """Socket paths as a worker's machine names them: absolute, since a submitter's working
    directory and home mean nothing on the worker."""
    for p in value or ():
        if not Path(p).is_absolute():
            raise ConfigError(
                f"--allow-socket {p}: a submitted task names the socket by its absolute path on "
                "the worker's machine, e.g. --allow-socket /var/run/postgresql"
            )
    return tuple(os.path.normpath(p) for p in value or ())


def _box_options(f: Any) -> Any:
    """The sandbox options of a submitted task: `bubu run`'s, with sockets named absolutely."""
    options = sandbox_options()
    options[0] = click.option(
        "--allow-socket",
        "allow_socket",
        multiple=True,
        metavar="PATH",
        callback=_worker_socket,
        help="Let the task's sandboxed commands reach this Unix socket of the worker (or the "
        "sockets in this directory); a worker holds the task unless it allows it (repeatable).",
    )
    for opt in reversed(options):
        f = opt(f)
    return f


def _longrun(f: Any) -> Any:
    from bubu.cli.longrun import longrun_options

    for opt in reversed(longrun_options()):
        f = opt(f)
    return f


_SETTINGS = (
    click.option(
        "--base-url",
        default=None,
        help="An OpenAI-compatible server (credentials in "
        "it are dropped: the log holds none; give them to the workers' environment).",
    ),
    click.option(
        "--context-window",
        type=int,
        default=None,
        callback=checks.context_window,
        help="Override the model's window (tokens).",
    ),
    click.option(
        "--thinking",
        "thinking_budget",
        type=int,
        default=None,
        callback=checks.thinking,
        metavar="TOKENS",
        help="Extended thinking budget (Anthropic).",
    ),
    click.option(
        "--reasoning-effort",
        default=None,
        metavar="low|medium|high",
        callback=checks.one_of(
            "low", "medium", "high", what="how hard an OpenAI reasoning model thinks"
        ),
        help="How hard an OpenAI reasoning model thinks.",
    ),
    click.option(
        "--max-output-tokens",
        default=None,
        callback=checks.max_output_tokens,
        metavar="TOKENS",
        help="Tokens one model call may produce.",
    ),
    click.option(
        "--cache-ttl",
        default=None,
        metavar="5m|1h",
        callback=checks.one_of("5m", "1h", what="how long Anthropic keeps the prompt cache"),
        help="How long Anthropic keeps the prompt cache.",
    ),
    click.option(
        "--native-tools/--no-native-tools",
        default=None,
        help="Offer the file and command tools in the provider's own shapes "
        "[default: at the provider's own API only].",
    ),
)


def _model_settings(f: Any) -> Any:
    """`bubu run`'s model options, for a submitted task (recorded with it for the workers)."""
    for opt in reversed(_SETTINGS):
        f = opt(f)
    return f


@cli.command("submit")
@click.argument("task")
@db_option
@click.option(
    "-w", "--workspace", default=".", type=click.Path(file_okay=False), help="The workspace."
)
@click.option("-m", "--model", default=None, help="provider:model (default: BUBU_MODEL).")
@click.option("--yes", is_flag=True, help="Approve every permission request of the task.")
@click.option("--allow", multiple=True, metavar="PATTERN", help="Allow commands matching PATTERN.")
@click.option(
    "--sandbox",
    default=None,
    envvar="BUBU_SANDBOX",
    metavar="workspace-write|read-only|off",
    callback=sandbox_option,
    help="Confine the task's commands (default workspace-write).",
)
@click.option("--network", is_flag=True, help="Let the task's sandboxed commands use the network.")
@click.option(
    "--env",
    "pass_env",
    multiple=True,
    metavar="NAME",
    callback=env_names(must_be_set=False),
    help="Pass the worker's secret variable NAME on to the task's commands.",
)
@click.option(
    "--snapshot",
    is_flag=True,
    help="Store a snapshot of the workspace with the task, so that a worker on another "
    "machine (`bubu worker --workspaces DIR`) materializes it.",
)
@_box_options
@_longrun
@_model_settings
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def submit_cmd(
    ctx: Ctx,
    /,
    task: str,
    *,
    db: str | None,
    workspace: str,
    model: str | None,
    yes: bool,
    allow: tuple[str, ...],
    sandbox: SandboxMode | None,
    network: bool,
    pass_env: tuple[str, ...],
    max_steps: int | None,
    as_json: bool,
    retry_for: float | None = None,
    fallback_model: tuple[str, ...] = (),
    max_tokens: int | None = None,
    max_time: float | None = None,
    snapshot: bool = False,
    **options: Any,
) -> None:
    """Queue TASK for the fleet's workers and print its session id."""
    from bubu.cli.agentcmds import default_model
    from bubu.engine.settings import public_url
    from bubu.engine.worker import Submission, SubmittedModel, submit
    from bubu.tools.sandbox import box_fields

    # The model's options build the worker's provider; the rest are the sandbox's.
    model_settings = {k: options.pop(k) for k in SubmittedModel.__struct_fields__ if k in options}
    box = options

    store = fleet_store(ctx, db)
    spec = check_model(model or default_model())
    policy = Submission(
        yes=yes,
        allow_commands=allow,
        max_steps=max_steps,
        sandbox=sandbox or "workspace-write",
        network=network,
        pass_env=pass_env,
        retry_for_s=retry_for,
        fallback_models=tuple(check_model(m) for m in fallback_model),
        token_limit=max_tokens,
        time_limit_s=max_time,
        **box_fields(sandbox_box(box)),
        model=SubmittedModel(
            **{**model_settings, "base_url": public_url(model_settings.get("base_url"))}
        ),
    )
    info = submit(
        store, task=task, workspace=workspace, model=spec, policy=policy, snapshot=snapshot
    )
    if as_json:
        emit_json({"session": info.id, "workspace": info.workspace, "model": spec})
    else:
        click.echo(info.id)


def own_servers() -> frozenset[str]:
    """The model servers this worker's own environment names (OPENAI_BASE_URL …): its key is
    meant for them."""
    import os

    from bubu.providerfacts import SERVER_ENV

    return frozenset(v for v in (os.environ.get(n) for n in SERVER_ENV.values()) if v)


def ceiling_text(c: Ceiling) -> str:
    """The worker's ceiling in one phrase for its start line."""
    allowed = [
        n
        for n, on in (
            ("--yes", c.allow_yes),
            ("--network", c.allow_network),
            ("unconfined --allow", c.allow_patterns),
        )
        if on
    ]
    allowed += [f"--env {n}" for n in sorted(c.allow_env)]
    allowed += [f"--allow-socket {p}" for p in sorted(c.allow_sockets)]
    allowed += ["--ssh-agent"] if c.allow_ssh_agent else []
    allowed += [f"--base-url {u}" for u in sorted(c.allow_base_urls)]
    return f"tasks up to --sandbox {c.max_sandbox}" + (
        f" with {', '.join(allowed)}" if allowed else ", nothing looser"
    )


def _socket_paths(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    from bubu.tools.sockets import check_allowed

    return tuple(check_allowed(p) for p in value or ())


def _limit_options(f: Any) -> Any:
    """`bubu run`'s limit options (--max-procs, --max-memory, --max-file-size)."""
    for opt in reversed(sandbox_options()[2:]):
        f = opt(f)
    return f


def worker_box(limits: dict[str, Any]) -> Any:
    """The worker's sandbox options: its limits, each made explicit (its default included) so
    that a task's higher one is clamped to it and a lower one kept."""
    from bubu.tools.limits import Limits
    from bubu.tools.sandbox import Options

    given = sandbox_box(limits).limits
    return Options(
        limits=Limits(
            procs=given.proc_count(), memory=given.memory_bytes(), file_size=given.file_bytes()
        )
    )


def _say(line: str) -> None:
    echo(f"bubu worker {time.strftime('%H:%M:%S')} {line}", err=True)


@cli.command("worker")
@db_option
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Sessions run at once.",
)
@click.option("--once", is_flag=True, help="Exit as soon as nothing is claimable.")
@click.option(
    "--idle-exit",
    type=float,
    default=None,
    metavar="S",
    help="Exit after S seconds with nothing claimable.",
)
@click.option(
    "--lease-ttl",
    type=click.FloatRange(0.5),
    default=30.0,
    show_default=True,
    metavar="S",
    help="Lease time; a dead worker's sessions wait this long.",
)
@click.option(
    "--poll",
    type=click.FloatRange(0.05),
    default=1.0,
    show_default=True,
    metavar="S",
    help="Seconds between looks for work while idle.",
)
@click.option(
    "--tool-timeout",
    type=float,
    default=600.0,
    show_default=True,
    callback=checks.seconds,
    help="Seconds per tool call.",
)
@click.option(
    "--mcp",
    "mcp",
    default=None,
    envvar="BUBU_MCP",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="MCP servers to offer tools from (default $BUBU_HOME/mcp.json if present).",
)
@store_quota_option()
@click.option(
    "--max-sandbox",
    default="workspace-write",
    show_default=True,
    callback=sandbox_option,
    metavar="workspace-write|read-only|off",
    help="The loosest sandbox a task runs in; a task asking for a looser one is held.",
)
@click.option("--allow-yes", is_flag=True, help="Run tasks submitted with --yes (else held).")
@click.option(
    "--allow-network", is_flag=True, help="Run tasks submitted with --network (else held)."
)
@click.option(
    "--allow-patterns",
    is_flag=True,
    help="Run tasks whose --allow patterns approve unconfined commands (else held).",
)
@click.option(
    "--allow-env",
    "allow_env",
    multiple=True,
    metavar="NAME",
    callback=env_names(must_be_set=False),
    help="A secret variable of this worker that tasks may ask for with --env (else held).",
)
@click.option(
    "--workspaces",
    default=None,
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Run each session in DIR/SESSION, materialized from its snapshots when missing "
    "(a machine that does not have the sessions' workspaces).",
)
@click.option(
    "--allow-socket",
    "allow_socket",
    multiple=True,
    metavar="PATH",
    callback=_socket_paths,
    help="A Unix socket (exact path) tasks may ask to reach with --allow-socket (else held).",
)
@click.option(
    "--allow-ssh-agent",
    is_flag=True,
    help="Run tasks submitted with --ssh-agent, with this worker's agent (else held).",
)
@click.option(
    "--allow-base-url",
    "allow_base_url",
    multiple=True,
    metavar="URL",
    help="A model server other than the vendors' APIs that tasks may name with "
    "--base-url; this worker's API key is sent there (else held).",
)
@_limit_options
@pass_ctx
def worker_cmd(
    ctx: Ctx,
    /,
    *,
    db: str | None,
    concurrency: int,
    once: bool,
    idle_exit: float | None,
    lease_ttl: float,
    poll: float,
    tool_timeout: float,
    mcp: str | None,
    store_quota: int | None,
    max_sandbox: SandboxMode,
    allow_yes: bool,
    allow_network: bool,
    allow_patterns: bool,
    allow_env: tuple[str, ...],
    workspaces: str | None = None,
    allow_socket: tuple[str, ...] = (),
    allow_ssh_agent: bool = False,
    allow_base_url: tuple[str, ...] = (),
    **limits: Any,
) -> None:
    """Claim sessions with work (queued tasks, turns whose runner died) and run them.

    A queued task that asks for more than this worker allows (a looser sandbox than
    --max-sandbox, --yes, --network, unconfined --allow patterns, a secret variable, a host
    socket, the SSH agent, a model server other than the vendors' APIs) is held, not run, until a
    person approves it with `bubu approve-task`. A task's sandbox limits above this worker's
    --max-procs, --max-memory, --max-file-size (or their defaults) are clamped to them.

    SIGTERM or Ctrl-C drains: running turns finish their current step and are handed back to the
    fleet; a second Ctrl-C stops them at once.
    """
    from bubu.engine.ceiling import Ceiling
    from bubu.engine.driver import RunConfig
    from bubu.engine.worker import Worker, WorkerConfig, worker_options
    from bubu.log.postgres import PostgresStore, WorkQueue

    store = fleet_store(ctx, db)
    url, where = store.url, f"{store.target.where} schema {store.schema}"
    ctx.close()

    def open_slot() -> tuple[Store, Queue]:
        store = PostgresStore(url)
        return store, WorkQueue(store)

    run = RunConfig(max_steps=None, lease_ttl_s=lease_ttl)
    options = worker_options(mcp=mcp, tool_timeout=tool_timeout, store_quota=store_quota)
    ceiling = Ceiling(
        max_sandbox=max_sandbox,
        allow_yes=allow_yes,
        allow_network=allow_network,
        allow_patterns=allow_patterns,
        allow_env=frozenset(allow_env),
        allow_sockets=frozenset(allow_socket),
        allow_ssh_agent=allow_ssh_agent,
        allow_base_urls=frozenset(allow_base_url) | own_servers(),
    )
    config = WorkerConfig(
        concurrency=concurrency,
        once=once,
        idle_exit_s=idle_exit,
        poll_s=poll,
        run=run,
        ceiling=ceiling,
        box=worker_box(limits),
        workspaces=workspaces,
        options=options,
    )
    worker = Worker(open_slot=open_slot, config=config, log=_say)
    received = 0

    def on_signal(signum: int, _: object) -> None:
        nonlocal received
        received += 1
        if signum == signal.SIGINT and received > 1:
            _say("stopping now")
            worker.halt()
            return
        _say("draining: running turns finish their step, then go back to the fleet")
        worker.drain()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    _say(
        f"started on {where} (concurrency {concurrency}, lease {lease_ttl:g} s, "
        f"{ceiling_text(ceiling)})"
    )
    try:
        worker.serve()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    _say(f"stopped after {worker.handled} sessions")
    sys.exit(130 if received > 1 else 0)
