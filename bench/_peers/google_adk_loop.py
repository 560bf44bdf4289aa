"""Google ADK's own loop: a `Runner` over an `LlmAgent` whose model is an instant `BaseLlm` (one
function call per call until the last), a no-op function tool, and `DatabaseSessionService` on
SQLite for its persistence."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from bench._peers.common import (
    ARGS,
    CALL_NAME,
    RESULT,
    LoopClock,
    Measured,
    amedian_reload,
    final_bytes,
    journal_mode,
    logical_bytes,
    rss_mb,
)
from google.adk.agents import LlmAgent, RunConfig
from google.adk.models import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.genai import types

SYSTEM = "google-adk-loop"
APP, USER = "bench", "bench"


class InstantLlm(BaseLlm):
    """Answers at once: a function call per call, then a final text when the clock says so."""

    clock: Any = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """One function call, or the final answer."""
        clock: LoopClock = self.clock
        t0, step = clock.model_enter()
        if step is None:
            part = types.Part(text="done")
        else:
            call = types.FunctionCall(id=f"c{step}", name=CALL_NAME, args=dict(ARGS))
            part = types.Part(function_call=call)
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=1, candidates_token_count=1, total_token_count=2
        )
        content = types.Content(role="model", parts=[part])
        response = LlmResponse(content=content, usage_metadata=usage)
        clock.model_leave(t0)
        yield response


def _agent(clock: LoopClock) -> LlmAgent:
    def noop(path: str, note: str) -> dict[str, str]:
        """Does nothing and returns about 2 KB."""
        t0 = time.perf_counter()
        out = {"result": RESULT}
        clock.tool(time.perf_counter() - t0)
        return out

    noop.__name__ = CALL_NAME
    model = InstantLlm(model="instant", clock=clock)
    return LlmAgent(name="bench", instruction="bench", model=model, tools=[noop])


async def _run(steps: int, url: str, clock: LoopClock) -> tuple[str, str]:
    service = DatabaseSessionService(db_url=url)
    try:
        session = await service.create_session(app_name=APP, user_id=USER)
        runner = Runner(agent=_agent(clock), app_name=APP, session_service=service)
        final = ""
        async for event in runner.run_async(
            user_id=USER,
            session_id=session.id,
            new_message=types.Content(role="user", parts=[types.Part(text="bench")]),
            run_config=RunConfig(max_llm_calls=steps + 10),
        ):
            if event.content and event.content.parts and event.content.parts[0].text:
                final = event.content.parts[0].text
        await runner.close()
        return final, session.id
    finally:
        await service.close()


async def _load(url: str, session_id: str) -> int:
    service = DatabaseSessionService(db_url=url)
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
        if session is None:
            return 0
        parts = [
            p for e in session.events if e.content and e.content.parts for p in e.content.parts
        ]
        return sum(p.function_call is not None or p.function_response is not None for p in parts)
    finally:
        await service.close()


def run(steps: int, workdir: Path, bound_s: float) -> Measured:
    """Run one invocation of `steps` tool steps and reload the session with `get_session`."""
    path = workdir / "adk-loop.db"
    url = f"sqlite+aiosqlite:///{path}"
    clock = LoopClock(
        steps=steps, bound_s=bound_s, storage_of=lambda: logical_bytes(path) if path.exists() else 0
    )
    base = rss_mb()
    answer, session_id = asyncio.run(_run(steps, url, clock))
    if answer != "done":
        raise RuntimeError(f"{SYSTEM} ended with {answer!r}")
    reload = asyncio.run(amedian_reload(lambda: _load(url, session_id)))
    mode = journal_mode(path)
    return clock.measured(
        system=SYSTEM,
        final=final_bytes(path),
        reload=reload,
        base_mb=base,
        config=f"one `Runner.run_async` invocation (max_llm_calls raised to the steps), "
        f"DatabaseSessionService defaults on sqlite+aiosqlite: journal_mode={mode}, "
        "synchronous=FULL, an event per model response and per tool response",
    )
