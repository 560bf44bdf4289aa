"""OpenAI Agents SDK: `SQLiteSession.add_items` with a function_call and a function_call_output
item."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from agents import SQLiteSession, TResponseInputItem
from bench._peers.common import (
    ARGS_JSON,
    CALL_NAME,
    RESULT,
    Measured,
    Tally,
    amedian_reload,
    logical_bytes,
    rss_mb,
)

CONFIG = "SQLiteSession defaults: WAL, synchronous=FULL (sqlite3's default), one add_items per step"


def _items(i: int) -> list[TResponseInputItem]:
    return [
        {
            "type": "function_call",
            "id": f"fc{i}",
            "call_id": f"c{i}",
            "name": CALL_NAME,
            "arguments": ARGS_JSON,
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": f"c{i}", "output": RESULT},
    ]


async def _persist(steps: int, path: Path, bound_s: float) -> Tally:
    session = SQLiteSession("bench", path)
    tally = Tally(steps=steps, bound_s=bound_s, storage_of=lambda: logical_bytes(path))
    try:
        for i in range(steps):
            t0 = time.perf_counter()
            await session.add_items(_items(i))
            if not tally.record(time.perf_counter() - t0):
                break
    finally:
        session.close()
    return tally


async def _load(path: Path) -> int:
    session = SQLiteSession("bench", path)
    try:
        return len(await session.get_items())
    finally:
        session.close()


def run(steps: int, workdir: Path, bound_s: float) -> Measured:
    """Persist `steps` steps through one session and reload it with `get_items`."""
    path = workdir / "agents.db"
    base = rss_mb()
    tally = asyncio.run(_persist(steps, path, bound_s))
    reload = asyncio.run(amedian_reload(lambda: _load(path)))
    return tally.measured(
        system="openai-agents",
        path=path,
        reload=reload,
        unit="items",
        base_mb=base,
        config=CONFIG,
    )
