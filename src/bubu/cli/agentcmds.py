"""Commands that run the agent: run, resume, show, status."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from bubu.cli import checks, readviews, shutdown
from bubu.cli.app import Ctx, cli, pass_ctx
from bubu.cli.envopt import ENV_HELP, env_names
from bubu.cli.longrun import longrun_options
from bubu.cli.settling import announce, profile_option, settle
from bubu.context.quota import DEFAULT_STORE_QUOTA
from bubu.errors import ConfigError

if TYPE_CHECKING:
    from bubu.context.policy import ContextPolicy
from bubu.events import TurnEndReason
from bubu.log.store import SessionInfo, Store
from bubu.projections.longrun import fold_longrun

# `show` and `status` are declared here too (their bodies are `bubu.cli.readviews`): the engine,
# the providers and the terminal view load only when a turn runs, so reading a session starts fast.
if TYPE_CHECKING:
    from bubu.cli.render import JsonlObserver, TerminalObserver
    from bubu.engine.session import Host

FC = TypeVar("FC", bound=Callable[..., Any])
"""A click command function, as an option decorator takes and returns it."""

EXIT = {"completed": 0, "failed": 1, "stopped": 3, "suspended": 4, None: 5}
"""Exit status by how the turn ended (5: the run lost its lease or was blocked)."""
EXIT_UNAVAILABLE = 75
"""Exit status of a turn that gave up waiting for its provider (EX_TEMPFAIL: try again later)."""


def default_model(configured: str | None = None) -> str:
    """The configured model, else one picked from the API keys present
    (`bubu.modelchoice.default_model`); a missing one says why a workspace's model did not
    count."""
    from bubu.cli.settling import unsaid
    from bubu.modelchoice import default_model as choose

    return choose(configured, unsaid=unsaid())


def continuing_host(
    store: Store, info: SessionInfo, opts: dict[str, Any], observer: Any, *, new_turn: bool = False
) -> tuple[Host, SessionInfo, str]:
    """A host for another run of `info` (a `new_turn`, or the continuation of its latest one),
    the session as its chain records it, and the model spec (`bubu.cli.continuing`)."""
    from bubu.cli.continuing import continuing_opts_of

    merged, acting, model = continuing_opts_of(store, info, opts, new_turn=new_turn)
    return make_host(store, model, merged, observer), acting, model


def sandbox_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    """Check a --sandbox value before anything runs: a one-line error names the valid modes."""
    from bubu.tools.sandbox import parse_mode

    return None if value is None else parse_mode(value)


def store_quota_option() -> Callable[[FC], FC]:
    """`--store-quota SIZE`: the session's quota of bytes of tool results stored whole."""

    def parse(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
        from bubu.context.quota import parse_size

        return None if value is None else parse_size(value)

    return click.option(
        "--store-quota",
        "store_quota",
        default=None,
        metavar="SIZE",
        callback=parse,
        help="Bytes of whole tool results a session may store (e.g. 1GiB, or off); past it a "
        "large result keeps its head and tail [default: 256MiB].",
    )


def _socket_paths(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
    from bubu.tools.sockets import check_allowed

    return tuple(check_allowed(p) for p in value or ())


def _size_option(share: bool) -> Any:
    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        from bubu.tools.limits import parse_size

        flag = f"--{str(param.name).replace('_', '-')}"
        return None if value is None else parse_size(value, option=flag, share=share)

    return check


def _procs_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    from bubu.tools.limits import parse_procs

    return None if value is None else parse_procs(value)


def sandbox_options() -> list[Any]:
    """What a sandboxed command may reach and use: host sockets, the SSH agent, its limits."""
    return [
        click.option(
            "--allow-socket",
            "allow_socket",
            multiple=True,
            metavar="PATH",
            callback=_socket_paths,
            help="Let sandboxed commands reach this host Unix socket (or the sockets in this "
            "directory), e.g. /var/run/postgresql (repeatable).",
        ),
        click.option(
            "--ssh-agent", is_flag=True, help="Let sandboxed commands use your SSH agent."
        ),
        click.option(
            "--max-procs",
            "max_procs",
            default=None,
            metavar="N",
            callback=_procs_option,
            help="Processes and threads one sandboxed command may have [default: 1024].",
        ),
        click.option(
            "--max-memory",
            "max_memory",
            default=None,
            metavar="SIZE",
            callback=_size_option(share=True),
            help="Memory one sandboxed command may use, e.g. 4G or 25% [default: 50%].",
        ),
        click.option(
            "--max-file-size",
            "max_file_size",
            default=None,
            metavar="SIZE",
            callback=_size_option(share=False),
            help="The largest file a sandboxed command may write [default: 4G].",
        ),
    ]


def sandbox_box(opts: dict[str, Any]) -> Any:
    """The sandbox options the command line and the config files chose."""
    from bubu.engine.assemble import sandbox_box as box

    return box(opts)


def max_cost_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    """Check a --max-cost value before anything runs, in one line."""
    import math

    if value is None:
        return None
    try:
        usd = float(value.strip().removeprefix("$"))
    except ValueError:
        usd = math.nan
    if not math.isfinite(usd) or usd <= 0:
        raise ConfigError(
            f"--max-cost takes a number of US dollars above 0 (e.g. --max-cost 2.50), got {value!r}"
        )
    return usd


def model_options(f: Any) -> Any:
    """The options shared by every command that calls a model."""
    for opt in reversed(
        [
            click.option(
                "-m",
                "--model",
                default=None,
                help="provider:model, e.g. anthropic:claude-sonnet-5-5.",
            ),
            click.option(
                "--base-url", default=None, help="An OpenAI-compatible server (Ollama, vLLM …)."
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
                type=int,
                default=None,
                callback=checks.thinking,
                metavar="TOKENS",
                help="Extended thinking budget (Anthropic).",
            ),
            click.option(
                "--reasoning-effort",
                default=None,
                callback=checks.one_of(
                    "low", "medium", "high", what="how hard an OpenAI reasoning model thinks"
                ),
                metavar="low|medium|high",
                help="How hard an OpenAI reasoning model thinks [default: the model's own].",
            ),
            click.option(
                "--max-output-tokens",
                default=None,
                callback=checks.max_output_tokens,
                metavar="TOKENS",
                help="Tokens one model call may produce, reasoning included [default: the "
                "model's own at OpenAI; 8192 (+ --thinking) for Anthropic and other servers].",
            ),
            click.option(
                "--cache-ttl",
                default=None,
                callback=checks.one_of(
                    "5m", "1h", what="how long Anthropic keeps the prompt cache"
                ),
                metavar="5m|1h",
                help="How long Anthropic keeps the prompt cache [default: 5m].",
            ),
            click.option(
                "--native-tools/--no-native-tools",
                default=None,
                help="Offer the file and command tools in the provider's own shapes (Anthropic's "
                "text editor and bash, OpenAI's apply_patch and shell) [default: at the "
                "provider's own API only].",
            ),
            click.option(
                "--stall-timeout",
                type=click.FloatRange(min=0, min_open=True),
                default=None,
                metavar="SECONDS",
                help="Give up on (and retry) a model call after this long without a byte from "
                "the server [default: $BUBU_STALL_TIMEOUT, else 600].",
            ),
            click.option(
                "--mcp",
                "mcp",
                default=None,
                envvar="BUBU_MCP",
                metavar="FILE",
                type=click.Path(dir_okay=False),
                help="MCP servers to offer tools from (default $BUBU_HOME/mcp.json if present).",
            ),
            click.option("--yes", is_flag=True, help="Approve every permission request."),
            click.option(
                "--allow",
                "allow",
                multiple=True,
                metavar="PATTERN",
                help="Allow commands matching PATTERN.",
            ),
            click.option(
                "--deny",
                "deny",
                multiple=True,
                metavar="PATTERN",
                help="Refuse, without asking, commands matching PATTERN (path:GLOB: files the "
                "file tools touch); repeatable, added to the config's deny rules.",
            ),
            click.option(
                "--allow-write",
                "allow_write",
                multiple=True,
                metavar="PATH",
                callback=checks.absolute_paths,
                help="Let the file tools write PATH outside the workspace without asking (a "
                "file, or a directory and what is below it); repeatable.",
            ),
            click.option(
                "--sandbox",
                default=None,
                envvar="BUBU_SANDBOX",
                metavar="workspace-write|read-only|off",
                callback=sandbox_option,
                help="Confine commands: workspace writable (default), nothing writable, or no "
                "sandbox (commands ask).",
            ),
            click.option("--network", is_flag=True, help="Let sandboxed commands use the network."),
            *sandbox_options(),
            click.option(
                "--env",
                "pass_env",
                multiple=True,
                metavar="NAME",
                callback=env_names(must_be_set=True),
                help=ENV_HELP,
            ),
            *longrun_options(),
            click.option(
                "--max-cost",
                default=None,
                callback=max_cost_option,
                metavar="USD",
                help="Stop the turn (resumably) once its model calls cost this much.",
            ),
            click.option(
                "--tool-timeout",
                type=float,
                default=600.0,
                callback=checks.seconds,
                show_default=True,
                help="Seconds per tool call.",
            ),
            store_quota_option(),
            click.option(
                "--jsonl",
                is_flag=True,
                help="Print one JSON event per line instead of the live view.",
            ),
            click.option(
                "--no-project-instructions",
                is_flag=True,
                help="Do not give the model the workspace's AGENTS.md / CLAUDE.md files.",
            ),
        ]
    ):
        f = opt(f)
    return profile_option(f)


def make_host(store: Store, model: str, opts: dict[str, Any], observer: Any) -> Host:
    """A Host for the CLI (`bubu.engine.assemble`): the terminal answers permission requests."""
    from bubu.engine.assemble import assemble_host

    host = assemble_host(store, model, opts, asker=observer.ask, observer=observer)
    _unpriced_warning(host, opts)
    return host


def _unpriced_warning(host: Host, opts: dict[str, Any]) -> None:
    """Warn that --max-cost cannot limit a model whose price is unknown."""
    from bubu.pricing import known

    provider = host.provider
    official = getattr(provider, "official", True)
    if opts.get("max_cost") is not None and not known(provider.spec, official=official):
        from bubu.settings import Settings, said_by

        settings = opts.get("settings")
        given = settings.values.get("max_cost") if isinstance(settings, Settings) else None
        click.echo(
            f"bubu: warning: the price of {provider.spec} is unknown, so "
            f"{said_by(given, '--max-cost')} cannot limit it (its calls count as nothing); set "
            f'[prices."{provider.spec}"] input = …, output = … (USD per million tokens) in '
            "your config file to price it",
            err=True,
        )


@contextmanager
def signals(host: Host | None = None) -> Iterator[None]:
    """Ctrl-C stops the running turn (it ends `stopped`); SIGTERM and SIGHUP (the terminal went
    away) suspend it after flushing, so only `bubu resume` continues it.

    With no turn running yet Ctrl-C interrupts as usual; SIGTERM/SIGHUP suspend the turn as soon as
    it starts (or exit within seconds if none does).
    """
    from bubu.engine import turnstart
    from bubu.engine.driver import stop_all

    def on_int(*_: object) -> None:
        if stop_all("stopped"):
            return
        if turnstart.opening():  # the turn's start is being committed: stop it once it runs
            turnstart.stop_when_registered("stopped")
            return
        raise KeyboardInterrupt

    def on_term(signum: int, *_: object) -> None:
        shutdown.RECEIVED.append(signum)
        if not stop_all("suspended"):  # starting up: the turn ends suspended once it starts
            shutdown.stop_when_started(signum, lambda: stop_all("suspended"))

    old_int = signal.signal(signal.SIGINT, on_int)
    old_term = signal.signal(signal.SIGTERM, on_term)
    # Started under `nohup` (a hang-up ignored by whoever started us): it stays ignored.
    old_hup = signal.getsignal(signal.SIGHUP)
    if old_hup is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGHUP, old_hup)


def observer_for(jsonl: bool) -> TerminalObserver | JsonlObserver:
    """The live terminal view, or JSON lines."""
    from bubu.cli.render import JsonlObserver, TerminalObserver

    return JsonlObserver() if jsonl else TerminalObserver()


def finish(reason: TurnEndReason | None, observer: Any, session: str | None = None) -> None:
    """Close the view and exit with the turn's status; say why when the run lost `session`."""
    from bubu.cli.render import TerminalObserver

    if isinstance(observer, TerminalObserver):
        observer.close()
    if reason is None and session is not None:
        # A run ends without a turn end only when another runner took its lease (it is fenced).
        click.echo(
            f"bubu: error: another runner took over session {session} (this run's lease expired "
            f"or was taken), so this run stopped writing; see `bubu status {session}`",
            err=True,
        )
    if reason == "failed" and session is not None and _gave_up_waiting(session):
        sys.exit(EXIT_UNAVAILABLE)
    shutdown.leave(EXIT.get(reason, 5))  # after SIGTERM/SIGHUP: no waiting on worker threads
    sys.exit(EXIT.get(reason, 5))


def _gave_up_waiting(session: str) -> bool:
    """Whether the session's last turn ended because its provider stayed unavailable."""
    ctx = click.get_current_context(silent=True)
    state = ctx.find_object(Ctx) if ctx is not None else None
    if state is None:
        return False
    turn = fold_longrun(state.store.read(session, kinds=("turn_started", "turn_ended")))
    return turn.end_cause == "provider_unavailable"


def session_options(f: Any) -> Any:
    """Where a run acts and which session it continues: -w, --session, -c."""
    for opt in reversed(
        [
            click.option(
                "-w",
                "--workspace",
                default=".",
                type=click.Path(file_okay=False),
                help="The workspace directory.",
            ),
            click.option("--session", "session_ref", default=None, help="Continue this session."),
            click.option(
                "-c",
                "--continue",
                "cont",
                is_flag=True,
                help="Continue the most recent session of this workspace (-w, else here).",
            ),
        ]
    ):
        f = opt(f)
    return f


def plan_option(f: Any) -> Any:
    """`--plan`: the turn only reads and plans until the plan is approved."""
    return click.option(
        "--plan",
        "plan",
        is_flag=True,
        help="Plan mode: the model may only read and ends with a plan; nothing is written or "
        "run until `bubu approve-plan SESSION` (or /approve in the chat).",
    )(f)


@cli.command("run")
@click.argument("task")
@session_options
@plan_option
@click.option(
    "--image",
    "image_paths",
    multiple=True,
    metavar="PATH",
    help="Attach an image (PNG, JPEG, GIF, WebP; at most 5 MB) to the task (repeatable).",
)
@model_options
@pass_ctx
def run_cmd(
    ctx: Ctx,
    /,
    *,
    task: str,
    workspace: str,
    session_ref: str | None,
    cont: bool,
    image_paths: tuple[str, ...],
    **opts: Any,
) -> None:
    """Run TASK as a new turn (in a new session unless --session or -c)."""
    store = ctx.store
    from bubu import images
    from bubu.cli.background import Finder
    from bubu.cli.render import TerminalObserver
    from bubu.engine.session import check_task, new_session, start_turn
    from bubu.providers.scripted import absolute_spec

    observer = observer_for(opts["jsonl"])
    prepared = _prompt_file(task, workspace, opts)
    task = prepared.prompt if prepared is not None else task
    check_task(task)
    attached = [images.load(path) for path in image_paths]  # refused before anything is written
    info: SessionInfo
    if session_ref or cont:
        info = store.session(session_ref) if session_ref else latest_here(store, workspace)
        host, info, model = continuing_host(store, info, opts, observer, new_turn=True)
        host.check_integrity(info.id)  # before anything is said or written
        _check_images(host, attached)
    else:
        opts = settle(opts, workspace)
        model = absolute_spec(opts["model"] or default_model(opts["configured_model"]))
        host = make_host(store, model, opts, observer)  # a bad model spec creates no session
        _check_images(host, attached)
        info = new_session(store, task=task, workspace=workspace, model=model)
    if prepared is not None and prepared.allow:
        from dataclasses import replace

        allowed = (*host.policy.allow_commands, *prepared.allow)
        host.policy = replace(host.policy, allow_commands=tuple(dict.fromkeys(allowed)))
    with signals(host):
        if isinstance(observer, TerminalObserver):
            observer.line((f"bubu · {info.id} · {model} · {info.workspace}", "dim"))
            announce(observer.line)
        else:
            announce()
        # Other sessions' crashes are looked at once this task is durable, and continued in
        # processes of their own: never in this one's way.
        finder = Finder(store, ctx.db, skip={info.id})
        reason = start_turn(host, info, task, committed=finder.start, images=attached)
    finder.join(
        1.0 if shutdown.requested() else 60.0
    )  # asked to shut down: not held up by the look
    finish(reason, observer, info.id)


def _prompt_file(task: str, workspace: str, opts: dict[str, Any]) -> Any:
    """`bubu run "/NAME ARGS"`: the prompt file's `Prepared` (its model unless -m gave one),
    None for an ordinary task."""
    from bubu.cli.prompts import find

    prepared = find(task, workspace) if task.lstrip().startswith("/") else None
    if prepared is None:
        return None
    if prepared.ignored:
        click.echo(f"bubu: warning: {prepared.ignored}", err=True)
    if prepared.model and not opts.get("model"):
        opts["model"] = prepared.model
    return prepared


def _check_images(host: Host, attached: list[tuple[str, bytes]]) -> None:
    """Refuse images for a model that is not shown any, before anything is written."""
    from bubu.images import accepts_images

    if attached and not accepts_images(host.provider):
        raise ConfigError(
            f"{host.provider.spec} is not shown images, so --image cannot be used with it; "
            "choose a model that accepts images"
        )


def latest_here(store: Store, workspace: str) -> SessionInfo:
    """The most recent session of `workspace` (symlinks resolved): what `-c` continues."""
    from bubu.engine.memory import workspace_sessions
    from bubu.engine.scope import session_facts

    here = os.path.realpath(Path(workspace).expanduser())
    # A sub-agent's session is its parent's business: `-c` continues the conversation.
    sessions = [
        s for s in workspace_sessions(store, here) if session_facts(store, s).parent is None
    ]
    if not sessions:
        raise ConfigError(
            f"there is no session in {here} to continue; start one there with "
            '`bubu run "TASK"`, or pick another with --session ID (`bubu sessions` lists them)'
        )
    return sessions[0]


@cli.command("approve-plan")
@click.argument("session")
@click.argument("message", required=False)
@model_options
@pass_ctx
def approve_plan_cmd(ctx: Ctx, /, session: str, message: str | None, **opts: Any) -> None:
    """Approve the plan of SESSION's planning turn (bubu run --plan) and run a turn that carries
    it out, in the same session."""
    store = ctx.store
    from bubu.cli.render import TerminalObserver
    from bubu.engine.session import APPROVED, start_turn

    observer = observer_for(opts["jsonl"])
    info = store.session(session)
    host, info, _ = continuing_host(store, info, opts, observer, new_turn=True)
    host.check_integrity(info.id)
    announce(observer.line if isinstance(observer, TerminalObserver) else None)
    with signals(host):
        reason = start_turn(host, info, message or APPROVED, approve_plan=True)
    finish(reason, observer, info.id)


@cli.command("resume")
@click.argument("session")
@model_options
@pass_ctx
def resume_cmd(ctx: Ctx, /, session: str, **opts: Any) -> None:
    """Continue a stopped or suspended turn, or one that gave up waiting for its provider (a
    crashed one is recovered by `bubu recover`); limits given here replace the turn's."""
    store = ctx.store
    from bubu.cli.render import TerminalObserver
    from bubu.engine.recovery import needs_recovery, recover_session
    from bubu.engine.session import resume_turn

    info = store.session(session)
    observer = observer_for(opts["jsonl"])
    # The turn's own recorded settings, changed only by the flags given here.
    host, info, _ = continuing_host(store, info, opts, observer)
    announce(observer.line if isinstance(observer, TerminalObserver) else None)
    with signals(host):
        # A crashed turn is recovered (and continued) rather than resumed.
        if needs_recovery(store, info):
            outcome = recover_session(host, info).outcome
            finish(
                outcome if outcome in ("completed", "failed", "stopped", "suspended") else None,
                observer,
            )
        result = resume_turn(host, info)
    finish(result, observer, info.id)


@cli.command("show")
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--thinking/--no-thinking", default=False, help="Show the model's thinking.")
@click.option(
    "--tail",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Only the last N items (read from the end of the log, not all of it).",
)
@pass_ctx
def show_cmd(ctx: Ctx, /, session: str, as_json: bool, thinking: bool, tail: int | None) -> None:
    """Print a session's transcript."""
    readviews.show(ctx, session, as_json, thinking, tail)


def context_policy(
    compact_at: float | None,
    compact_to: float | None,
    summary_result_share: float | None = None,
    *,
    store_quota: int | None = DEFAULT_STORE_QUOTA,
) -> ContextPolicy:
    """The bounded-context policy of the config's compaction shares (`bubu.engine.assemble`)."""
    from bubu.engine.assemble import context_policy as policy

    return policy(compact_at, compact_to, summary_result_share, store_quota=store_quota)


@cli.command("status")
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def status_cmd(ctx: Ctx, /, session: str, as_json: bool) -> None:
    """Print a session's status (and its recovery notice until dismissed)."""
    readviews.status(ctx, session, as_json)
