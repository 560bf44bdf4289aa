"""The OAuth redirect's landing place for `bubu mcp login`: a tiny HTTP server on 127.0.0.1
that takes the one request the browser makes after the authorization (``?code=…&state=…``),
answers it with a page that says to go back to the terminal, and hands the code to the SDK."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bubu.errors import ConfigError

PAGE = (
    "<!doctype html><meta charset=utf-8><title>Bubu</title>"
    "<p>{text} You can close this page and go back to the terminal.</p>"
)


class Callback:
    """A one-shot callback server; `redirect_uri` is where the authorization server sends the
    browser, `wait()` the code and state it brought."""

    def __init__(self, *, port: int = 0, path: str = "/callback", timeout_s: float = 300.0):
        self.port = port
        self.path = path
        self.timeout_s = timeout_s
        self._server: asyncio.Server | None = None
        self._got: asyncio.Future[dict[str, str]] | None = None

    @property
    def redirect_uri(self) -> str:
        """The URL registered as the client's redirect URI."""
        return f"http://127.0.0.1:{self.port}{self.path}"

    async def __aenter__(self) -> Callback:
        self._got = asyncio.get_running_loop().create_future()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def wait(self) -> Any:
        """The authorization's result (code, state, iss), once the browser brought it."""
        from mcp.shared.auth import AuthorizationCodeResult

        assert self._got is not None
        try:
            q = await asyncio.wait_for(self._got, self.timeout_s)
        except TimeoutError:
            raise ConfigError(
                f"no sign-in came back within {self.timeout_s:.0f} s; run the login again"
            ) from None
        if "error" in q:
            what = q.get("error_description") or q["error"]
            raise ConfigError(f"the authorization server refused the sign-in: {what}")
        return AuthorizationCodeResult(
            code=q.get("code", ""), state=q.get("state"), iss=q.get("iss")
        )

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = (await asyncio.wait_for(reader.readline(), 10)).decode("latin-1")
            while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
                pass  # the headers: nothing in them is needed
            parts = line.split()
            target = urlsplit(parts[1]) if len(parts) >= 2 else None
            if target is None or target.path != self.path:
                await self._answer(writer, 404, "Not the sign-in address.")
                return
            q = {k: v[0] for k, v in parse_qs(target.query).items()}
            ok = "code" in q and "error" not in q
            await self._answer(writer, 200, "Signed in." if ok else "The sign-in failed.")
            if self._got is not None and not self._got.done():
                self._got.set_result(q)
        except (OSError, TimeoutError, UnicodeError):
            pass
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, status: int, text: str) -> None:
        body = PAGE.format(text=text).encode()
        head = (
            f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\n"
            f"content-type: text/html; charset=utf-8\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()


__all__ = ["Callback"]
