"""`bubu ui`: serve the web UI on 127.0.0.1 with a random access token."""

from __future__ import annotations

import contextlib
import errno
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

import click

from bubu.cli.app import Ctx, cli, pass_ctx
from bubu.errors import ConfigError

DEFAULT_PORT = 8642


def bind(host: str, port: int | None) -> socket.socket:
    """A listening socket on `host:port`; with no port given the default one is tried, falling
    back to a free one if taken (a port the user named must be that port, or an error)."""
    if port is None:
        try:
            return bind(host, DEFAULT_PORT)
        except ConfigError:
            return bind(host, 0)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        reason = "is in use" if e.errno == errno.EADDRINUSE else f"cannot be bound ({e.strerror})"
        raise ConfigError(
            f"{host}:{port} {reason}; pass another --port (0 picks a free one)"
        ) from e
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_for(sock: socket.socket, token: str) -> str:
    """The URL to open, the token in its fragment: a browser never sends that part to a server."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/#token={token}"


def port_option(_ctx: click.Context, _param: click.Parameter, value: int | None) -> int | None:
    """Check a --port value before anything runs, in one line."""
    if value is not None and not 0 <= value <= 65535:
        raise ConfigError(
            f"--port takes a port number from 0 to 65535 (0: any free one), got {value}"
        )
    return value


@cli.command("ui")
@click.option(
    "--port",
    type=int,
    default=None,
    callback=port_option,
    help=f"The port (0: any free one) [default: {DEFAULT_PORT}, or a free one if it is taken].",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--no-open", is_flag=True, help="Do not open a browser.")
@pass_ctx
def ui_cmd(ctx: Ctx, port: int | None, host: str, no_open: bool) -> None:
    """Serve the web UI: sessions, live transcripts, the recovery notice, approvals."""
    from bubu.web import create_app, new_token

    sock = bind(host, port)  # a taken port is refused before the log is opened (or created)
    store = ctx.store
    token = new_token()
    url = url_for(sock, token)
    app = create_app(store, token=token, hosts=[host])
    click.echo(f"Bubu UI: {url}")
    click.echo(
        f"  log {store.url} · crashed sessions are recovered in the background · Ctrl-C stops"
    )
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(
            f"  warning: listening on {host}; anyone who can reach it and has the URL controls "
            "your agent",
            err=True,
        )
    sys.stdout.flush()
    if not no_open:
        import webbrowser

        webbrowser.open(url)
    serve(app, sock)
    click.echo("Bubu UI stopped")


def serve(app: Any, sock: socket.socket) -> None:
    """Run uvicorn on `sock` until Ctrl-C or SIGTERM shuts it down in order (turns this UI runs
    are suspended); a second signal stops at once."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # The signals are ours: uvicorn would re-raise them after its shutdown, which turns
            # Ctrl-C into a traceback and a non-zero exit.
            yield

    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        ws="none",
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    server = Server(config)

    def on_signal(*_: object) -> None:
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True

    old = {
        sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
