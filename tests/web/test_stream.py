"""The SSE stream: committed records (from any writer), permission requests, the live state."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bubu.events import Actions, Info, PermissionRequest, SystemNote, make
from bubu.log.sqlite import SQLiteStore
from bubu.web import app as webapp
from bubu.web import create_app
from bubu.web.runs import RunManager
from bubu.web.stream import session_events

from .scenarios import TOKEN, Server, run_scripted


def parse(chunk: bytes) -> tuple[str | None, str | None, str]:
    """(event, id, data) of one SSE message."""
    event = ident = None
    data = ""
    for line in chunk.decode().splitlines():
        key, _, value = line.partition(": ")
        if key == "event":
            event = value
        elif key == "id":
            ident = value
        elif key == "data":
            data = value
    return event, ident, data


def test_the_stream_sends_new_records_permission_requests_and_live_state(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    store = sqlite_store
    sid = run_scripted(store, tmp_path, "ws", "Say hi", [{"text": "Hi."}])
    hw = store.head(sid).high_water
    closing = threading.Event()
    seen: list[tuple[str | None, str | None, str]] = []

    def append_later() -> None:
        info = make(
            session=sid,
            role="system",
            author="system",
            ts=1,
            content=SystemNote(note=Info(text="written by another writer")),
            visibility="hidden",
        )
        ask = make(
            session=sid,
            role="system",
            author="agent",
            ts=1,
            actions=Actions(
                permission_request=PermissionRequest(
                    request_id="perm_1",
                    call_id="call_9",
                    tool="run_command",
                    summary="run `make`",
                    reason="make",
                )
            ),
        )
        store.append(sid, [info], expect=hw)
        store.append(sid, [ask], expect=hw + 1)

    async def main() -> None:
        stream = session_events(store, RunManager(store), sid, hw - 2, closing.is_set)
        with anyio.fail_after(20):
            await collect(stream)

    async def collect(stream: AsyncGenerator[bytes, None]) -> None:
        try:
            async for chunk in stream:
                if chunk.startswith(b"retry:"):
                    continue
                seen.append(parse(chunk))
                if len(seen) == 3:
                    threading.Thread(target=append_later).start()
                if seen[-1][0] == "permission_request":
                    break
        finally:
            await stream.aclose()

    anyio.run(main)
    kinds = [e for e, _, _ in seen]
    assert kinds[:3] == ["records", "items", "live"]
    first = seen[0]
    assert first[1] == str(hw)
    assert f'"seq":{hw - 1}' in first[2]
    # The transcript items the records made come with them: the model's answer, as a delta.
    assert '"type":"message"' in seen[1][2]
    assert '"text":"Hi."' in seen[1][2]
    assert '"running_here":false' in seen[2][2]
    later = [s for s in seen[3:] if s[0] == "records"]
    assert later
    assert later[-1][1] == str(hw + 2)
    assert '"kind":"info"' in "".join(s[2] for s in later)
    assert kinds[-1] == "permission_request"
    assert '"request_id":"perm_1"' in seen[-1][2]
    assert '"summary":"run `make`"' in seen[-1][2]


@pytest.mark.heavy
def test_a_quiet_stream_is_kept_alive_and_ends_when_the_client_goes(
    sqlite_store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sqlite_store
    sid = run_scripted(store, tmp_path, "ws", "Say hi", [{"text": "Hi."}])
    hw = store.head(sid).high_water
    monkeypatch.setattr(webapp, "HEARTBEAT_S", 0.3)
    reads: list[int] = []
    read = store.read

    def counted(*a: Any, **k: Any) -> Any:
        reads.append(1)
        return read(*a, **k)

    monkeypatch.setattr(store, "read", counted)
    app = create_app(store, token=TOKEN, recover=False, workspace=str(tmp_path))
    with Server(app) as server:
        url = f"{server.base}/api/sessions/{sid}/stream?after={hw}"
        got = b""
        with httpx.stream(
            "GET", url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=10
        ) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            for chunk in r.iter_bytes():
                got += chunk
                if b": ping" in got:
                    break
        assert b"retry: 1000\n\n" in got
        assert b": ping" in got
        # The client is gone: the stream stops polling the store (it polls every 0.2 s).
        time.sleep(0.5)
        before = len(reads)
        time.sleep(1.0)
        assert len(reads) == before


@pytest.mark.heavy
@pytest.mark.postgres
def test_on_postgresql_the_stream_is_woken_by_the_append_not_a_poll(tmp_path: Path) -> None:
    from backends import open_backend
    from bubu.log.postgres._notify import FAILED

    store, dispose = open_backend("postgres", tmp_path)
    try:
        sid = run_scripted(store, tmp_path, "ws", "Say hi", [{"text": "Hi."}])
        hw = store.head(sid).high_water
        wait = store.wait_appended  # type: ignore[attr-defined]
        # Nothing appended: the wait times out with the count unchanged.
        seen = wait(sid, 0, 0.5)
        assert seen != FAILED
        assert wait(sid, seen, 0.3) == seen
        note = make(
            session=sid,
            role="system",
            author="system",
            ts=1,
            content=SystemNote(note=Info(text="announced")),
            visibility="hidden",
        )
        threading.Timer(0.2, lambda: store.append(sid, [note], expect=hw)).start()
        # Woken by the commit's notification, long before the timeout.
        assert wait(sid, seen, 30.0) == seen + 1
        # Another session's appends do not wake it.
        other = run_scripted(store, tmp_path, "ws2", "Say hi", [{"text": "Hi."}])
        assert other != sid
        assert wait(sid, seen + 1, 0.3) == seen + 1

        closing = threading.Event()
        seen_events: list[str] = []

        async def main() -> None:
            stream = session_events(store, RunManager(store), sid, hw, closing.is_set)
            with anyio.fail_after(20):
                try:
                    async for chunk in stream:
                        if chunk.startswith(b"event: records"):
                            seen_events.append(chunk.decode())
                            break
                finally:
                    await stream.aclose()

        anyio.run(main)
        assert f"id: {hw + 1}" in seen_events[0]
    finally:
        dispose()
