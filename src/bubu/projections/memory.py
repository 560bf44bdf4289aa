"""Workspace memory and the session's plan, both projections of the log.

A **note** is written by a successful `remember{key, text}` outcome: the call's arguments, as the
store holds them (after any redaction on append), are the note. `bubu memory forget` appends a
hidden `memory_forgotten` note. The memory of a workspace is the fold, in time order, of those
facts over every session whose workspace is that directory: the newest write of a key wins, a
forget removes it. Nothing else is kept, so nothing is ever deleted in place.

For recovery a note is a "file" named ``memory:KEY`` whose content hash is the sha-256 of its
text (None when there is no note): a dangling `remember` is proven applied when the note already
has the intended text, and re-run when it still has the text it had at dispatch.

`bubu.engine.memory` reads a workspace's sessions from the store; this module is pure.

The **plan** of a session is the `items` of its newest successful `update_plan` call.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from bubu.events import FunctionCall, FunctionResponse, MemoryForgotten, Record, SystemNote

MEMORY_PREFIX = "memory:"
"""The dispatch `path` of a remember call: ``memory:KEY`` (never a file on disk)."""

MEMORY_KINDS = ("function_call", "function_response", "memory_forgotten")
"""The event kinds the memory and plan projections read."""

PlanStatus = Literal["pending", "in_progress", "completed"]
PLAN_STATUSES: tuple[PlanStatus, ...] = ("pending", "in_progress", "completed")

_TERM = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Note:
    """One remembered note: its key, text, when it was written and by which session."""

    key: str
    text: str
    ts: int
    session: str

    @property
    def sha256(self) -> str:
        """The note's content hash (what a remember dispatch records as before/after)."""
        return text_sha256(self.text)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanItem:
    """One step of the plan."""

    text: str
    status: PlanStatus


def text_sha256(text: str) -> str:
    """The sha-256 of a note's text (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def is_memory_path(path: str | None) -> bool:
    """Whether a dispatch path names a note rather than a file."""
    return bool(path) and str(path).startswith(MEMORY_PREFIX)


def fold_memory(streams: Iterable[tuple[str, Sequence[Record]]]) -> dict[str, Note]:
    """The live notes, by key, of the given (session, records) streams of one workspace; a note
    is credited to the session that wrote its text, not to one that remembered the same again."""
    facts: list[tuple[int, str, int, str, str | None]] = []  # ts, session, seq, key, text|None
    for session, records in streams:
        calls: dict[str, FunctionCall] = {}
        for r in records:
            c = r.event.content
            if isinstance(c, FunctionCall) and c.name == "remember":
                calls[c.call_id] = c
            elif isinstance(c, FunctionResponse) and c.name == "remember" and not c.is_error:
                call = calls.get(c.call_id)
                key, text = _note_args(call)
                if key is not None and text is not None:
                    facts.append((r.event.ts, session, r.seq, key, text))
            elif isinstance(c, SystemNote) and isinstance(c.note, MemoryForgotten):
                facts.append((r.event.ts, session, r.seq, c.note.key, None))
    notes: dict[str, Note] = {}
    for ts, session, _, key, text in sorted(facts, key=lambda f: (f[0], f[1], f[2])):
        if text is None:
            notes.pop(key, None)
        elif key not in notes or notes[key].text != text:
            # The same text remembered again changes nothing: the note stays the first writer's.
            notes[key] = Note(key=key, text=text, ts=ts, session=session)
    return notes


def _note_args(call: FunctionCall | None) -> tuple[str | None, str | None]:
    if call is None:
        return None, None
    key, text = call.arguments.get("key"), call.arguments.get("text")
    if not isinstance(key, str) or not isinstance(text, str):
        return None, None
    return clean_key(key), text


def clean_key(key: str) -> str:
    """A key as it is stored and compared: surrounding space removed."""
    return key.strip()


def note_hash(notes: dict[str, Note], key: str) -> str | None:
    """The content hash of a key's note now (None: no note)."""
    note = notes.get(clean_key(key))
    return None if note is None else note.sha256


def terms(text: str) -> list[str]:
    """The lower-cased word terms of a query or note."""
    return [t.lower() for t in _TERM.findall(text)]


def search(notes: dict[str, Note], query: str) -> list[Note]:
    """Notes matching a query by simple term matching: every note that contains at least one of
    the query's terms in its key or text (as a substring), best first — most terms matched, a
    key match counting double, then newest. An empty query lists every note, newest first."""
    wanted = list(dict.fromkeys(terms(query)))
    scored: list[tuple[int, int, Note]] = []
    for note in notes.values():
        key, text = note.key.lower(), note.text.lower()
        score = sum((2 if t in key else 0) + (1 if t in text else 0) for t in wanted)
        if score or not wanted:
            scored.append((score, note.ts, note))
    scored.sort(key=lambda s: (-s[0], -s[1], s[2].key))
    return [n for _, _, n in scored]


def fold_plan(records: Iterable[Record]) -> tuple[PlanItem, ...] | None:
    """The session's plan: the items of its newest successful update_plan (None: never set)."""
    calls: dict[str, FunctionCall] = {}
    plan: tuple[PlanItem, ...] | None = None
    for r in records:
        c = r.event.content
        if isinstance(c, FunctionCall) and c.name == "update_plan":
            calls[c.call_id] = c
        elif isinstance(c, FunctionResponse) and c.name == "update_plan" and not c.is_error:
            call = calls.get(c.call_id)
            if call is not None:
                items = plan_items(call.arguments.get("items"))
                if isinstance(items, tuple):
                    plan = items
    return plan


def plan_items(raw: object) -> tuple[PlanItem, ...] | str:
    """The checked items of an update_plan call, or a one-line reason they are not valid."""
    if not isinstance(raw, list):
        return "argument 'items' must be an array of {text, status} objects"
    items: list[PlanItem] = []
    for n, item in enumerate(raw, start=1):
        if not isinstance(item, dict):
            return f"item {n} must be an object with text and status"
        extra = sorted(set(item) - {"text", "status"})
        if extra:
            return f"item {n} has the unknown field {extra[0]!r}; an item has text and status"
        text, status = item.get("text"), item.get("status")
        if not isinstance(text, str) or not text.strip():
            return f"item {n} has an empty text; say what the step is"
        if status not in PLAN_STATUSES:
            return f"item {n} has the status {status!r}; it must be one of " + ", ".join(
                PLAN_STATUSES
            )
        items.append(PlanItem(text=" ".join(text.split()), status=status))
    return tuple(items)


def plan_counts(plan: Sequence[PlanItem]) -> str:
    """``2/5``: completed steps of all steps."""
    return f"{sum(1 for i in plan if i.status == 'completed')}/{len(plan)}"


def plan_lines(plan: Sequence[PlanItem]) -> list[str]:
    """The plan as checklist lines (``[x]`` completed, ``[>]`` in progress, ``[ ]`` pending)."""
    mark = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}
    return [f"{mark[i.status]} {i.text}" for i in plan]


def plan_json(plan: Sequence[PlanItem] | None) -> list[dict[str, str]] | None:
    """The plan as JSON (None when no plan was ever set)."""
    return None if plan is None else [{"text": i.text, "status": i.status} for i in plan]
