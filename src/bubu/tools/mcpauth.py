"""Signing in to remote MCP servers that require OAuth, with the MCP SDK's client auth.

`bubu mcp login NAME` runs the SDK's flow (`mcp.client.auth.OAuthClientProvider`): discovery of
the server's protected-resource and authorization-server metadata, dynamic client registration,
the authorization in a browser with PKCE, back to a one-shot callback server on 127.0.0.1, and
the token exchange. The tokens and the registered client are kept in
``$BUBU_HOME/mcp-auth/NAME.json`` (mode 0600, in a 0700 directory), tied to the server's URL.

A later connection to that server (`bubu.tools.mcp`) sends the access token, refreshes it when
it expires (a rotated refresh token is kept), and says to sign in again when the refresh is
refused. Tokens are only ever in request headers and in that file: both are registered as
secrets, so they are scrubbed from anything bound for the log.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bubu import secrets
from bubu.errors import ConfigError

if TYPE_CHECKING:
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

EARLY_S = 30
"""Seconds before its expiry an access token is refreshed."""

CALLBACK_PATH = "/callback"
LOGIN_TIMEOUT_S = 300.0


def auth_dir() -> Path:
    """``$BUBU_HOME/mcp-auth``."""
    home = Path(os.environ.get("BUBU_HOME") or Path.home() / ".bubu").expanduser()
    return home / "mcp-auth"


def token_path(name: str) -> Path:
    """Where the sign-in of server `name` is kept."""
    return auth_dir() / f"{name}.json"


def _write_private(path: Path, data: dict[str, Any]) -> None:
    from bubu.log import make_home

    make_home(path.parent.parent)  # $BUBU_HOME: 0700 when this creates it
    path.parent.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # undone, then re-raised: Ctrl-C and exits too
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class TokenFile:
    """The SDK's `TokenStorage` over ``$BUBU_HOME/mcp-auth/NAME.json``: what it holds counts only
    for the URL it was signed in to."""

    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = url
        self.path = token_path(name)

    def read(self) -> dict[str, Any]:
        """The file's content for this URL ({} when none, or for another URL)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"{self.path} cannot be read ({e}); `bubu mcp login {self.name}` writes it anew"
            ) from None
        if not isinstance(data, dict) or data.get("url") != self.url:
            return {}
        return data

    def _update(self, **fields: Any) -> None:
        _write_private(self.path, {**self.read(), "url": self.url, **fields})

    async def get_tokens(self) -> OAuthToken | None:
        """The stored tokens, `expires_in` counted from now (so an old token reads as expired)."""
        from mcp.shared.auth import OAuthToken

        data = self.read()
        raw = data.get("tokens")
        if not isinstance(raw, dict):
            return None
        token = OAuthToken.model_validate(raw)
        expires_at = data.get("expires_at")
        if isinstance(expires_at, int | float):
            token.expires_in = int(expires_at - time.time()) - EARLY_S
        self._secret(token)
        return token

    async def set_tokens(self, tokens: OAuthToken) -> None:
        """Keep new tokens (after a sign-in or a refresh)."""
        self._secret(tokens)
        expires = time.time() + tokens.expires_in if tokens.expires_in is not None else None
        self._update(tokens=tokens.model_dump(mode="json", exclude_none=True), expires_at=expires)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        """The client registered with the server's authorization server."""
        from mcp.shared.auth import OAuthClientInformationFull

        raw = self.read().get("client")
        return OAuthClientInformationFull.model_validate(raw) if isinstance(raw, dict) else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        """Keep the registered client."""
        if client_info.client_secret:
            secrets.register(f"MCP_{self.name}_CLIENT_SECRET".upper(), client_info.client_secret)
        self._update(client=client_info.model_dump(mode="json", exclude_none=True))

    def _secret(self, token: OAuthToken) -> None:
        label = f"MCP_{self.name}".upper().replace("-", "_")
        secrets.register(f"{label}_ACCESS_TOKEN", token.access_token)
        secrets.register(f"{label}_REFRESH_TOKEN", token.refresh_token)


def _provider_class() -> type[OAuthClientProvider]:
    from mcp.client.auth import OAuthClientProvider

    class Provider(OAuthClientProvider):
        """The SDK's provider, which also reads the stored token's expiry when it loads it."""

        async def _initialize(self) -> None:
            await super()._initialize()
            tokens = self.context.current_tokens
            if tokens is not None and tokens.expires_in is not None:
                self.context.update_token_expiry(tokens)

    return Provider


def _metadata(redirect_uri: str) -> Any:
    from mcp.shared.auth import OAuthClientMetadata

    return OAuthClientMetadata(
        client_name="Bubu",
        redirect_uris=[redirect_uri],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="client_secret_post",
    )


async def _signed_out(_: object = None) -> Any:
    raise ConfigError("signed out")


def connection_auth(name: str, url: str) -> OAuthClientProvider | None:
    """The auth of a connection to server `name` at `url`: its stored sign-in, refreshed when it
    expires; None when it was never signed in. A sign-in that cannot be refreshed fails the
    connection with a ConfigError that says to log in again."""
    store = TokenFile(name, url)
    data = store.read()
    if not data.get("tokens"):
        return None
    client = data.get("client") or {}
    redirect = (client.get("redirect_uris") or ["http://127.0.0.1/callback"])[0]

    async def again(_: str) -> None:
        raise ConfigError(
            f"the sign-in to the MCP server {name!r} has expired and could not be refreshed; "
            f"run `bubu mcp login {name}`"
        )

    return _provider_class()(
        server_url=url,
        client_metadata=_metadata(redirect),
        storage=store,
        redirect_handler=again,
        callback_handler=_signed_out,
    )


async def login(
    name: str, url: str, *, show: Callable[[str], Awaitable[None]], port: int = 0
) -> list[str]:
    """Sign in to server `name` at `url` (a fresh registration and authorization): `show` is
    given the URL to open; the callback is served on 127.0.0.1:`port` (0: any free port). The
    names of the server's tools once signed in."""
    from bubu.tools.mcpcallback import Callback

    token_path(name).unlink(missing_ok=True)
    async with Callback(port=port, path=CALLBACK_PATH) as cb:
        provider = _provider_class()(
            server_url=url,
            client_metadata=_metadata(cb.redirect_uri),
            storage=TokenFile(name, url),
            redirect_handler=show,
            callback_handler=cb.wait,
        )
        return await _list_with(url, provider)


async def _list_with(url: str, auth: Any) -> list[str]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30.0, read=LOGIN_TIMEOUT_S)) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):
        listed = await client.list_tools()
        return [t.name for t in listed.tools]


__all__ = ["TokenFile", "auth_dir", "connection_auth", "login", "token_path"]
