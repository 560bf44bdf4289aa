"""LangGraph: a messages graph (agent node → tools node) checkpointed by `SqliteSaver`, invoked once
per step."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from bench._peers.common import (
    ARGS,
    CALL_NAME,
    RESULT,
    Measured,
    Tally,
    journal_mode,
    logical_bytes,
    median_reload,
    rss_mb,
)
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

THREAD: RunnableConfig = {"configurable": {"thread_id": "bench"}}
Graph = CompiledStateGraph[MessagesState, None, MessagesState, MessagesState]


def _agent(state: MessagesState) -> dict[str, list[AnyMessage]]:
    # The model's answer: one tool call; its id numbers the step.
    call_id = f"c{len(state['messages']) // 2}"
    call = {"id": call_id, "name": CALL_NAME, "args": dict(ARGS)}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


def _tools(state: MessagesState) -> dict[str, list[AnyMessage]]:
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    call_id = last.tool_calls[0]["id"] or ""
    return {"messages": [ToolMessage(content=RESULT, tool_call_id=call_id, name=CALL_NAME)]}


def _graph(saver: SqliteSaver) -> Graph:
    g = StateGraph(MessagesState)
    g.add_node("agent", _agent)
    g.add_node("tools", _tools)
    g.add_edge(START, "agent")
    g.add_edge("agent", "tools")
    g.add_edge("tools", END)
    return g.compile(checkpointer=saver)


def run(steps: int, workdir: Path, bound_s: float) -> Measured:
    """Invoke the graph once per step on one thread and reload the thread's state."""
    path = workdir / "langgraph.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    graph = _graph(SqliteSaver(conn))
    base = rss_mb()
    tally = Tally(steps=steps, bound_s=bound_s, storage_of=lambda: logical_bytes(path))
    try:
        for _ in range(steps):
            t0 = time.perf_counter()
            graph.invoke({"messages": []}, THREAD)
            if not tally.record(time.perf_counter() - t0):
                break
    finally:
        conn.close()

    def load() -> int:
        reader = sqlite3.connect(path, check_same_thread=False)
        try:
            state = _graph(SqliteSaver(reader)).get_state(THREAD)
            return len(state.values["messages"])
        finally:
            reader.close()

    reload = median_reload(load)
    mode = journal_mode(path)
    return tally.measured(
        system="langgraph",
        path=path,
        reload=reload,
        unit="messages",
        base_mb=base,
        config=f"SqliteSaver defaults: journal_mode={mode}, synchronous=FULL (sqlite3's default), "
        "MessagesState, one invoke (agent node, tools node) per step",
    )
