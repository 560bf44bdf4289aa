"""`bubu mcp login NAME` and `bubu mcp logout NAME`: the OAuth sign-in of a remote MCP server
(`bubu.tools.mcpauth`)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import click

from bubu.cli.app import cli, fail


@cli.group("mcp")
def mcp_group() -> None:
    """Sign in to (or out of) the remote MCP servers that require OAuth."""


def _server_url(name: str, mcp: str | None) -> str:
    from bubu.tools.mcp import default_config_path, load_config

    path = Path(mcp).expanduser() if mcp else default_config_path()
    if path is None:
        fail("there is no MCP configuration: give --mcp FILE or write $BUBU_HOME/mcp.json")
    servers = load_config(path).all()
    server = servers.get(name)
    if server is None:
        fail(f"{path} has no MCP server {name!r}; it has: {', '.join(servers) or 'none'}")
    if server.url is None:
        fail(f"the MCP server {name!r} runs as a command (stdio): there is nothing to sign in to")
    return server.url


_MCP_OPTION = click.option(
    "--mcp",
    "mcp",
    default=None,
    envvar="BUBU_MCP",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="The MCP servers file (default $BUBU_HOME/mcp.json).",
)


@mcp_group.command("login")
@click.argument("name")
@_MCP_OPTION
@click.option("--no-browser", is_flag=True, help="Print the sign-in address; open no browser.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    help="The local port the sign-in comes back to [default: any free one].",
)
def login_cmd(name: str, mcp: str | None, no_browser: bool, port: int) -> None:
    """Sign in to the MCP server NAME with OAuth in a browser; the tokens are kept in
    $BUBU_HOME/mcp-auth (mode 0600) and refreshed when they expire."""
    from bubu.errors import BubuError
    from bubu.tools.mcpauth import login, token_path

    url = _server_url(name, mcp)

    async def show(address: str) -> None:
        click.echo(f"Sign in to {name} at:\n  {address}", err=True)
        if not no_browser:
            import webbrowser

            with contextlib.suppress(Exception):
                webbrowser.open(address)
        click.echo("waiting for the sign-in to come back …", err=True)

    try:
        tools = asyncio.run(login(name, url, show=show, port=port))
    except BubuError as e:
        fail(str(e))
    except Exception as e:  # the SDK's OAuth and HTTP errors
        from bubu.tools.mcp import _leaf

        leaf = _leaf(e)
        fail(f"signing in to {name} failed ({type(leaf).__name__}: {leaf})")
    click.echo(f"signed in to {name} ({len(tools)} tools); kept in {token_path(name)}")


@mcp_group.command("logout")
@click.argument("name")
def logout_cmd(name: str) -> None:
    """Forget the sign-in of the MCP server NAME (its tokens in $BUBU_HOME/mcp-auth)."""
    from bubu.tools.mcpauth import token_path

    path = token_path(name)
    if not path.exists():
        click.echo(f"not signed in to {name}")
        return
    path.unlink()
    click.echo(f"signed out of {name} ({path} removed)")


__all__ = ["login_cmd", "logout_cmd", "mcp_group"]
