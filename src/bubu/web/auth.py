"""Who may talk to the UI: the right `Host`, and for the API the token in a header.

Browsers send cookies to every port of a host, so a cookie would hand the token to any other web
page or dev server on 127.0.0.1 that the user visits. The token therefore never travels in a
cookie: the page keeps it in memory (and in `sessionStorage`, which is per origin, port included)
and sends it as `Authorization: Bearer TOKEN`, a header no browser adds on its own. The checks,
in order:

- `Host` must name the address the UI is bound to (127.0.0.1, localhost or [::1], and the bound
  address itself) with its port; anything else is 421, so a DNS-rebound name reaches nothing.
- `/api/…` needs the bearer header: none is 401, a wrong one 403. Cookies and `?token=` are
  ignored. A request the browser marks as sent from another site or port (`Sec-Fetch-Site`) is
  403, and so is a state-changing request whose `Origin` is not this UI.
- The page shell (`/`) and `/static/…` hold no secret and load without the token.

Every refusal answers `{"error": "…"}`.
"""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Iterable

from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

NO_TOKEN = (
    "This Bubu UI needs its access token: open the URL that `bubu ui` printed "
    "(it ends in #token=…)."
)
NOT_A_HEADER = (
    "The access token must come as the header `Authorization: Bearer TOKEN`; cookies and "
    "?token= are not accepted."
)
BAD_TOKEN = "The access token is wrong: open the URL that `bubu ui` printed, or restart `bubu ui`."
BAD_HOST = "This request named the host {host!r}, which is not this Bubu UI, so it was refused."
FOREIGN_ORIGIN = "This request came from another site, so it was refused."

_SAFE = ("GET", "HEAD", "OPTIONS")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
_WILDCARD = ("0.0.0.0", "::", "")
_OWN_SITE = ("same-origin", "none")
"""`Sec-Fetch-Site` values of a request from this UI's own page (or typed in by the user)."""


def new_token() -> str:
    """A fresh random access token."""
    return secrets.token_urlsafe(24)


def split_host(value: str) -> tuple[str, int] | None:
    """(host, port) of a `Host` header value (port 80 when absent); None if it is malformed."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[1:end], value[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:] if rest else ""
    else:
        host, _, port = value.rpartition(":") if ":" in value else (value, "", "")
    if not host or (port and not port.isdigit()) or len(port) > 5:
        return None
    return host.lower(), int(port) if port else 80


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class TokenGuard:
    """ASGI middleware: the `Host` check for everything, the bearer token for the API."""

    def __init__(self, app: ASGIApp, token: str, hosts: Iterable[str] = ()) -> None:
        self.app = app
        self.token = token.encode()
        self.hosts = {h.strip("[]").lower() for h in hosts}
        """Extra host names accepted besides loopback and the bound address (`bubu ui --host`)."""

    def host_ok(self, scope: Scope, conn: HTTPConnection) -> bool:
        """Whether `Host` names this server: a name we answer to, and the port we listen on."""
        parsed = split_host(conn.headers.get("host", ""))
        server = scope.get("server")
        if parsed is None or not server:
            return False
        host, port = parsed
        bound = str(server[0]).lower()
        if port != server[1]:
            return False
        if host in LOOPBACK or host == bound or host in self.hosts:
            return True
        # Bound to every address: any IP literal is one of ours, and a literal cannot be rebound.
        return bound in _WILDCARD and _is_ip(host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        refusal = self.refusal(scope, conn)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, text = refusal
        await JSONResponse({"error": text}, status_code=status)(scope, receive, send)

    def refusal(self, scope: Scope, conn: HTTPConnection) -> tuple[int, str] | None:
        """(status, why) when the request must be refused; None when it may pass."""
        if not self.host_ok(scope, conn):
            return 421, BAD_HOST.format(host=conn.headers.get("host", ""))
        if not scope["path"].startswith("/api/"):
            return None  # the page shell and its assets: no secret in them
        site = conn.headers.get("sec-fetch-site")
        if site is not None and site not in _OWN_SITE:
            return 403, FOREIGN_ORIGIN
        auth = conn.headers.get("authorization", "")
        scheme, _, given = auth.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            tried = "token" in conn.query_params or any(
                k.startswith("bubu_token") for k in conn.cookies
            )
            return 401, NOT_A_HEADER if tried else NO_TOKEN
        if not secrets.compare_digest(given.strip().encode(), self.token):
            return 403, BAD_TOKEN
        if scope["type"] == "http" and scope["method"] not in _SAFE and not _same_origin(conn):
            return 403, FOREIGN_ORIGIN
        return None


def _same_origin(conn: HTTPConnection) -> bool:
    origin = conn.headers.get("origin")
    if origin is None:
        return True  # not a browser, or a same-origin request that omits it
    if origin == "null":
        return False
    return origin.lower() == f"http://{conn.headers.get('host', '').lower()}"


__all__ = ["LOOPBACK", "TokenGuard", "new_token", "split_host"]
