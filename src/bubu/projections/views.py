"""What the reading commands show of a whole session, as one fold that can be snapshotted.

    state(n) = apply(snapshot(k), log[k+1…n])

`SessionView` folds the session's status, its usage and cost totals, its long-run budget, its
plan and the transcript index (the seq each transcript item starts at), incrementally. Its
encoding (`encode`, `decode`) is what a store keeps as a derived view, named by the seq it covers
and the chain digest of that prefix; a reader that finds a valid one applies only the records
after it, and one that does not match the log is ignored (the log wins). A fold continued from a
decoded snapshot equals the fold of the whole log:
`fold(a + b) == fold(b, decode(encode(fold(a))))`.

"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from bubu.events import FunctionCall, FunctionResponse, Record, TokenUsage
from bubu.pricing import CostTally
from bubu.projections.longrun import LongRunFold
from bubu.projections.memory import PlanItem, plan_items
from bubu.projections.status import Status, step
from bubu.projections.transcript import Transcript

VERSION = 1
"""Bumped whenever the fold's shape or meaning changes: a snapshot of another version is rebuilt."""


class UsageTotals(msgspec.Struct, kw_only=True):
    """The token and cost totals of a session's model calls (`Transcript`'s, without items)."""

    model_calls: int = 0
    usage_unknown_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost: CostTally = msgspec.field(default_factory=CostTally)

    def add(self, u: TokenUsage) -> None:
        """Count one call's usage."""
        self.model_calls += 1
        self.usage_unknown_calls += u.usage_unknown
        self.input_tokens += u.input_tokens
        self.output_tokens += u.output_tokens
        self.cache_read_tokens += u.cache_read_tokens
        self.cache_write_tokens += u.cache_write_tokens
        self.reasoning_tokens += u.reasoning_tokens
        self.cost.add(u.model, u.cost_usd, u.input_tokens, u.output_tokens)


class SessionView(msgspec.Struct, kw_only=True):
    """Status, usage, long-run budget, plan and transcript index of the records folded so far."""

    version: int = VERSION
    high_water: int = 0
    status: Status = msgspec.field(default_factory=Status)
    usage: UsageTotals = msgspec.field(default_factory=UsageTotals)
    longrun: LongRunFold = msgspec.field(default_factory=LongRunFold)
    plan: tuple[PlanItem, ...] | None = None
    plan_calls: dict[str, FunctionCall] = msgspec.field(default_factory=dict)
    """update_plan calls waiting for their outcome."""
    items: list[int] = msgspec.field(default_factory=list)
    """The seq of each transcript item (what `bubu show --tail N` starts its reading at)."""

    def apply(self, r: Record) -> None:
        """Fold one record in (in seq order, right after the high water)."""
        self.high_water = r.seq
        ev, c, a = r.event, r.event.content, r.event.actions
        self.status = step(self.status, r.seq, ev)
        self.longrun.apply(r)
        if a is not None and a.token_usage is not None:
            self.usage.add(a.token_usage)
        if isinstance(c, FunctionCall) and c.name == "update_plan":
            self.plan_calls[c.call_id] = c
        elif isinstance(c, FunctionResponse) and c.name == "update_plan":
            call = self.plan_calls.pop(c.call_id, None)
            if call is not None and not c.is_error:
                items = plan_items(call.arguments.get("items"))
                if isinstance(items, tuple):
                    self.plan = items
        if _starts_item(r):
            self.items.append(r.seq)


def _starts_item(r: Record) -> bool:
    """Whether the transcript shows an item for this record (a cheap probe of `Transcript`)."""
    probe = Transcript()
    probe.apply(r)
    return bool(probe.items)


def fold_view(records: Iterable[Record], start: SessionView | None = None) -> SessionView:
    """Fold `records` into `start` (changed) or a fresh view."""
    v = start if start is not None else SessionView()
    for r in records:
        v.apply(r)
    return v


_encoder = msgspec.json.Encoder(order="sorted")
_decoder = msgspec.json.Decoder(SessionView)


def encode(view: SessionView) -> bytes:
    """The view's bytes as a store keeps them."""
    return _encoder.encode(view)


def decode(data: bytes) -> SessionView | None:
    """A stored view, or None when it cannot be read or is of another version (rebuild it)."""
    try:
        view = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError):
        return None
    return view if view.version == VERSION else None


def tail_start(view: SessionView, n: int) -> int:
    """The seq after which the last `n` transcript items begin (0: from the start)."""
    if n <= 0 or len(view.items) <= n:
        return 0
    return view.items[-n] - 1


__all__ = ["VERSION", "SessionView", "UsageTotals", "decode", "encode", "fold_view", "tail_start"]
