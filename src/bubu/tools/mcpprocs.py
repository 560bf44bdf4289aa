"""The stdio MCP servers this process started, so none outlives it: each runs in its own process
group (the SDK starts it in a new session), and whatever the SDK's shutdown left running —
a server that never answered `initialize`, one that ignores SIGTERM, the children it spawned —
is killed by group when its connection closes and when Bubu exits."""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import threading
import time
from typing import Any

_lock = threading.Lock()
_groups: dict[str, set[int]] = {}
"""Process-group ids of the live servers, by server name."""


def install() -> None:
    """Note the pid of every stdio server the SDK spawns (once per process)."""
    from mcp.client import stdio

    original = getattr(stdio, "_create_platform_compatible_process", None)
    if original is None or getattr(original, "_bubu_noted", False):
        return

    async def noted(*args: Any, **kwargs: Any) -> Any:
        process = await original(*args, **kwargs)
        pid = getattr(process, "pid", None)
        if isinstance(pid, int):
            with _lock:
                _groups.setdefault(_current.get(), set()).add(pid)
        return process

    noted._bubu_noted = True  # type: ignore[attr-defined]
    stdio._create_platform_compatible_process = noted


_current: contextvars.ContextVar[str] = contextvars.ContextVar("bubu_mcp_server", default="")


def naming(name: str) -> None:
    """Attribute the servers spawned next by this task to `name`."""
    _current.set(name)


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill(names: set[str] | None = None, grace_s: float = 1.0) -> None:
    """SIGTERM the process groups of the servers in `names` (all when None), then SIGKILL
    whatever is left after `grace_s`."""
    with _lock:
        chosen = [n for n in _groups if names is None or n in names]
        groups = {g for n in chosen for g in _groups.pop(n)}
    live = {g for g in groups if _alive(g)}
    for g in live:
        with contextlib.suppress(OSError):
            os.killpg(g, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = {g for g in live if _alive(g)}
    for g in live:
        with contextlib.suppress(OSError):
            os.killpg(g, signal.SIGKILL)
