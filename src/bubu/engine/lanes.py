"""Calls of one model response that touch the same file run one after the other, in the model's
order (DESIGN §4); calls on other paths, and reads of files nobody writes, still run together.

A call's path comes from its tool's ``touches`` (the built-in file tools and ``@tool`` writes say
it, resolved beneath the workspace); a tool that does not say touches no path known here. Only
paths that some provable write of the response touches get a lane: there, the first call runs
with the others, and each later one is prepared and dispatched only when the one before it has
its outcome, so the hashes its dispatch records are those of the file it will really change.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from bubu.projections.turn import CallState
from bubu.tools.base import Tool, ToolContext

Admitted: TypeAlias = tuple[CallState, Tool, ToolContext]
"""A call whose tool is known and whose permission is settled, not yet prepared."""


def touched_path(tool: Tool, args: dict[str, object], ctx: ToolContext) -> str | None:
    """The resolved path a call reads or writes, when its tool says (``touches``); else None."""
    touches = getattr(tool, "touches", None)
    if touches is None:
        return None
    try:
        path = touches(args, ctx)
    except Exception:  # a third-party tool's own failure: order it like a call on no path
        return None
    return path if isinstance(path, str) else None


@dataclass(slots=True)
class Lanes:
    """Which calls of a response wait for an earlier call on the same file."""

    key_of: Mapping[str, str]
    """The file of each call that shares it with a provable write of the response, by call id."""
    waiting: dict[str, deque[Admitted]] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        calls: Sequence[CallState],
        tools: Mapping[str, Tool],
        context: Callable[[CallState], ToolContext],
    ) -> Lanes:
        """The lanes of one response's calls."""
        keys: dict[str, str] = {}
        written: set[str] = set()
        for c in calls:
            tool = tools.get(c.name)
            if tool is None or c.raw_arguments is not None:
                continue
            key = touched_path(tool, c.arguments, context(c))
            if key is None:
                continue
            keys[c.call_id] = key
            if tool.effect == "provable_write":
                written.add(key)
        return cls(key_of={cid: k for cid, k in keys.items() if k in written})

    def must_wait(self, call: CallState) -> bool:
        """Whether an earlier call on the same file is already on its way."""
        key = self.key_of.get(call.call_id)
        return key is not None and key in self.waiting

    def started(self, call: CallState) -> None:
        """`call` is the first of its file to be dispatched; later ones queue behind it."""
        key = self.key_of.get(call.call_id)
        if key is not None:
            self.waiting.setdefault(key, deque())

    def queue(self, admitted: Admitted) -> None:
        """Put a call behind the earlier ones on its file."""
        self.waiting[self.key_of[admitted[0].call_id]].append(admitted)

    def after(self, call: CallState) -> deque[Admitted]:
        """The calls waiting for `call` (empty when none)."""
        key = self.key_of.get(call.call_id)
        return self.waiting.get(key, deque()) if key is not None else deque()
