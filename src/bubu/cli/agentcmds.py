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

from bubu.cli import checks, shutdown
from bubu.cli.app import Ctx, cli, emit_json, pass_ctx
from bubu.cli.configcmd import announce, profile_option, settle
from bubu.cli.envopt import ENV_HELP, env_names
from bubu.cli.longrun import budget_json, longrun_options, waiting_json, waiting_line
from bubu.cli.prices import load_prices
from bubu.cli.term import printable
from bubu.context.quota import DEFAULT_STORE_QUOTA
from bubu.errors import ConfigError

if TYPE_CHECKING:
    from bubu.context.policy import ContextPolicy
from bubu.events import TurnEndReason
from bubu.log.store import SessionInfo, Store
from bubu.projections.longrun import fold_longrun
from bubu.projections.status import fold_status
from bubu.projections.transcript import (
    FORCE_HINT,
    Message,
    ToolCard,
    notice_text,
    transcript,
    unknown_usage,
)

# `show` and `status` live here too: the engine, the providers and the terminal view load only
# when a turn runs, so that reading a session starts fast.
if TYPE_CHECKING:
    from bubu.cli.render import JsonlObserver, TerminalObserver
    from bubu.engine.session import Host

FC = TypeVar("FC", bound=Callable[..., Any])
"""A click command function, as an option decorator takes and returns it."""

EXIT = {"completed": 0, "failed": 1, "stopped": 3, "suspended": 4, None: 5}
"""Exit status by how the turn ended (5: the run lost its lease or was blocked)."""
EXIT_UNAVAILABLE = 75
"""Exit status of a turn that gave up waiting for its provider (EX_TEMPFAIL: try again later)."""

DEFAULT_MODEL_ENV = "BUBU_MODEL"
OFFLINE_CHAT = "`bubu chat -m scripted:answers.jsonl`"
"""The chat that needs no key and no network, named wherever a model is missing."""


def default_model(configured: str | None = None) -> str:
    """The configured model (BUBU_MODEL, a profile or a config file), else one picked from the
    API keys present."""
    import os

    if configured:
        return configured
    if os.environ.get(DEFAULT_MODEL_ENV):
        return os.environ[DEFAULT_MODEL_ENV]
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-sonnet-5-5"
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        return "openai:gpt-5"
    from bubu.cli import configcmd

    # A workspace's model that was not trusted is why there is none: say so.
    said = f" ({configcmd.unsaid()})" if configcmd.unsaid() else ""
    raise ConfigError(
        "no model given: pass -m provider:model (e.g. -m anthropic:claude-sonnet-5-5, "
        "-m openai:gpt-5, -m scripted:FILE) or set BUBU_MODEL; without a key, "
        f"{OFFLINE_CHAT} chats offline, each answer a line of a JSONL file "
        "(docs/interactive.md#offline-a-scripted-chat), and `bubu demo` shows a whole run"
        f"{said}"
    )


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
    from bubu.tools.limits import Limits
    from bubu.tools.sandbox import Options

    return Options(
        allow_sockets=tuple(opts.get("allow_socket") or ()),
        ssh_agent=bool(opts.get("ssh_agent")),
        limits=Limits(
            procs=opts.get("max_procs") or 0,
            memory=opts.get("max_memory") or 0,
            file_size=opts.get("max_file_size") or 0,
        ),
    )


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
    """A Host for the CLI: provider, built-in tools, policy and the terminal as asker."""
    from bubu.engine.driver import RunConfig
    from bubu.engine.permissions import Policy
    from bubu.engine.session import Host
    from bubu.notify import wrap
    from bubu.providers import resolve
    from bubu.tools import host_tools
    from bubu.tools.mcppath import default_config_path

    provider = resolve(
        model,
        base_url=opts.get("base_url"),
        context_window=opts.get("context_window"),
        thinking_budget=opts.get("thinking"),
        stall_timeout=opts.get("stall_timeout"),
        reasoning_effort=opts.get("reasoning_effort"),
        max_output_tokens=opts.get("max_output_tokens"),
        cache_ttl=opts.get("cache_ttl"),
        native_tools=opts.get("native_tools"),
    )
    from bubu.pricing import configure_from, known, warm

    configure_from(opts.get("prices"))
    warm(provider.spec)
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
    # An MCP file the user named is their choice; without one, a recovered or resumed turn gets
    # the servers it was started with (recorded with the turn).
    fallbacks = {
        spec: resolve(spec, stall_timeout=opts.get("stall_timeout"))
        for spec in opts.get("fallback_model") or ()
    }
    chosen = opts.get("mcp")
    mcp = Path(chosen).expanduser() if chosen else default_config_path()
    pass_env: tuple[str, ...] = tuple(opts.get("pass_env") or ())
    from bubu.context.quota import quota_of
    from bubu.engine.loops import DEFAULT_LOOP_LIMIT
    from bubu.engine.settings import ModelSettings, env_stall_timeout

    return Host(
        store=store,
        provider=provider,
        model_settings=ModelSettings(
            base_url=opts.get("base_url"),
            context_window=opts.get("context_window"),
            thinking_budget=opts.get("thinking"),
            stall_timeout=opts.get("stall_timeout") or env_stall_timeout(),
            reasoning_effort=opts.get("reasoning_effort"),
            max_output_tokens=opts.get("max_output_tokens"),
            cache_ttl=opts.get("cache_ttl"),
            native_tools=opts.get("native_tools"),
        ),
        tools=host_tools(str(mcp) if mcp is not None else None, pass_env=pass_env),
        mcp_config=str(mcp.resolve()) if mcp is not None else None,
        load_tools=None if chosen else lambda path: host_tools(path, pass_env=pass_env),
        policy=Policy(
            yes=bool(opts.get("yes")),
            allow_commands=tuple(opts.get("allow") or ()),
            sandbox=opts.get("sandbox"),
            network=bool(opts.get("network")),
            pass_env=pass_env,
            box=sandbox_box(opts),
            allow_write=tuple(opts.get("allow_write") or ()),
        ),
        asker=observer.ask,
        observer=wrap(observer, opts.get("notify"), store, opts.get("notify_timeout")),
        fallbacks=fallbacks,
        config=RunConfig(
            max_steps=opts.get("max_steps"),
            retry_for_s=opts.get("retry_for"),
            fallback_models=tuple(fallbacks),
            token_limit=opts.get("max_tokens"),
            time_limit_s=opts.get("max_time"),
            max_cost=opts.get("max_cost"),
            tool_timeout_s=opts.get("tool_timeout", 600.0),
            context_window=opts.get("context_window"),
            project_instructions=not opts.get("no_project_instructions"),
            loop_limit=opts.get("loop_limit") or DEFAULT_LOOP_LIMIT,
            context=context_policy(
                opts.get("compact_at"),
                opts.get("compact_to"),
                opts.get("summary_result_share"),
                store_quota=quota_of(opts.get("store_quota")),
            ),
        ),
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


@cli.command("run")
@click.argument("task")
@session_options
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
    from bubu.cli.continuing import continuing_host
    from bubu.cli.render import TerminalObserver
    from bubu.engine.session import check_task, new_session, start_turn
    from bubu.providers.scripted import absolute_spec

    observer = observer_for(opts["jsonl"])
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
    with signals(host):
        if isinstance(observer, TerminalObserver):
            banner = f"bubu · {info.id} · {model} · {printable(info.workspace)}"
            observer.line(click.style(banner, dim=True) if observer.color else banner)
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

    here = os.path.realpath(Path(workspace).expanduser())
    sessions = workspace_sessions(store, here)
    if not sessions:
        raise ConfigError(
            f"there is no session in {here} to continue; start one there with "
            '`bubu run "TASK"`, or pick another with --session ID (`bubu sessions` lists them)'
        )
    return sessions[0]


@cli.command("resume")
@click.argument("session")
@model_options
@pass_ctx
def resume_cmd(ctx: Ctx, /, session: str, **opts: Any) -> None:
    """Continue a stopped or suspended turn, or one that gave up waiting for its provider (a
    crashed one is recovered by `bubu recover`); limits given here replace the turn's."""
    store = ctx.store
    from bubu.cli.continuing import continuing_host
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
@pass_ctx
def show_cmd(ctx: Ctx, /, session: str, as_json: bool, thinking: bool) -> None:
    """Print a session's transcript."""
    info = ctx.store.session(session)
    t = transcript(ctx.store.read(info.id))
    if as_json:
        emit_json(
            {
                "session": _session_json(info),
                "items": t.items,
                "usage": {
                    "model_calls": t.model_calls,
                    "input_tokens": t.input_tokens,
                    "output_tokens": t.output_tokens,
                    "cache_read_tokens": t.cache_read_tokens,
                    "cache_write_tokens": t.cache_write_tokens,
                    "usage_unknown_calls": t.usage_unknown_calls,
                    "reasoning_tokens": t.reasoning_tokens,
                    **t.cost.json(),
                },
            }
        )
        return
    click.echo(f"{info.id}  {printable(info.title)}\n  workspace {printable(info.workspace)}\n")
    for item in t.items:
        if isinstance(item, ToolCard):
            click.echo(f"  ⏺ {printable(item.name)} {_args(item.arguments)}  [{item.status}]")
            if item.result is not None:
                first = (item.result.strip().splitlines() or [""])[0]
                click.echo(f"    ⎿ {printable(first[:100])}")
        elif isinstance(item, Message):
            if item.kind == "thinking" and not thinking:
                continue
            prefix = {
                "user": "› ",
                "assistant": "",
                "thinking": "  ∴ ",
                "error": "  ! ",
                "note": "  · ",
                "notice": "  ┃ ",
            }[item.kind]
            for ln in item.text.splitlines() or [""]:
                click.echo(prefix + printable(ln))
    click.echo(
        f"\n  {t.model_calls} model calls · {t.input_tokens:,} in / {t.output_tokens:,} out tokens"
        f"{unknown_usage(t.usage_unknown_calls)} · {t.cost.text()}"
    )


def _args(args: dict[str, object]) -> str:
    main = args.get("command") or args.get("pattern") or args.get("path") or ""
    text = " ".join(printable(str(main)).split())
    return text[:80]


def _session_json(info: SessionInfo) -> dict[str, object]:
    return {
        "id": info.id,
        "title": info.title,
        "workspace": info.workspace,
        "model": info.model,
        "created_ms": info.created_ms,
        "events": info.high_water,
    }


def status_dict(store: Store, info: SessionInfo) -> dict[str, object]:
    """The status of a session as `bubu status --json` prints it."""
    from bubu import clock
    from bubu.engine.scope import lease_is_stale
    from bubu.projections.memory import fold_plan, plan_json

    records = store.read(info.id)
    st = fold_status(records)
    t = transcript(records)
    lease = store.current_lease(info.id)
    now = getattr(store, "now_ms", clock.now_ms)()  # a fleet's leases run on the database clock
    live = not lease_is_stale(lease, now)
    state = (
        "running"
        if st.state == "open" and live
        else ("open turn" if st.state == "open" else st.state)
    )
    out: dict[str, object] = {
        "session": info.id,
        "status": state,
        "turns": st.turns,
        "events": info.high_water,
        "reason": st.reason,
        "pending_permissions": list(st.pending_permissions),
        "usage": {
            "model_calls": t.model_calls,
            "input_tokens": t.input_tokens,
            "output_tokens": t.output_tokens,
            "cache_read_tokens": t.cache_read_tokens,
            "cache_write_tokens": t.cache_write_tokens,
            "usage_unknown_calls": t.usage_unknown_calls,
            "reasoning_tokens": t.reasoning_tokens,
            **t.cost.json(),
        },
        "recovery": None,
        "plan": plan_json(fold_plan(records)),
    }
    lr = fold_longrun(records)
    waiting = lr.waiting() if state == "running" else None
    out["cause"] = lr.end_cause if not lr.open else None
    out["waiting"] = waiting_json(waiting, clock.now_ms()) if waiting is not None else None
    out["turn"] = budget_json(lr, clock.now_ms()) if lr.turn is not None else None
    if state in ("running", "open turn"):
        from bubu.cli.workspacecmds import changed_by_turn

        out["changed"] = [c.line() for c in changed_by_turn(store, records)]
    else:
        out["changed"] = []
    if st.notice is not None:
        n = st.notice
        out["recovery"] = {
            "status": n.status,
            "silent_retries": n.silent_retries,
            "verified_applied": n.verified_applied,
            "pending_review": n.pending_review,
            "leftovers": n.leftovers,
            "workspace_changes": n.workspace_changes,
            "reason": n.reason,
            "forced": n.forced,
            "dismissed": st.notice_dismissed,
            "seq": st.notice_seq,
        }
    return out


def usage_line(usage: Any) -> str:
    """The token part of `bubu status`: calls, input and output, and the cache and reasoning
    shares where there are any (cache reads are billed far below input, writes above it)."""
    line = (
        f"{usage['model_calls']} model calls · {usage['input_tokens']:,} in / "
        f"{usage['output_tokens']:,} out tokens"
    )
    extra = [
        f"{usage[key]:,} {label}"
        for key, label in (
            ("cache_read_tokens", "cache read"),
            ("cache_write_tokens", "cache write"),
            ("reasoning_tokens", "reasoning"),
        )
        if usage.get(key)
    ]
    line += f" ({' · '.join(extra)})" if extra else ""
    return line + unknown_usage(int(usage.get("usage_unknown_calls") or 0))


def context_policy(
    compact_at: float | None,
    compact_to: float | None,
    summary_result_share: float | None = None,
    *,
    store_quota: int | None = DEFAULT_STORE_QUOTA,
) -> ContextPolicy:
    """The bounded-context policy with the config's compaction shares (`compact_at` starts a
    compaction, `compact_to` is what it aims at: it must be lower) and the session's quota of
    bytes stored whole (None: no quota)."""
    from bubu.context.policy import ContextPolicy

    base = ContextPolicy()
    at = compact_at if compact_at is not None else base.compact_at
    to = compact_to if compact_to is not None else min(base.compact_to, at / 2)
    if to >= at:
        raise ConfigError(
            f"compact_to ({to:g}) must be below compact_at ({at:g}): a compaction aims below the "
            "share that starts one; lower compact_to or raise compact_at"
        )
    if summary_result_share is None:
        summary_result_share = base.summary_result_share
    return ContextPolicy(compact_at=at, compact_to=to, summary_result_share=summary_result_share,
                         store_quota=store_quota)  # fmt: skip


def cost_lines(usage: Any, *, priced: bool = False) -> str:
    """The cost part of `bubu status`: the total, then one line per model (`priced`: the
    session's model has a price, so no call yet is $0 rather than unknown)."""
    from bubu.pricing import format_usd

    models: dict[str, Any] = usage["by_model"]
    total = format_usd(usage["cost_usd"])
    if usage["cost_usd"] is None and not models and priced:
        total = "$0"  # no call yet, of a model with a price
    if usage["unpriced_calls"] and usage["cost_usd"] is not None:
        total += f" (+{usage['unpriced_calls']} calls of unknown price)"
    lines = [f"  cost: {total}"]
    for name, m in models.items():
        lines.append(
            f"    {printable(name)}: {m['calls']} calls · {m['input_tokens']:,} in / "
            f"{m['output_tokens']:,} out · {format_usd(m['cost_usd'])}"
        )
    return "\n".join(lines)


@cli.command("status")
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def status_cmd(ctx: Ctx, /, session: str, as_json: bool) -> None:
    """Print a session's status (and its recovery notice until dismissed)."""
    from bubu.cli.memorycmd import plan_text

    info = ctx.store.session(session)
    d = status_dict(ctx.store, info)
    if as_json:
        emit_json(d)
        return
    usage: Any = d["usage"]
    click.echo(f"{info.id}  {d['status']}  ({d['turns']} turns, {d['events']} events)")
    if d["reason"]:
        click.echo(f"  {printable(str(d['reason']))}")
    if d["status"] == "blocked":
        click.echo("  " + FORCE_HINT.format(session=info.id))
    if d["waiting"] is not None:
        lr = fold_longrun(ctx.store.read(info.id))
        w = lr.waiting()
        if w is not None:
            from bubu import clock

            click.echo(f"  {waiting_line(w, clock.now_ms())}")
            click.echo(f"    last error: {printable(w.message)}")
    click.echo(f"  {usage_line(usage)}")
    from bubu.pricing import known

    load_prices()
    click.echo(cost_lines(usage, priced=bool(info.model) and known(info.model or "")))
    changed: Any = d["changed"]
    if changed:
        click.echo(
            f"  changed by this turn so far ({len(changed)}): " + printable("; ".join(changed))
        )
    if d["plan"]:
        click.echo(plan_text(d["plan"]))  # type: ignore[arg-type]  # plan_json made it
    rec: Any = d["recovery"]
    if rec and not rec["dismissed"]:
        st = fold_status(ctx.store.read(info.id))
        assert st.notice is not None
        click.echo("  recovery notice:")
        ongoing = st.state in ("open", "queued")  # else the recovered turn has ended since
        for ln in printable(notice_text(st.notice, ongoing=ongoing)).splitlines():
            click.echo("    " + ln)
