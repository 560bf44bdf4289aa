"""The ASGI app: static page, JSON API over the projections, the SSE stream, and the actions.

Handlers are thin: reads go to `views`, actions to the `RunManager`. Every route sits behind
`auth.TokenGuard`: the `Host` check for all, the bearer token for the API. Errors a user can hit
come back as `{"error": "…"}` with a 4xx status, never as a traceback.
"""

from __future__ import annotations

import mimetypes
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal, TypeVar

import msgspec
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bubu import clock
from bubu.engine.driver import owner_id
from bubu.errors import (
    AppendConflict,
    BubuError,
    ConfigError,
    CorruptLog,
    LeaseError,
    UnknownSession,
)
from bubu.events import NoticeDismissed, SandboxMode, SystemNote, make
from bubu.log.store import Store
from bubu.projections.status import fold_status
from bubu.web import views
from bubu.web.auth import TokenGuard
from bubu.web.diffapi import diff_routes
from bubu.web.rewindapi import rewind_routes
from bubu.web.runs import HostFactory, RunManager, default_host
from bubu.web.stream import HEARTBEAT_S, session_events
from bubu.web.uiwords import ui_words

STATIC = Path(__file__).parent / "static"


TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
"""The assets' media types, not left to the machine's mime.types."""


def load_assets(directory: Path) -> dict[str, bytes]:
    """Every file of the page (index.html, its script, style and icon), by name, in memory."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


T = TypeVar("T")

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""Nothing outside this server may be loaded: no CDN, no inline script."""

SHELL_HEADERS = {
    "content-security-policy": CSP,
    "referrer-policy": "no-referrer",  # the URL may still carry the token when the page loads
    "cache-control": "no-store",
}


class StartTask(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The body of a new task."""

    task: str
    workspace: str
    model: str = ""
    allow_commands: list[str] = msgspec.field(default_factory=list)
    """Shell-style patterns of commands that run without asking (recorded with the turn)."""
    sandbox: SandboxMode | None = None
    """How the task's commands are confined (None: workspace-write); recorded with the turn."""
    network: bool = False


class FollowUp(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The body of a follow-up turn."""

    task: str


class Decision(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The body of a permission answer."""

    decision: Literal["allow", "deny"]


class Done(msgspec.Struct, kw_only=True):
    """The answer of an action."""

    ok: bool = True
    session: str | None = None
    action: str | None = None


class Config(msgspec.Struct, kw_only=True):
    """Defaults for the new-task form."""

    default_model: str
    default_workspace: str
    states: list[str]


def json(obj: object, status: int = 200) -> Response:
    """A JSON response from a view (never cached: transcripts are as private as the token)."""
    return Response(
        views.encode(obj),
        status_code=status,
        media_type="application/json",
        headers={"cache-control": "no-store"},
    )


class _Error(msgspec.Struct):
    error: str


def _status_for(e: BubuError) -> int:
    if isinstance(e, UnknownSession):
        return 404
    if isinstance(e, LeaseError | CorruptLog):
        return 409  # a log that does not verify is not run: the session's state, not a bug
    return 400 if isinstance(e, ConfigError) else 500


async def _bubu_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, BubuError)
    return json(_Error(ui_words(str(exc))), _status_for(exc))


async def _bad_body(_: Request, exc: Exception) -> Response:
    return json(_Error(f"the request body is not valid: {exc}"), 400)


async def _body(request: Request, kind: type[T]) -> T:
    return msgspec.json.decode(await request.body(), type=kind)


def create_app(
    store: Store,
    *,
    token: str,
    host_factory: HostFactory = default_host,
    recover: bool = True,
    workspace: str | None = None,
    hosts: Sequence[str] = (),
    static: Path = STATIC,
) -> Starlette:
    """The web UI over `store`, guarded by `token`; recovers crashed sessions at start if `recover`.
    The page and its assets are read from `static` once, here.

    `hosts` are names the UI answers to besides loopback and the address it is bound to."""
    manager = RunManager(store, host_factory=host_factory)
    index = views.SessionIndex(store, manager)
    closing = False
    # Read once at start: an upgrade or reinstall of the package while the UI runs (pip
    # replacing its files) must not take the page away from under it.
    files = load_assets(static)

    def page(request: Request) -> Response:
        response = Response(files["index.html"], media_type="text/html", headers=SHELL_HEADERS)
        for name in request.cookies:
            if name.startswith("bubu_token_"):  # set by older versions; it grants nothing now
                response.delete_cookie(name)
        return response

    def config(_: Request) -> Response:
        from bubu.modelchoice import default_model

        try:
            model = default_model()
        except ConfigError:
            model = ""
        return json(
            Config(
                default_model=model,
                default_workspace=workspace or os.getcwd(),
                states=list(views.STATES),
            )
        )

    def sessions(request: Request) -> Response:
        q = request.query_params
        return json({"sessions": index.rows(status=q.get("status"), query=q.get("q"))})

    async def start(request: Request) -> Response:
        body = await _body(request, StartTask)
        model = body.model.strip()
        if not model:
            from bubu.modelchoice import default_model

            model = default_model()
        info = await _threaded(
            lambda: manager.start_task(
                task=body.task,
                workspace=body.workspace,
                model=model,
                allow_commands=body.allow_commands,
                sandbox=body.sandbox,
                network=body.network,
            )
        )
        return json(Done(session=info.id, action="start"), 201)

    def session(request: Request) -> Response:
        info = store.session(request.path_params["sid"])
        tail = request.query_params.get("tail")
        return json(
            views.detail(index, info, tail=None if tail is None else _int(request, "tail", 0))
        )

    def items(request: Request) -> Response:
        info = store.session(request.path_params["sid"])
        before = _int(request, "before", info.high_water + 1)
        limit = min(max(_int(request, "limit", 100), 1), 1000)
        return json(views.items_page(store, info, before=before, limit=limit))

    def log(request: Request) -> Response:
        info = store.session(request.path_params["sid"])
        after = _int(request, "after", 0)
        limit = min(_int(request, "limit", 500), 5000)
        records = store.read(info.id, after=after, upto=after + limit)
        return json(
            views.LogPage(rows=[views.log_row(r) for r in records], high_water=info.high_water)
        )

    def event(request: Request) -> Response:
        info = store.session(request.path_params["sid"])
        seq = int(request.path_params["seq"])
        # Past the end (even beyond a 64-bit integer, which the database cannot take) is a 404.
        records = store.read(info.id, after=seq - 1, upto=seq) if 0 < seq <= info.high_water else []
        if not records:
            raise UnknownSession(f"session {info.id} has no event {seq}")
        return json(records[0])

    def context(request: Request) -> Response:
        return json(views.context_view(store, store.session(request.path_params["sid"])))

    def result(request: Request) -> Response:
        info = store.session(request.path_params["sid"])
        found = views.result_text(store, info, request.path_params["call_id"])
        if found is None:
            raise UnknownSession(f"the call {request.path_params['call_id']} has no result yet")
        text, sha = found
        offset, limit = _page(request)
        return json(views.line_page(text, offset=offset, limit=limit, sha256=sha))

    def blob(request: Request) -> Response:
        sha = request.path_params["sha"]
        data = store.blob(sha)
        if data is None:
            raise UnknownSession(f"no stored result has the hash {sha}")
        offset, limit = _page(request)
        return json(
            views.line_page(data.decode("utf-8", "replace"), offset=offset, limit=limit, sha256=sha)
        )

    async def follow_up(request: Request) -> Response:
        sid = request.path_params["sid"]
        body = await _body(request, FollowUp)
        await _threaded(lambda: manager.follow_up(sid, body.task))
        return json(Done(session=sid, action="follow_up"))

    def stop(request: Request) -> Response:
        sid = store.session(request.path_params["sid"]).id
        manager.stop(sid)
        return json(Done(session=sid, action="stop"))

    def resume(request: Request) -> Response:
        sid = store.session(request.path_params["sid"]).id
        return json(Done(session=sid, action=manager.resume(sid)))

    def compact(request: Request) -> Response:
        sid = store.session(request.path_params["sid"]).id
        return json(Done(session=sid, action=manager.compact(sid)))

    def dismiss(request: Request) -> Response:
        sid = store.session(request.path_params["sid"]).id
        return json(Done(session=sid, action="dismiss" if dismiss_notice(store, sid) else None))

    async def answer(request: Request) -> Response:
        sid = request.path_params["sid"]
        rid = request.path_params["rid"]
        body = await _body(request, Decision)
        await _threaded(lambda: manager.answer(store.session(sid).id, rid, body.decision))
        return json(Done(session=sid, action=body.decision))

    async def stream(request: Request) -> Response:
        info = await _threaded(lambda: store.session(request.path_params["sid"]))
        last = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        after = min(int(last), _MAX_INT) if last.isascii() and last.isdigit() else 0
        # sse-starlette keeps the connection alive (a comment every HEARTBEAT_S) and ends the
        # generator when the client goes away, so a closed tab stops polling the store at once.
        return EventSourceResponse(
            session_events(store, manager, info.id, after, lambda: closing),
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
            ping=HEARTBEAT_S,
            sep="\n",
        )

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        nonlocal closing
        if recover:
            manager.recover_at_start()
        try:
            yield
        finally:
            closing = True
            await _threaded(manager.shutdown)

    def asset(request: Request) -> Response:
        name = request.path_params["name"]
        body = files.get(name)
        if body is None or name == "index.html":
            return Response("not found", status_code=404, media_type="text/plain")
        kind = TYPES.get(Path(name).suffix) or mimetypes.guess_type(name)[0] or "text/plain"
        return Response(body, media_type=kind, headers={"Cache-Control": "no-cache"})

    sid = "/api/sessions/{sid}"
    routes = [
        Route("/", page),
        Route("/api/config", config),
        Route("/api/sessions", sessions),
        Route("/api/sessions", start, methods=["POST"]),
        Route(sid, session),
        Route(sid + "/log", log),
        Route(sid + "/items", items),
        Route(sid + "/events/{seq:int}", event),
        Route(sid + "/context", context),
        Route(sid + "/calls/{call_id}/result", result),
        Route(sid + "/stream", stream),
        Route(sid + "/turns", follow_up, methods=["POST"]),
        Route(sid + "/stop", stop, methods=["POST"]),
        Route(sid + "/resume", resume, methods=["POST"]),
        Route(sid + "/dismiss", dismiss, methods=["POST"]),
        Route(sid + "/compact", compact, methods=["POST"]),
        Route(sid + "/permissions/{rid}", answer, methods=["POST"]),
        *rewind_routes(store, sid),
        *diff_routes(store, sid),
        Route("/api/blobs/{sha}", blob),
        Route("/static/{name}", asset),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(TokenGuard, token=token, hosts=hosts)],
        exception_handlers={
            BubuError: _bubu_error,
            msgspec.DecodeError: _bad_body,
            msgspec.ValidationError: _bad_body,
        },
        lifespan=lifespan,
    )
    app.state.manager = manager
    return app


def dismiss_notice(store: Store, session: str) -> bool:
    """Record the dismissal of the session's recovery notice as `bubu dismiss` does; False if
    none."""
    for _ in range(5):
        st = fold_status(store.read(session))
        if st.notice_seq is None or st.notice_dismissed:
            return False
        from bubu.engine.recovery import lease_is_stale

        free = lease_is_stale(store.current_lease(session), store.now_ms())
        lease = store.acquire_lease(session, owner_id(), 10, steal=False) if free else None
        ev = make(
            session=session,
            turn=None,
            role="system",
            author="user",
            ts=clock.now_ms(),
            content=SystemNote(note=NoticeDismissed(notice_seq=st.notice_seq)),
            visibility="hidden",
        )
        try:
            store.append(
                session, [ev], expect=store.head(session).high_water, durable=True, lease=lease
            )
            return True
        except (AppendConflict, LeaseError):
            pass  # a running turn appended in between (or took the lease): read again and retry
        finally:
            if lease is not None:
                store.release_lease(lease)
    raise LeaseError(f"session {session} kept moving; dismiss the notice again in a moment")


def _int(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or int(raw) > _MAX_INT:
        raise ConfigError(f"{name} must be a non-negative whole number, not {raw!r}")
    return int(raw)


_MAX_INT = 2**63 - 1
"""The largest integer the databases take."""


def _page(request: Request) -> tuple[int, int]:
    return max(1, _int(request, "offset", 1)), _int(request, "limit", 200)


async def _threaded(fn: Callable[[], T]) -> T:
    import anyio.to_thread

    return await anyio.to_thread.run_sync(fn)


__all__ = ["create_app", "dismiss_notice"]
