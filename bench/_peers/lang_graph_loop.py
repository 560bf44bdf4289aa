"""LangGraph's own loop: the prebuilt ReAct agent (`langgraph.prebuilt.create_react_agent`) over an
instant chat model that answers each call with one tool call until the last, a no-op tool, and a
`SqliteSaver` checkpointer, invoked once for the whole task."""

from __future__ import annotations

import sqlite3
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._peers.common import (
    ARGS,
    CALL_NAME,
    RESULT,
    LoopClock,
    Measured,
    final_bytes,
    journal_mode,
    logical_bytes,
    median_reload,
    rss_mb,
)
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.prebuilt import create_react_agent

SYSTEM = "langgraph-loop"


class InstantChatModel(BaseChatModel):
    """Answers at once: a tool call per call, then a final text when the clock says so."""

    clock: Any = None

    @property
    def _llm_type(self) -> str:
        return "instant"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> InstantChatModel:
        """The tools change nothing: the answers are scripted."""
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        clock: LoopClock = self.clock
        t0, step = clock.model_enter()
        if step is None:
            message = AIMessage(content="done")
        else:
            call = {"id": f"c{step}", "name": CALL_NAME, "args": dict(ARGS), "type": "tool_call"}
            message = AIMessage(content="", tool_calls=[call])
        result = ChatResult(generations=[ChatGeneration(message=message)])
        clock.model_leave(t0)
        return result


def _graph(saver: SqliteSaver, clock: LoopClock) -> Any:
    def noop(path: str, note: str) -> str:
        """Does nothing and returns about 2 KB."""
        t0 = time.perf_counter()
        out = RESULT
        clock.tool(time.perf_counter() - t0)
        return out

    tool = StructuredTool.from_function(noop, name=CALL_NAME)
    with warnings.catch_warnings():  # moved to `langchain.agents`, still shipped by langgraph
        warnings.simplefilter("ignore")
        return create_react_agent(InstantChatModel(clock=clock), [tool], checkpointer=saver)


def _thread(steps: int) -> RunnableConfig:
    # Two supersteps (agent, tools) per step, then the final answer.
    return {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * steps + 10}


def run(steps: int, workdir: Path, bound_s: float) -> Measured:
    """Invoke the agent once for `steps` tool steps and reload the thread's state."""
    path = workdir / "langgraph-loop.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    clock = LoopClock(steps=steps, bound_s=bound_s, storage_of=lambda: logical_bytes(path))
    graph = _graph(SqliteSaver(conn), clock)
    base = rss_mb()
    try:
        state = graph.invoke({"messages": [("user", "bench")]}, _thread(steps), durability="sync")
    finally:
        conn.close()
    answer = state["messages"][-1].content
    if answer != "done":
        raise RuntimeError(f"{SYSTEM} ended with {answer!r}")

    def load() -> int:
        reader = sqlite3.connect(path, check_same_thread=False)
        try:
            values = _graph(SqliteSaver(reader), LoopClock(0, 0.0, None)).get_state(_thread(0))
            messages = values.values["messages"]
            calls = sum(len(m.tool_calls) for m in messages if isinstance(m, AIMessage))
            return calls + sum(isinstance(m, ToolMessage) for m in messages)
        finally:
            reader.close()

    reload = median_reload(load)
    mode = journal_mode(path)
    return clock.measured(
        system=SYSTEM,
        final=final_bytes(path),
        reload=reload,
        base_mb=base,
        config=f"one invoke of `create_react_agent` (recursion limit raised to the steps), "
        f"SqliteSaver defaults: journal_mode={mode}, synchronous=FULL (sqlite3's default), "
        "a checkpoint per superstep written before the next starts (durability='sync'; the default "
        "'async' writes behind the loop, so a crash can lose steps already acted on)",
    )
