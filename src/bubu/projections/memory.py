"""Workspace memory and the session's plan, both projections of the log.

A **note** is written by a successful `remember{key, text}` outcome: the call's arguments, as the
store holds them (after any redaction on append), are the note. `bubu memory forget` appends a
hidden `memory_forgotten` note. The memory of a workspace is the fold, in time order, of those
facts over every session whose workspace is that directory: the newest write of a key wins, a
forget removes it. Nothing else is kept, so nothing is ever deleted in place.

**Imported notes are not memory.** A session imported from an export (or forked from one) carries
the other machine's facts before its `session_started` note of origin; a `remember` there is
listed as *imported* and never recalled until the user accepts it here (`bubu memory accept`,
a `memory_accepted` note naming the note's text hash, so a different text is not accepted with
it). Facts before a fork's origin note are copies of its source's, which count in the source
session itself; an acceptance inside an imported prefix counts for nothing.

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
from typing import Literal

import msgspec

from bubu.events import (
    FunctionCall,
    FunctionResponse,
    MemoryAccepted,
    MemoryForgotten,
    Record,
    SessionStarted,
    SystemNote,
)

MEMORY_PREFIX = "memory:"
"""The dispatch `path` of a remember call: ``memory:KEY`` (never a file on disk)."""

MEMORY_KINDS = (
    "function_call",
    "function_response",
    "memory_forgotten",
    "memory_accepted",
    "session_started",
)
"""The event kinds the memory and plan projections read."""

PlanStatus = Literal["pending", "in_progress", "completed"]
PLAN_STATUSES: tuple[PlanStatus, ...] = ("pending", "in_progress", "completed")

_TERM = re.compile(r"\w+", re.UNICODE)


class Note(msgspec.Struct, frozen=True, kw_only=True):
    """One remembered note: its key, text, when it was written and by which session."""

    key: str
    text: str
    ts: int
    session: str
    accepted: bool = False
    """An imported note the user accepted (`session` is where it was written, elsewhere)."""

    @property
    def sha256(self) -> str:
        """The note's content hash (what a remember dispatch records as before/after)."""
        return text_sha256(self.text)


class PlanItem(msgspec.Struct, frozen=True, kw_only=True):
    """One step of the plan."""

    text: str
    status: PlanStatus


def text_sha256(text: str) -> str:
    """The sha-256 of a note's text (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def is_memory_path(path: str | None) -> bool:
    """Whether a dispatch path names a note rather than a file."""
    return bool(path) and str(path).startswith(MEMORY_PREFIX)


class Memory(msgspec.Struct, frozen=True, kw_only=True):
    """A workspace's notes: the live ones (recalled) and the imported ones awaiting acceptance."""

    live: dict[str, Note]
    imported: dict[str, Note]


_Fact = tuple[int, str, int, str, str | None, str | None]
"""ts, session, seq, key, text (None: a forget), accepted hash (an acceptance)."""


def _own_and_imported(records: Sequence[Record]) -> tuple[Sequence[Record], Sequence[Record]]:
    """The records written in this session itself, and those an import brought (before its
    origin note); a fork's copied records are neither (they count in its source)."""
    for i in range(len(records) - 1, -1, -1):
        c = records[i].event.content
        note = c.note if isinstance(c, SystemNote) else None
        if isinstance(note, SessionStarted) and note.origin != "new":
            return records[i + 1 :], records[:i] if note.origin == "import" else ()
    return records, ()


def _facts(session: str, records: Sequence[Record], *, own: bool) -> list[_Fact]:
    facts: list[_Fact] = []
    calls: dict[str, FunctionCall] = {}
    for r in records:
        c = r.event.content
        if isinstance(c, FunctionCall) and c.name == "remember":
            calls[c.call_id] = c
        elif isinstance(c, FunctionResponse) and c.name == "remember" and not c.is_error:
            key, text = _note_args(calls.get(c.call_id))
            if key is not None and text is not None:
                facts.append((r.event.ts, session, r.seq, key, text, None))
        elif isinstance(c, SystemNote) and isinstance(c.note, MemoryForgotten):
            facts.append((r.event.ts, session, r.seq, c.note.key, None, None))
        elif own and isinstance(c, SystemNote) and isinstance(c.note, MemoryAccepted):
            facts.append((r.event.ts, session, r.seq, c.note.key, None, c.note.sha256))
    return facts


def _fold(facts: list[_Fact], imported: dict[str, Note]) -> tuple[dict[str, Note], set[str]]:
    """The notes after `facts` in time order, and the hashes accepted on the way."""
    notes: dict[str, Note] = {}
    accepted: set[str] = set()
    for ts, session, _, key, text, sha in sorted(facts, key=lambda f: (f[0], f[1], f[2])):
        if sha is not None:
            found = imported.get(key)
            if found is not None and found.sha256 == sha:
                notes[key] = Note(
                    key=key, text=found.text, ts=ts, session=found.session, accepted=True
                )
                accepted.add(f"{key}\0{sha}")
        elif text is None:
            notes.pop(key, None)
        elif key not in notes or notes[key].text != text:
            # The same text remembered again changes nothing: the note stays the first writer's.
            notes[key] = Note(key=key, text=text, ts=ts, session=session)
    return notes, accepted


def fold_workspace(streams: Iterable[tuple[str, Sequence[Record]]]) -> Memory:
    """The live and the imported notes of the given (session, records) streams of a workspace."""
    own: list[_Fact] = []
    brought: list[_Fact] = []
    for session, records in streams:
        mine, theirs = _own_and_imported(records)
        own += _facts(session, mine, own=True)
        brought += _facts(session, theirs, own=False)
    imported, _ = _fold(brought, {})
    live, accepted = _fold(own, imported)
    waiting = {k: n for k, n in imported.items() if f"{k}\0{n.sha256}" not in accepted}
    return Memory(live=live, imported=waiting)


def fold_memory(streams: Iterable[tuple[str, Sequence[Record]]]) -> dict[str, Note]:
    """The live notes, by key, of the given (session, records) streams of one workspace (what
    `recall` answers from; imported notes only once accepted)."""
    return fold_workspace(streams).live


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
