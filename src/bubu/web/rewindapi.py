"""The web UI's rewind: the preview of a rewind to a turn's start, and carrying it out.

``GET /api/sessions/{sid}/rewind?to=SEQ[&force=PATH…]`` returns the preview as JSON (what
`bubu rewind` prints: each file's fate, the commands whose effects cannot be undone, and a
token naming that exact preview). ``POST /api/sessions/{sid}/rewind`` with
``{"to": SEQ, "token": T, "force": [PATH…]}`` carries it out only if the preview is still the
one with token T (the files did not change since), and returns the fork's id. Both go through
the same token guard as every other route.
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bubu.engine.rewind import preview, rewind
from bubu.errors import ConfigError
from bubu.log.store import Store


class RewindBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A confirmed rewind."""

    to: int
    token: str
    force: list[str] = msgspec.field(default_factory=list)


def _json(obj: object, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status, media_type="application/json")


def _to(raw: str | None) -> int:
    if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise ConfigError(f"to must be the seq to rewind to (a whole number), not {raw!r}")
    return int(raw)


def rewind_routes(store: Store, prefix: str) -> list[Route]:
    """The rewind routes below `prefix` (a session's API path)."""
    import anyio.to_thread

    async def show(request: Request) -> Response:
        sid = request.path_params["sid"]
        to = _to(request.query_params.get("to"))
        force = request.query_params.getlist("force")
        p = await anyio.to_thread.run_sync(lambda: preview(store, sid, to, force=force))
        return _json(p.to_json())

    async def do(request: Request) -> Response:
        sid = request.path_params["sid"]
        body = msgspec.json.decode(await request.body(), type=RewindBody)

        def run() -> dict[str, object]:
            p = preview(store, sid, body.to, force=body.force)
            if p.token != body.token:
                raise ConfigError(
                    "the files changed since this preview; nothing was done, look at the new "
                    "preview and confirm again"
                )
            return rewind(store, p).to_json()

        return _json(await anyio.to_thread.run_sync(run))

    return [
        Route(prefix + "/rewind", show),
        Route(prefix + "/rewind", do, methods=["POST"]),
    ]


__all__ = ["rewind_routes"]
