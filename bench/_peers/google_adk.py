"""Google ADK: `DatabaseSessionService` on SQLite, a model event with the call and a tool event with
the response per step."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from bench._peers.common import (
    ARGS,
    CALL_NAME,
    RESULT,
    Measured,
    Tally,
    amedian_reload,
    journal_mode,
    logical_bytes,
    rss_mb,
)
from google.adk.events import Event
from google.adk.sessions import DatabaseSessionService, Session
from google.genai import types

APP, USER = "bench", "bench"


def _events(i: int) -> tuple[Event, Event]:
    call = types.FunctionCall(id=f"c{i}", name=CALL_NAME, args=dict(ARGS))
    response = types.FunctionResponse(id=f"c{i}", name=CALL_NAME, response={"result": RESULT})
    model = Event(
        invocation_id=f"inv{i}",
        author="agent",
        content=types.Content(role="model", parts=[types.Part(function_call=call)]),
    )
    tool = Event(
        invocation_id=f"inv{i}",
        author="agent",
        content=types.Content(role="user", parts=[types.Part(function_response=response)]),
    )
    return model, tool


async def _persist(steps: int, url: str, path: Path, bound_s: float) -> tuple[Tally, str]:
    service = DatabaseSessionService(db_url=url)
    try:
        session = await service.create_session(app_name=APP, user_id=USER)
        tally = Tally(steps=steps, bound_s=bound_s, storage_of=lambda: logical_bytes(path))
        for i in range(steps):
            t0 = time.perf_counter()
            model, tool = _events(i)
            await service.append_event(session, model)
            await service.append_event(session, tool)
            if not tally.record(time.perf_counter() - t0):
                break
    finally:
        await service.close()
    return tally, session.id


async def _load(url: str, session_id: str) -> int:
    service = DatabaseSessionService(db_url=url)
    try:
        session: Session | None = await service.get_session(
            app_name=APP, user_id=USER, session_id=session_id
        )
        return 0 if session is None else len(session.events)
    finally:
        await service.close()


def run(steps: int, workdir: Path, bound_s: float) -> Measured:
    """Persist `steps` steps as two events each and reload the session with `get_session`."""
    path = workdir / "adk.db"
    url = f"sqlite+aiosqlite:///{path}"
    base = rss_mb()
    tally, session_id = asyncio.run(_persist(steps, url, path, bound_s))
    reload = asyncio.run(amedian_reload(lambda: _load(url, session_id)))
    mode = journal_mode(path)
    return tally.measured(
        system="google-adk",
        path=path,
        reload=reload,
        unit="events",
        base_mb=base,
        config=f"DatabaseSessionService defaults on sqlite+aiosqlite: journal_mode={mode}, "
        "synchronous=FULL, two append_event calls per step",
    )
