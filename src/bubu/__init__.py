"""Bubu: a coding agent for long tasks whose runtime is an append-only log.

The Python API (`bubu.api`) is re-exported here: ``from bubu import Agent, tool``. The names load
on first use, so importing a submodule (a pure projection, the codec) never pulls in the engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from bubu.api import Agent, Run, RunResult, SessionView, Totals
    from bubu.engine.permissions import Policy
    from bubu.tools.base import ToolContext, ToolResult
    from bubu.tools.decorator import tool

_EXPORTS = {
    "Agent": "bubu.api",
    "Run": "bubu.api",
    "RunResult": "bubu.api",
    "SessionView": "bubu.api",
    "Totals": "bubu.api",
    "Policy": "bubu.engine.permissions",
    "ToolContext": "bubu.tools.base",
    "ToolResult": "bubu.tools.base",
    "tool": "bubu.tools.decorator",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bubu' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "Agent",
    "Policy",
    "Run",
    "RunResult",
    "SessionView",
    "ToolContext",
    "ToolResult",
    "Totals",
    "__version__",
    "tool",
]
