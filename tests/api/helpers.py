"""Helpers for the extension tests: scripted calls, a recording provider, what a log holds."""

from __future__ import annotations

from collections.abc import Iterable

from bubu.events import FunctionResponse, Record, ToolRecovery
from engine.helpers import Recording, call, kinds

__all__ = ["Recording", "call", "kinds", "outcomes", "recoveries"]


def outcomes(records: Iterable[Record]) -> dict[str, list[FunctionResponse]]:
    """Every tool outcome by call id."""
    out: dict[str, list[FunctionResponse]] = {}
    for r in records:
        if isinstance(c := r.event.content, FunctionResponse):
            out.setdefault(c.call_id, []).append(c)
    return out


def recoveries(records: Iterable[Record]) -> dict[str, ToolRecovery]:
    """Every recovery decision by call id."""
    return {
        a.tool_recovery.call_id: a.tool_recovery
        for r in records
        if (a := r.event.actions) is not None and a.tool_recovery is not None
    }
