"""Pydantic AI's own loop: an `Agent` over a `FunctionModel` that answers each call with one tool
call until the last, and a no-op tool. Pydantic AI persists nothing itself: the message history
stays in memory, so its storage is that history as `ModelMessagesTypeAdapter` JSON (what a user
would have to write somewhere) and its reload is parsing that JSON back."""

from __future__ import annotations

import time
from pathlib import Path

from bench._peers.common import ARGS, CALL_NAME, RESULT, LoopClock, Measured, median_reload, rss_mb
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

SYSTEM = "pydantic-ai-loop"


def _agent(clock: LoopClock, history: list[list[ModelMessage]]) -> Agent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        history[0] = messages  # a reference only: serialized when storage is sampled
        t0, step = clock.model_enter()
        if step is None:
            out = ModelResponse(parts=[TextPart(content="done")])
        else:
            out = ModelResponse(
                parts=[ToolCallPart(CALL_NAME, dict(ARGS), tool_call_id=f"c{step}")]
            )
        clock.model_leave(t0)
        return out

    agent: Agent[None, str] = Agent(FunctionModel(model), instructions="bench")

    @agent.tool_plain(name=CALL_NAME)
    def noop(path: str, note: str) -> str:
        """Does nothing and returns about 2 KB."""
        t0 = time.perf_counter()
        out = RESULT
        clock.tool(time.perf_counter() - t0)
        return out

    return agent


def _count(messages: list[ModelMessage]) -> int:
    parts = [p for m in messages for p in m.parts]
    calls = sum(isinstance(p, ToolCallPart) for p in parts)
    results = sum(isinstance(p, ToolReturnPart) for p in parts)
    requests = sum(isinstance(m, ModelRequest) for m in messages)
    assert requests >= 1
    return calls + results


def run(steps: int, workdir: Path, bound_s: float) -> Measured:
    """Run the agent once for `steps` tool steps; dump the history to JSON and parse it back."""
    history: list[list[ModelMessage]] = [[]]
    clock = LoopClock(
        steps=steps,
        bound_s=bound_s,
        storage_of=lambda: len(ModelMessagesTypeAdapter.dump_json(history[0])),
    )
    agent = _agent(clock, history)
    base = rss_mb()
    result = agent.run_sync("bench", usage_limits=UsageLimits(request_limit=None))
    if result.output != "done":
        raise RuntimeError(f"{SYSTEM} ended with {result.output!r}")
    data = ModelMessagesTypeAdapter.dump_json(result.all_messages())
    reload = median_reload(lambda: _count(ModelMessagesTypeAdapter.validate_json(data)))
    return clock.measured(
        system=SYSTEM,
        final=len(data),
        reload=reload,
        base_mb=base,
        config="one `Agent.run_sync` (request limit lifted) on a `FunctionModel`; nothing "
        "durable: the history stays in memory, storage is its JSON and reload parses it back",
    )
