"""Assembling a host: the one place where run options become the `Host` a turn runs with.

The CLI, the web UI, the Python API and the fleet worker all build their hosts here, so that a
setting (a deny rule, a hook, ``native_tools``, a background limit, a price) reaches a turn the
same way whichever front end starts it. What really differs between them is a parameter of
`assemble_host`: who answers permission requests (`asker`), who watches the run (`observer`),
the lease owner, tools chosen in code, and whether a resumed turn gets back the MCP servers it
was started with.

The options are keyed by run option name (`bubu.settings.Key.option`, e.g. ``thinking``,
``allow``, ``fallback_model``): the CLI's flags with the config files filled in
(`bubu.cli.settling.settle`), or the config files alone (`config_options`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bubu.engine.driver import NullObserver, Observer, RunConfig
from bubu.engine.permissions import Asker, Policy, nobody
from bubu.engine.session import Host
from bubu.engine.settings import ModelSettings, env_stall_timeout
from bubu.log.store import Store
from bubu.providers.base import Provider
from bubu.tools.base import Tool

if TYPE_CHECKING:
    from bubu.context.policy import ContextPolicy
    from bubu.tools.sandbox import Options as Box

Options = Mapping[str, Any]
"""Run options by option name (see the module)."""

DEFAULT_TOOL_TIMEOUT_S = 600.0
DEFAULT_MAX_BACKGROUND = 4  # bubu.tools.background.DEFAULT_LIMIT


def config_options(workspace: str | None = None) -> dict[str, Any]:
    """The run options of the config files alone (the user's, and the workspace's where it
    admits them), as a front end without flags runs under them; a bad file raises ConfigError."""
    from bubu.settings import BY_NAME, resolve

    settings = resolve(workspace=workspace, flags={}, defaults={})
    out: dict[str, Any] = {BY_NAME[n].option: s.value for n, s in settings.values.items()}
    out["configured_model"] = out.pop("model", None)
    out["settings"] = settings
    out["workspace_dir"] = workspace
    return out


def provider_of(model: str, options: Options) -> Provider:
    """The provider of `model`, built with the options' model settings."""
    from bubu.providers import resolve

    provider = resolve(
        model,
        base_url=options.get("base_url"),
        context_window=options.get("context_window"),
        thinking_budget=options.get("thinking"),
        stall_timeout=options.get("stall_timeout"),
        reasoning_effort=options.get("reasoning_effort"),
        max_output_tokens=options.get("max_output_tokens"),
        cache_ttl=options.get("cache_ttl"),
        native_tools=options.get("native_tools"),
    )
    if options.get("web_search") and hasattr(provider, "web_search"):
        provider.web_search = True  # the provider's own search, on its side
    return provider


def model_settings_of(options: Options) -> ModelSettings:
    """How the provider was built besides its spec, as each turn records it."""
    return ModelSettings(
        base_url=options.get("base_url"),
        context_window=options.get("context_window"),
        thinking_budget=options.get("thinking"),
        stall_timeout=options.get("stall_timeout") or env_stall_timeout(),
        reasoning_effort=options.get("reasoning_effort"),
        max_output_tokens=options.get("max_output_tokens"),
        cache_ttl=options.get("cache_ttl"),
        native_tools=options.get("native_tools"),
    )


def sandbox_box(options: Options) -> Box:
    """The sandbox's sockets, SSH agent and limits the options chose."""
    from bubu.tools.limits import Limits
    from bubu.tools.sandbox import Options as Box

    return Box(
        allow_sockets=tuple(options.get("allow_socket") or ()),
        ssh_agent=bool(options.get("ssh_agent")),
        limits=Limits(
            procs=options.get("max_procs") or 0,
            memory=options.get("max_memory") or 0,
            file_size=options.get("max_file_size") or 0,
        ),
    )


def policy_of(options: Options, *, box: Box | None = None) -> Policy:
    """The permission policy the options chose (`box`: sandbox options chosen otherwise)."""
    return Policy(
        yes=bool(options.get("yes")),
        allow_commands=tuple(options.get("allow") or ()),
        sandbox=options.get("sandbox"),
        network=bool(options.get("network")),
        pass_env=tuple(options.get("pass_env") or ()),
        box=box if box is not None else sandbox_box(options),
        allow_write=tuple(options.get("allow_write") or ()),
        web_domains=tuple(options.get("web_domains") or ()),
        deny=tuple(options.get("deny") or ()),
    )


def context_policy(
    compact_at: float | None,
    compact_to: float | None,
    summary_result_share: float | None = None,
    *,
    store_quota: int | None = None,
) -> ContextPolicy:
    """The bounded-context policy with the config's compaction shares (`compact_at` starts a
    compaction, `compact_to` is what it aims at: it must be lower) and the session's quota of
    bytes stored whole (None: no quota)."""
    from bubu.context.policy import ContextPolicy
    from bubu.errors import ConfigError

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
    return ContextPolicy(
        compact_at=at,
        compact_to=to,
        summary_result_share=summary_result_share,
        store_quota=store_quota,
    )


def run_config_of(options: Options) -> RunConfig:
    """The run's limits, hooks and context policy the options chose."""
    from bubu.context.quota import quota_of
    from bubu.engine.loops import DEFAULT_LOOP_LIMIT

    return RunConfig(
        max_steps=options.get("max_steps"),
        retry_for_s=options.get("retry_for"),
        fallback_models=tuple(options.get("fallback_model") or ()),
        token_limit=options.get("max_tokens"),
        time_limit_s=options.get("max_time"),
        max_cost=options.get("max_cost"),
        tool_timeout_s=options.get("tool_timeout") or DEFAULT_TOOL_TIMEOUT_S,
        context_window=options.get("context_window"),
        project_instructions=not options.get("no_project_instructions"),
        loop_limit=options.get("loop_limit") or DEFAULT_LOOP_LIMIT,
        hooks=hook_list(options.get("hooks"), options.get("workspace_dir")),
        plan=bool(options.get("plan")),
        max_background=options.get("max_background") or DEFAULT_MAX_BACKGROUND,
        context=context_policy(
            options.get("compact_at"),
            options.get("compact_to"),
            options.get("summary_result_share"),
            store_quota=quota_of(options.get("store_quota")),
        ),
    )


def hook_list(raw: object, workspace: str | None = None) -> Any:
    """The hooks of the `hooks` setting, those of `workspace`'s config file marked as its (each
    is checked against the workspace's trust before it runs)."""
    from bubu.engine.hooks import from_config
    from bubu.settings import workspace_hooks

    theirs = workspace_hooks(workspace) if workspace else None
    if theirs is None:
        return from_config(raw)
    return from_config(raw, workspace=theirs[0], theirs=theirs[1])


def extra_tools(options: Options, *, native_search: bool = False) -> dict[str, Tool]:
    """The tools a host offers beside the registered ones, by what the options allow: the web
    tools (`bubu.tools.web`; no `web_search` where the provider searches itself), and `skill`
    where the workspace or ``$BUBU_HOME`` has skills."""
    from bubu.engine.extensions import skills
    from bubu.tools import tool_table
    from bubu.tools.web import web_tools

    extra = web_tools(
        network=bool(options.get("network")),
        domains=tuple(options.get("web_domains") or ()),
        search=None if native_search else options.get("web_search_url"),
    )
    if skills(options.get("workspace_dir")):
        from bubu.tools.skill import skill

        extra.append(skill)
    return dict(tool_table(extra, where="the host's extra tools"))


def code_tools(
    tools: Iterable[Tool], *, builtin: bool = True, plugins: bool = False
) -> dict[str, Tool]:
    """The tools a program chose (the Python API): every registered tool with `plugins`, else
    the built-in ones unless `builtin` is off, then its own; two with one name are refused."""
    from bubu.tools import builtin_tools, registered_tools, tool_table

    base: list[Tool] = []
    if plugins:
        base = list(registered_tools().values())
    elif builtin:
        base = list(builtin_tools().values())
    return tool_table([*base, *tools], where="the agent's tools")


def assemble_host(
    store: Store,
    model: str | Provider,
    options: Options,
    *,
    asker: Asker = nobody,
    observer: Observer | None = None,
    tools: Mapping[str, Tool] | None = None,
    turn_tools: bool = True,
    policy: Policy | None = None,
    config: RunConfig | None = None,
    prompt: str | None = None,
    owner: str | None = None,
) -> Host:
    """The host a front end runs turns with, built from its run `options`.

    `model` is a spec (built with the options' model settings) or a provider built already
    (whose settings are its own: none are recorded).
    `tools` replaces the tools the options choose (the registered tools, those of the MCP
    servers in ``mcp`` or ``$BUBU_HOME/mcp.json``, the web tools and `skill`); with
    `turn_tools` and no MCP file named, a resumed or recovered turn gets back the MCP servers it
    was started with. `policy` and `config` replace those the options choose (the Python API
    passes its own objects). The observer also runs the options' ``notify`` command."""
    from bubu.notify import wrap
    from bubu.pricing import configure_from, warm
    from bubu.providers import resolve

    provider = provider_of(model, options) if isinstance(model, str) else model
    if "prices" in options:
        configure_from(options.get("prices"))
    warm(provider.spec)
    fallbacks = {
        spec: resolve(spec, stall_timeout=options.get("stall_timeout"))
        for spec in options.get("fallback_model") or ()
    }
    run = config if config is not None else run_config_of(options)
    load_tools: Callable[[str], dict[str, Tool]] | None = None
    if tools is not None:
        table, mcp_config = dict(tools), None
    else:
        table, mcp_config, load_tools = _chosen_tools(options, provider, turn_tools=turn_tools)
    host = Host(
        store=store,
        provider=provider,
        tools=table,
        policy=policy if policy is not None else policy_of(options),
        asker=asker,
        observer=wrap(
            observer if observer is not None else NullObserver(),
            options.get("notify"),
            store,
            options.get("notify_timeout"),
        ),
        config=run,
        prompt=prompt,
        mcp_config=mcp_config,
        load_tools=load_tools,
        model_settings=model_settings_of(options) if isinstance(model, str) else ModelSettings(),
        fallbacks=fallbacks,
    )
    if owner is not None:
        host.owner = owner
    return host


def _chosen_tools(
    options: Options, provider: Provider, *, turn_tools: bool
) -> tuple[dict[str, Tool], str | None, Callable[[str], dict[str, Tool]] | None]:
    """The registered tools, the MCP servers' and the extra ones; the MCP file they came from;
    and how to load another's (None: the MCP file was named, or `turn_tools` is off)."""
    from bubu.mcppath import default_config_path
    from bubu.tools import host_tools

    # An MCP file the user named is their choice; without one, a recovered or resumed turn gets
    # the servers it was started with (recorded with the turn).
    chosen = options.get("mcp")
    mcp = Path(chosen).expanduser() if chosen else default_config_path()
    pass_env: tuple[str, ...] = tuple(options.get("pass_env") or ())
    extra = extra_tools(options, native_search=bool(getattr(provider, "web_search", False)))
    tools = host_tools(str(mcp) if mcp is not None else None, pass_env=pass_env) | extra
    if not turn_tools:
        return tools, None, None
    recorded = str(mcp.resolve()) if mcp is not None else None
    if chosen:
        return tools, recorded, None
    return tools, recorded, lambda path: host_tools(path, pass_env=pass_env) | extra


__all__ = [
    "Options",
    "assemble_host",
    "code_tools",
    "config_options",
    "context_policy",
    "extra_tools",
    "model_settings_of",
    "policy_of",
    "provider_of",
    "run_config_of",
    "sandbox_box",
]
