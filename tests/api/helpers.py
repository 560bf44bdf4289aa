"""Helpers for the extension tests: scripted calls, a recording provider, what a log holds."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from bubu.events import FunctionResponse, Record, ToolRecovery, kind_of
from bubu.providers.base import DeltaSink, ModelRequest, ModelResponse, Provider


def call(name: str, **arguments: object) -> dict[str, object]:
    """One scripted tool call."""
    return {"name": name, "arguments": arguments}


@dataclass
class Recording:
    """A provider that keeps every request before passing it on."""

    inner: Provider
    requests: list[ModelRequest] = field(default_factory=list)

    @property
    def spec(self) -> str:
        """The wrapped provider's spec."""
        return self.inner.spec

    @property
    def context_window(self) -> int:
        """The wrapped provider's window."""
        return self.inner.context_window

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Record the request, then answer as the wrapped provider does."""
        self.requests.append(request)
        return self.inner.complete(request, on_delta)


def kinds(records: Iterable[Record]) -> list[str]:
    """The kind label of each record."""
    return [kind_of(r.event) for r in records]


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
