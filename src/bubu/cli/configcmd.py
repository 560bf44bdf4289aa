"""Config files under the run commands' options, `bubu config` to see the result, and
`bubu trust` to let a workspace's file choose who acts (`bubu.trust`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from bubu.cli.app import cli, emit_json
from bubu.cli.term import printable
from bubu.errors import ConfigError

if TYPE_CHECKING:  # `bubu show` and `status` share a module with the options; only runs resolve
    from bubu.settings import Settings, Source


def _flag_name(p: click.Parameter) -> str:
    names = [o for o in getattr(p, "opts", []) if o.startswith("--")]
    return names[0] if names else str(p.name)


def _plain(value: object) -> object:
    """A default as JSON can show it (click's own markers for "no default" are None)."""
    if isinstance(value, tuple):
        return list(value)
    return value if isinstance(value, str | int | float | bool | list) else None


def _defaults(params: list[click.Parameter]) -> dict[str, object]:
    from bubu.tools.sandbox import DEFAULT_MODE

    out = {str(p.name): _plain(p.default) for p in params}
    from bubu.notify import DEFAULT_TIMEOUT_S

    fallback: dict[str, object] = {"sandbox": DEFAULT_MODE, "yes": False, "network": False}
    fallback["notify_timeout"] = DEFAULT_TIMEOUT_S
    for name, value in fallback.items():
        if out.get(name) is None:
            out[name] = value
    return out


def _given(
    ctx: click.Context, opts: dict[str, Any]
) -> tuple[dict[str, tuple[object, Source, str | None]], dict[str, object]]:
    """The options the command line (or a flag's own variable) set, and every option's default."""
    given: dict[str, tuple[object, Source, str | None]] = {}
    defaults = _defaults(ctx.command.params)
    for p in ctx.command.params:
        assert p.name is not None  # every option of the run commands is named
        src = ctx.get_parameter_source(p.name)
        if p.name not in opts:
            continue
        if src is ParameterSource.COMMANDLINE:
            given[p.name] = (opts[p.name], "flag", _flag_name(p))
        elif src is ParameterSource.ENVIRONMENT:
            envvar = p.envvar if isinstance(p.envvar, str) else None
            given[p.name] = (opts[p.name], "env", envvar)
    return given, defaults


def settle(opts: dict[str, Any], workspace: str | None) -> dict[str, Any]:
    """`opts` with the config files' values filled in where no flag or variable gave one.

    The model lands in `configured_model` (a continued session keeps its own unless `-m`);
    `settings` holds the whole resolution. A bad file raises ConfigError before anything runs.
    """
    from bubu.settings import BY_NAME, resolve

    ctx = click.get_current_context()
    out = dict(opts)
    profile = out.pop("profile", None)
    src = ctx.get_parameter_source("profile")
    given, defaults = _given(ctx, opts)
    repeatable = {p.name for p in ctx.command.params if getattr(p, "multiple", False)}
    settings = resolve(
        workspace=workspace,
        flags=given,
        defaults=defaults,
        profile=profile,
        profile_source="env" if src is ParameterSource.ENVIRONMENT else "flag",
    )
    for name, s in settings.values.items():
        option = BY_NAME[name].option
        if option == "model":
            out["configured_model"] = s.value if s.source != "flag" else None
        elif s.source not in ("flag", "default") or (BY_NAME[name].merge and s.value):
            # (A list every layer adds to holds the flag's values and the files'.)
            # A repeatable flag gives a tuple; a file's list stands in for it the same way.
            out[option] = (
                tuple(s.value) if isinstance(s.value, list) and option in repeatable else s.value
            )
        elif option not in out:
            out[option] = s.value
    out["settings"] = settings
    out.setdefault("workspace_dir", workspace)  # where the host looks for skills
    global _unsaid
    from bubu.settings import ignored_line

    _unsaid = ignored_line(settings)
    return out


_unsaid: str | None = None
"""The line about ignored workspace keys, until the run's header has said it (once)."""


def unsaid() -> str | None:
    """The line about ignored workspace keys, if the header has not said it yet."""
    return _unsaid


def announce(say: Callable[[str], object] | None = None) -> None:
    """Say, once, under the run's header, which workspace keys were ignored (with `say`, else
    on stderr, where a script's output is not disturbed)."""
    global _unsaid
    line, _unsaid = _unsaid, None
    if line is None:
        return
    if say is not None:
        say(printable(line))
    else:
        click.echo(f"bubu: {printable(line)}", err=True)


def settings_json(s: Settings) -> dict[str, object]:
    """The effective settings as `bubu config --json` prints them."""
    return {
        "profile": s.profile,
        "files": list(s.files),
        "settings": {
            k: {"value": v.value, "source": v.source, "where": v.where} for k, v in s.values.items()
        },
        "workspace_trust": s.trust,
        "ignored": [
            {"key": i.key, "value": i.value, "where": i.where, "reason": i.reason, "kind": i.kind}
            for i in s.ignored
        ],
    }


def profile_option(f: Any) -> Any:
    """`-p NAME` / BUBU_PROFILE: a `[profiles.NAME]` table of the config files."""
    return click.option(
        "-p",
        "--profile",
        default=None,
        envvar="BUBU_PROFILE",
        metavar="NAME",
        help="Use the [profiles.NAME] table of the config files.",
    )(f)


@cli.command("config")
@click.option(
    "-w",
    "--workspace",
    default=".",
    type=click.Path(file_okay=False),
    help="The workspace whose .bubu/config.toml applies.",
)
@profile_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def config_cmd(workspace: str, profile: str | None, as_json: bool) -> None:
    """Print the effective settings and where each came from (flag, env, profile, file, default)."""
    from bubu.cli.agentcmds import run_cmd
    from bubu.settings import resolve

    defaults = _defaults(run_cmd.params)
    ctx = click.get_current_context()
    src = ctx.get_parameter_source("profile")
    s = resolve(
        workspace=workspace,
        flags={},
        defaults=defaults,
        profile=profile,
        profile_source="env" if src is ParameterSource.ENVIRONMENT else "flag",
    )
    if as_json:
        emit_json(settings_json(s))
        return
    files = ", ".join(s.files) if s.files else "none (see docs/configuration.md)"
    click.echo(f"config files: {printable(files)}")
    if s.profile:
        click.echo(f"profile: {printable(s.profile)}")
    width = max(len(k) for k in s.values)
    for name, v in s.values.items():
        shown = "(unset)" if v.value is None else json.dumps(v.value)
        origin = v.source + (f" {v.where}" if v.where else "")
        click.echo(f"  {name:<{width}} = {printable(shown):<32} # {printable(origin)}")
    if s.ignored:
        click.echo(f"ignored in the workspace file ({s.trust}):")
        for i in s.ignored:
            shown = f"{i.key} = {json.dumps(i.value)}"
            click.echo(f"  {printable(shown)} # {printable(i.where)}: {printable(i.reason)}")


@cli.command("trust")
@click.argument("directory", default=".", type=click.Path(file_okay=False), required=False)
@click.option("--revoke", is_flag=True, help="Stop trusting the workspace.")
@click.option("--list", "list_", is_flag=True, help="List the trusted workspaces.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with --list).")
def trust_cmd(directory: str, revoke: bool, list_: bool, as_json: bool) -> None:
    """Let DIRECTORY's .bubu/config.toml choose the model, server and MCP servers, as it is now
    (any change to the file revokes it); limits and permissions it may only ever tighten."""
    from pathlib import Path

    from bubu import trust
    from bubu.settings import chooser_files, choosers, workspace_layer

    if list_:
        rows = [e for e in trust.entries().values() if e.trusted]
        if as_json:
            emit_json([{"workspace": e.workspace, "digest": e.digest, "at": e.at} for e in rows])
            return
        for e in rows:
            click.echo(f"{printable(e.workspace)}  (since {e.at})")
        if not rows:
            click.echo("no workspace is trusted")
        return
    root = str(Path(directory).expanduser().resolve())
    if revoke:
        known = trust.revoke(root)
        click.echo(f"{'no longer trusted' if known else 'was not trusted'}: {printable(root)}")
        return
    ws = workspace_layer(root)
    if ws is None:
        raise ConfigError(
            f"{root} has no .bubu/config.toml, so there is nothing to trust; a workspace "
            "without one uses your own settings"
        )
    trust.record(root, trust.digest(chooser_files(ws)), trusted=True)
    keys = choosers(ws)
    said = f" (it sets {', '.join(keys)})" if keys else ""
    click.echo(f"trusted: {printable(str(ws.path))}{said}; a change to it revokes this")
