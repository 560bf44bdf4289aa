"""`bubu agents`: the named agents a workspace's sub-agents can be started as, and those ignored."""

from __future__ import annotations

from pathlib import Path

import click

from bubu.cli.app import cli, emit_json
from bubu.cli.term import printable


@cli.command("agents")
@click.option(
    "-w",
    "--workspace",
    default=".",
    type=click.Path(file_okay=False),
    help="The workspace whose agents to list.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def agents_cmd(workspace: str, as_json: bool) -> None:
    """List the named agents delegate can start (yours, and a trusted workspace's), and the
    ones that are ignored and why."""
    from bubu.agents import load_agents

    found = load_agents(Path(workspace).expanduser().resolve())
    if as_json:
        emit_json(
            {
                "agents": [
                    {
                        "name": a.name,
                        "description": a.description,
                        "tools": a.tools,
                        "model": a.model,
                        "scope": a.scope,
                        "path": a.path,
                    }
                    for a in found.found.values()
                ],
                "ignored": list(found.ignored),
            }
        )
        return
    for a in found.found.values():
        model = a.model or "the parent's model"
        tools = ", ".join(a.tools) if a.tools is not None else "the parent's tools"
        click.echo(printable(f"{a.name}  ({a.scope}) {a.description}"))
        click.echo(printable(f"    model: {model} · tools: {tools} · {a.path}"))
    if not found.found:
        click.echo("no named agents (put them in $BUBU_HOME/agents/*.md or .bubu/agents/*.md)")
    for line in found.ignored:
        click.echo(printable(f"ignored: {line}"), err=True)
