"""The web UI's view of what a turn changed in the workspace, from the snapshots.

``GET /api/sessions/{sid}/diff?at=SEQ`` returns the changes of the turn that the request at SEQ
opened (each path with its kind and line counts) and their unified diff, cut at `DIFF_CHARS`
(`bubu diff` prints it whole). A session without snapshots for that turn gets an empty list and
a reason.
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bubu.errors import ConfigError, CorruptLog
from bubu.log.store import Store
from bubu.snapshot import diff, refs, tree

DIFF_CHARS = 200_000
"""The most of a turn's diff one response carries."""


def turn_diff(store: Store, sid: str, at: int) -> dict[str, object]:
    """The changes and diff of the turn whose span holds seq `at`."""
    records = store.read(store.session(sid).id)
    span = next(((a, b) for a, b in refs.turn_spans(records) if a <= at <= b), None)
    if span is None:
        raise ConfigError(f"seq {at} is in no turn of session {sid}")
    old, new = refs.span(records, *span)
    out: dict[str, object] = {
        "from": span[0],
        "to": span[1],
        "changes": [],
        "diff": "",
        "cut": False,
        "reason": None,
    }
    if old is None or new is None:
        out["reason"] = "no workspace snapshot covers this turn"
        return out
    try:
        changes = tree.changes(store.get_object, old, new)
        changed = diff.summarize(store.get_object, changes)
        text = diff.unified(store.get_object, changes)
    except CorruptLog as e:
        out["reason"] = str(e)
        return out
    out["changes"] = [{"path": c.path, "kind": c.kind, "line": c.line()} for c in changed]
    out["diff"], out["cut"] = text[:DIFF_CHARS], len(text) > DIFF_CHARS
    return out


def diff_routes(store: Store, prefix: str) -> list[Route]:
    """The diff route below `prefix` (a session's API path)."""
    import anyio.to_thread

    async def show(request: Request) -> Response:
        sid = request.path_params["sid"]
        raw = request.query_params.get("at", "")
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
            raise ConfigError(f"at must be the seq of a request (a whole number), not {raw!r}")
        got = await anyio.to_thread.run_sync(lambda: turn_diff(store, sid, int(raw)))
        return Response(msgspec.json.encode(got), media_type="application/json")

    return [Route(prefix + "/diff", show)]


__all__ = ["diff_routes", "turn_diff"]
