"""The access token: every request must carry it, or it is refused.

The token comes as the `token` query parameter (the URL `bubu ui` prints), as a cookie set on the
first request that carried it, or as `Authorization: Bearer TOKEN`. No token is 401, a wrong one is
403. A state-changing request whose `Origin` is another site is refused too, so a page elsewhere
cannot drive the agent through the browser's cookie.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

NO_TOKEN = (
    "This Bubu UI needs its access token: open the URL that `bubu ui` printed "
    "(it ends in ?token=…).\n"
)
BAD_TOKEN = (
    "The access token is wrong: open the URL that `bubu ui` printed, or restart `bubu ui`.\n"
)
FOREIGN_ORIGIN = "This request came from another site, so it was refused.\n"

_SAFE = ("GET", "HEAD", "OPTIONS")


def new_token() -> str:
    """A fresh random access token."""
    return secrets.token_urlsafe(24)


def cookie_name(scope: Scope) -> str:
    """The cookie's name, per port: cookies ignore ports, and two UIs may run side by side."""
    server = scope.get("server")
    port = server[1] if server and server[1] is not None else 0
    return f"bubu_token_{port}"


class TokenGuard:
    """ASGI middleware that lets through only requests carrying the token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    def _ok(self, given: str | None) -> bool:
        return given is not None and secrets.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        name = cookie_name(scope)
        query = conn.query_params.get("token")
        auth = conn.headers.get("authorization", "")
        bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        cookie = conn.cookies.get(name)
        given = [t for t in (query, bearer, cookie) if t is not None]
        if not any(self._ok(t) for t in given):
            status, text = (403, BAD_TOKEN) if given else (401, NO_TOKEN)
            response = PlainTextResponse(text, status_code=status)
            if given:
                response.delete_cookie(name)
            await response(scope, receive, send)
            return
        if scope["type"] == "http" and scope["method"] not in _SAFE and not _same_origin(conn):
            await PlainTextResponse(FOREIGN_ORIGIN, status_code=403)(scope, receive, send)
            return
        if not self._ok(query) or self._ok(cookie):
            await self.app(scope, receive, send)
            return

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.append("set-cookie", f"{name}={self.token}; Path=/; HttpOnly; SameSite=Lax")
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def _same_origin(conn: HTTPConnection) -> bool:
    origin = conn.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == conn.headers.get("host", "")


__all__ = ["TokenGuard", "cookie_name", "new_token"]
