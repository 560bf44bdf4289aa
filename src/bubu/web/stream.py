"""Server-sent events: a session's newly committed records, pending permission requests, and the
live state of a turn this UI runs.

The store is polled from a worker thread every `POLL_S` (`read(after=last_seq)`), so records
committed by any process — this UI's runs, a `bubu run` in a terminal, a worker — show up. Each
`records` event carries the last seq as its SSE id, so a reconnecting browser resumes after it,
and is followed by an `items` event: the transcript items the records made or changed. The
response (sse-starlette) sends the keep-alive comments and ends the stream when the client goes.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable

import anyio
import anyio.to_thread
import msgspec

from bubu.events import Record
from bubu.log.store import Store
from bubu.projections.transcript import Transcript
from bubu.web.runs import RunManager
from bubu.web.views import (
    LiveView,
    LogRow,
    MessageItem,
    ToolItem,
    UsageRow,
    card_item,
    encode,
    log_row,
    page_items,
)

POLL_S = 0.2
FALLBACK_S = 5.0
"""With LISTEN/NOTIFY, the longest a stream goes without reading the store (a lost notice)."""
HEARTBEAT_S = 10.0
"""Seconds between keep-alive comments on a quiet stream (sent by the response)."""
BATCH = 500
"""The most records one poll reads, so a long log streams in bounded pieces."""


class RecordsEvent(msgspec.Struct, kw_only=True):
    """New rows of the log."""

    rows: list[LogRow]
    high_water: int


class PermissionEvent(msgspec.Struct, kw_only=True):
    """A permission request was committed."""

    seq: int
    request_id: str
    call_id: str
    tool: str
    summary: str
    reason: str


class ItemsEvent(msgspec.Struct, kw_only=True):
    """The transcript items new records made or changed (a tool card's outcome), and their usage
    rows: the page applies them as they come, without reading the session again."""

    items: list[MessageItem | ToolItem]
    usage: list[UsageRow]
    high_water: int


SEED = 256
"""Events before the stream's start folded to know the tool cards still waiting for an outcome."""


class Deltas:
    """What each batch of new records changes in the transcript: new items, and tool cards whose
    status or outcome moved. Holds only the cards not finished yet, so it stays small."""

    def __init__(self, seed: list[Record]) -> None:
        self.t = Transcript()
        for r in seed:
            self.t.apply(r)
        self._trim()

    def _trim(self) -> None:
        self.t.items = []
        self.t.cards = {k: c for k, c in self.t.cards.items() if c.result is None}

    def apply(self, records: list[Record]) -> ItemsEvent:
        """Fold `records` in and say what they changed."""
        before = dict(self.t.cards)
        for r in records:
            self.t.apply(r)
        fresh, usage = page_items(records, all_usage=True)
        seen = {i.seq for i in fresh}
        moved = [c for k, c in before.items() if c.seq not in seen and _touched(k, records)]
        items = [*(card_item(c) for c in moved), *fresh]
        self._trim()
        return ItemsEvent(items=items, usage=usage, high_water=records[-1].seq if records else 0)


def _touched(call_id: str, records: list[Record]) -> bool:
    for r in records:
        c, a = r.event.content, r.event.actions
        if getattr(c, "call_id", None) == call_id:
            return True
        if a is not None and any(
            x is not None and x.call_id == call_id for x in (a.tool_dispatch, a.tool_recovery)
        ):
            return True
    return False


def _seed(store: Store, session: str, after: int) -> list[Record]:
    return store.read(session, after=max(0, after - SEED), upto=after)


def _read(store: Store, session: str, after: int) -> list[Record]:
    return store.read(session, after=after, upto=after + BATCH)


def sse(event: str, data: object, *, id: int | None = None) -> bytes:
    """One SSE message."""
    head = f"event: {event}\n" + (f"id: {id}\n" if id is not None else "")
    return head.encode() + b"data: " + encode(data) + b"\n\n"


async def session_events(
    store: Store,
    manager: RunManager,
    session: str,
    after: int,
    closing: Callable[[], bool],
) -> AsyncGenerator[bytes, None]:
    """Stream the session from seq `after` on until the client goes away or the UI closes."""
    last = after
    last_live: LiveView | None = None
    yield b"retry: 1000\n\n"
    deltas = Deltas(await anyio.to_thread.run_sync(_seed, store, session, after))
    # A store that announces its appends (PostgreSQL's LISTEN/NOTIFY) is read when it says so
    # (and every FALLBACK_S in case); any other is polled every POLL_S.
    wait = getattr(store, "wait_appended", None)
    seen, due, idle = 0, True, 0.0
    while not closing():
        if wait is not None and not due and idle < FALLBACK_S:
            records: list[Record] = []
        else:
            records = await anyio.to_thread.run_sync(_read, store, session, last)
            idle, due = 0.0, False
        if records:
            last = records[-1].seq
            yield sse(
                "records",
                RecordsEvent(rows=[log_row(r) for r in records], high_water=last),
                id=last,
            )
            yield sse("items", deltas.apply(records))
            for r in records:
                a = r.event.actions
                if a is not None and (p := a.permission_request) is not None:
                    yield sse(
                        "permission_request",
                        PermissionEvent(
                            seq=r.seq,
                            request_id=p.request_id,
                            call_id=p.call_id,
                            tool=p.tool,
                            summary=p.summary,
                            reason=p.reason,
                        ),
                    )
            if len(records) >= BATCH:
                due = True  # more to read at once
                continue
        live = manager.live(session)
        view = LiveView(
            running_here=manager.running_here(session),
            activity=live.activity,
            draft=live.draft,
            thinking=live.thinking,
        )
        if view != last_live:
            last_live = view
            yield sse("live", view)
        if wait is None:
            await anyio.sleep(POLL_S)
            continue
        now = await anyio.to_thread.run_sync(wait, session, seen, POLL_S)
        due, seen = due or now != seen or now < 0, now
        idle += POLL_S


__all__ = ["Deltas", "ItemsEvent", "PermissionEvent", "RecordsEvent", "session_events", "sse"]
