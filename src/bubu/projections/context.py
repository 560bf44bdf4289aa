"""The next model request, projected from the log.

`ContextFold` is fed records in seq order and keeps, per model step, the assistant parts and the
results paired to its calls. The request pairs every call with exactly one result: a call whose
outcome is not committed is left out (recovery commits one), so a provider never sees a dangling
tool call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from bubu.events import FunctionCall, FunctionResponse, Record, Text, Thinking
from bubu.providers.base import (
    AssistantMessage,
    AssistantPart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolResultsMessage,
    UserMessage,
)


@dataclass(slots=True)
class _Step:
    parts: list[AssistantPart] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    results: dict[str, ToolResultPart] = field(default_factory=dict)


@dataclass(slots=True)
class ContextFold:
    """The conversation as the model sees it, folded incrementally."""

    entries: list[UserMessage | _Step] = field(default_factory=list)
    by_invocation: dict[str, _Step] = field(default_factory=dict)
    by_call: dict[str, _Step] = field(default_factory=dict)
    high_water: int = 0
    # The messages each entry renders to, kept until the entry changes: building the next
    # request costs what is new, not the length of the log.
    _rendered: list[_Rendered | None] = field(default_factory=list)
    _index: dict[int, int] = field(default_factory=dict)

    def apply(self, r: Record) -> None:
        """Fold one record in."""
        self.high_water = r.seq
        ev = r.event
        if ev.visibility == "hidden":
            return
        c = ev.content
        if ev.role == "user" and isinstance(c, Text):
            self._add(UserMessage(text=c.text))
        elif ev.role == "model" and isinstance(c, Text | Thinking | FunctionCall):
            key = ev.invocation or f"seq{r.seq}"
            step = self.by_invocation.get(key)
            if step is None:
                step = self.by_invocation[key] = _Step()
                self._add(step)
            self._touch(step)
            if isinstance(c, Text):
                if c.text:
                    step.parts.append(TextPart(text=c.text))
            elif isinstance(c, Thinking):
                step.parts.append(
                    ThinkingPart(text=c.text, signature=c.signature, redacted=c.redacted)
                )
            else:
                step.parts.append(
                    ToolCallPart(
                        call_id=c.call_id,
                        name=c.name,
                        arguments=c.arguments,
                        raw_arguments=c.raw_arguments,
                    )
                )
                step.calls.append(c.call_id)
                self.by_call[c.call_id] = step
        elif isinstance(c, FunctionResponse):
            owner = self.by_call.get(c.call_id)
            if owner is not None and c.call_id not in owner.results:
                owner.results[c.call_id] = ToolResultPart(
                    call_id=c.call_id, name=c.name, content=c.result, is_error=c.is_error
                )
                self._touch(owner)

    def _add(self, entry: UserMessage | _Step) -> None:
        self._index[id(entry)] = len(self.entries)
        self.entries.append(entry)
        self._rendered.append(None)

    def _touch(self, entry: _Step) -> None:
        self._rendered[self._index[id(entry)]] = None

    def messages(self) -> tuple[Message, ...]:
        """The messages of the next request, every call paired with its result."""
        return tuple(m for r in self._all() for m in r.messages)

    def fingerprint(self) -> tuple[str, int]:
        """A digest naming the exact messages (sha-256 over each message's canonical digest, in
        order) and their canonical size in bytes; both cost only what changed since last time."""
        h = hashlib.sha256()
        size = 0
        for r in self._all():
            h.update(r.digests)
            size += r.size
        return h.hexdigest(), size

    def _all(self) -> list[_Rendered]:
        out: list[_Rendered] = []
        for i, e in enumerate(self.entries):
            rendered = self._rendered[i]
            if rendered is None:
                msgs = _render(e)
                blobs = [_encoder.encode(m) for m in msgs]
                rendered = self._rendered[i] = _Rendered(
                    messages=msgs,
                    digests=b"".join(hashlib.sha256(b).digest() for b in blobs),
                    size=sum(len(b) for b in blobs),
                )
            out.append(rendered)
        return out


@dataclass(frozen=True, slots=True)
class _Rendered:
    messages: tuple[Message, ...]
    digests: bytes
    size: int


_encoder = msgspec.json.Encoder(order="sorted")


def _render(e: UserMessage | _Step) -> tuple[Message, ...]:
    if isinstance(e, UserMessage):
        return (e,)
    parts = tuple(p for p in e.parts if not isinstance(p, ToolCallPart) or p.call_id in e.results)
    if not parts:
        return ()
    results = tuple(e.results[c] for c in e.calls if c in e.results)
    if results:
        return (AssistantMessage(parts=parts), ToolResultsMessage(results=results))
    return (AssistantMessage(parts=parts),)


def fold_context(records: Iterable[Record], start: ContextFold | None = None) -> ContextFold:
    """Fold records into `start` (mutated) or a fresh fold."""
    f = start if start is not None else ContextFold()
    for r in records:
        f.apply(r)
    return f
