"""`bubu config` to see the effective settings (`bubu.cli.settling` resolves them), and
`bubu trust` to let a workspace's file choose who acts (`bubu.trust`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from bubu.cli.app import cli, emit_json
from bubu.cli.settling import defaults_of, profile_option
from bubu.cli.term import printable
from bubu.errors import ConfigError

if TYPE_CHECKING:  # `bubu show` and `status` share a module with the options; only runs resolve
    from bubu.settings import Settings


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

    defaults = defaults_of(run_cmd.params)
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
