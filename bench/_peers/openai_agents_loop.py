"""OpenAI Agents SDK's own loop: `Runner.run` with a `SQLiteSession`, an instant `Model` that
answers each call with one function call (the next step) until the last, and a no-op function
tool."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    RunConfig,
    Runner,
    SQLiteSession,
    Tool,
    TResponseInputItem,
    Usage,
    function_tool,
)
from agents.items import TResponseStreamEvent
from bench._peers.common import (
    ARGS,
    CALL_NAME,
    RESULT,
    LoopClock,
    Measured,
    amedian_reload,
    final_bytes,
    logical_bytes,
    rss_mb,
)
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

SYSTEM = "openai-agents-loop"
CALL_KINDS = ("function_call", "function_call_output")


class InstantModel(Model):
    """Answers at once: a function call per call, then a final text when the clock says so."""

    def __init__(self, clock: LoopClock) -> None:
        self.clock = clock

    async def get_response(  # noqa: PLR0917  # the SDK's signature
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any | None,
    ) -> ModelResponse:
        """One function call, or the final answer."""
        t0, step = self.clock.model_enter()
        if step is None:
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            out: Any = ResponseOutputMessage(
                id="final", type="message", role="assistant", status="completed", content=[text]
            )
        else:
            out = ResponseFunctionToolCall(
                type="function_call",
                id=f"fc{step}",
                call_id=f"c{step}",
                name=CALL_NAME,
                arguments=json.dumps(ARGS),
                status="completed",
            )
        response = ModelResponse(output=[out], usage=Usage(requests=1), response_id=None)
        self.clock.model_leave(t0)
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        """Not used: the benchmark runs without streaming."""
        raise NotImplementedError


def _agent(clock: LoopClock) -> Agent[None]:
    @function_tool(name_override=CALL_NAME)
    def noop(path: str, note: str) -> str:
        """Does nothing and returns about 2 KB."""
        t0 = time.perf_counter()
        out = RESULT
        clock.tool(time.perf_counter() - t0)
        return out

    return Agent(name="bench", instructions="bench", model=InstantModel(clock), tools=[noop])


async def _run(steps: int, path: Path, clock: LoopClock) -> str:
    session = SQLiteSession("bench", path)
    try:
        result = await Runner.run(
            _agent(clock),
            "bench",
            session=session,
            max_turns=steps + 5,
            run_config=RunConfig(tracing_disabled=True),
        )
        return str(result.final_output)
    finally:
        session.close()


async def _load(path: Path) -> int:
    session = SQLiteSession("bench", path)
    try:
        items = await session.get_items()
        return sum(i.get("type") in CALL_KINDS for i in items)
    finally:
        session.close()


def run(steps: int, workdir: Path, bound_s: float) -> Measured:
    """Run one `Runner.run` of `steps` tool steps on a session and reload the session."""
    path = workdir / "agents-loop.db"
    clock = LoopClock(
        steps=steps, bound_s=bound_s, storage_of=lambda: logical_bytes(path) if path.exists() else 0
    )
    base = rss_mb()
    answer = asyncio.run(_run(steps, path, clock))
    if answer != "done":
        raise RuntimeError(f"{SYSTEM} ended with {answer!r}")
    reload = asyncio.run(amedian_reload(lambda: _load(path)))
    return clock.measured(
        system=SYSTEM,
        final=final_bytes(path),
        reload=reload,
        base_mb=base,
        config="one `Runner.run` (tracing off) with `SQLiteSession` defaults: WAL, "
        "synchronous=FULL (sqlite3's default), the run's items saved turn by turn",
    )
