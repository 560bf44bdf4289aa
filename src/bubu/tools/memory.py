"""remember, recall and update_plan: notes kept across the sessions of a workspace, and the plan.

Both live in the log only (`bubu.projections.memory`). `remember` is a provable write whose
"file" is the note ``memory:KEY``: its dispatch records the note's content hash before and the
hash of the new text, and its successful outcome *is* the write, so after a crash between
dispatch and outcome recovery proves the outcome from the memory projection: the note has the new
text (applied), still the old one (re-run) or neither (interrupted: another session changed it).
`recall` only reads. `update_plan` changes nothing outside its own outcome, which is the plan, so
re-running it after a crash is provably safe: it is declared read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from bubu.errors import ToolError
from bubu.projections.memory import (
    MEMORY_PREFIX,
    Note,
    clean_key,
    note_hash,
    plan_counts,
    plan_items,
    plan_lines,
    search,
    text_sha256,
)
from bubu.toolfacts import ToolFacts
from bubu.tools.base import JSON, ToolContext, ToolResult, WriteIntent
from bubu.tools.decorator import tool
from bubu.tools.schema import Arguments

MAX_KEY = 100
"""The longest key, in characters."""

MAX_TEXT = 4000
"""The longest note, in characters: memory holds facts to recall, not documents."""

RECALL_NOTES = 20
"""The most notes one recall shows."""

RECALL_BYTES = 6000
"""The most UTF-8 bytes of one recall answer (below the offload threshold)."""

MAX_PLAN_ITEMS = 50


def _notes(ctx: ToolContext) -> dict[str, Note]:
    if ctx.memory is None:
        raise ToolError("memory is not available here (no store); nothing was read or written")
    return ctx.memory()


def _key(raw: str) -> str:
    key = clean_key(raw)
    if not key:
        raise ToolError("the key is empty; give a short name for the note, e.g. 'test-command'")
    if len(key) > MAX_KEY or any(ch in key for ch in "\n\r\0"):
        raise ToolError(f"the key must be one line of at most {MAX_KEY} characters")
    return key


def _text(raw: str) -> str:
    if not raw.strip():
        raise ToolError("the text is empty; say what to remember (use bubu memory forget to drop)")
    if len(raw) > MAX_TEXT:
        raise ToolError(
            f"the text is {len(raw):,} characters; a note holds at most {MAX_TEXT:,}, keep it short"
        )
    return raw


class RememberArgs(Arguments):
    """The arguments of remember."""

    key: Annotated[str, "A short name, e.g. 'test-command'."]
    text: Annotated[str, f"The note (at most {MAX_TEXT} chars)."]


def _plan_note(args: RememberArgs, ctx: ToolContext) -> WriteIntent:
    """The note's hash now and the hash of the new text, recorded before the write."""
    key, text = _key(args.key), _text(args.text)
    return WriteIntent(
        path=MEMORY_PREFIX + key,
        before_sha256=note_hash(_notes(ctx), key),
        after_sha256=text_sha256(text),
        content=text.encode("utf-8", "surrogatepass"),
    )


@tool(
    effect="provable_write",
    name="remember",
    facts=ToolFacts(headline="key"),
    prepare=_plan_note,
    description=(
        "Remember a short note for later sessions in this workspace (how to build or test, a "
        "decision and its reason, a pitfall). `key` names the note; remembering a key again "
        "replaces its text, and the same key and text again changes nothing. Find notes with "
        "recall."
    ),
)
def remember(args: RememberArgs, ctx: ToolContext, intent: WriteIntent) -> ToolResult:
    """remember{key, text}: keep a note for later sessions of this workspace.

    Its successful outcome is the write (the memory projection reads it from the log)."""
    key, text = _key(args.key), _text(args.text)
    notes = _notes(ctx)
    now = note_hash(notes, key)
    if now == text_sha256(text):
        return ToolResult(output=f"already remembered {key!r} with this text; nothing changed.")
    if now != intent.before_sha256:
        raise ToolError(
            f"the note {key!r} was changed by another session since this call was prepared; "
            "recall it and retry"
        )
    verb = "replaced" if now is not None else "remembered"
    return ToolResult(output=f"{verb} {key!r} for later sessions of this workspace.")


class RecallArgs(Arguments):
    """The arguments of recall."""

    query: Annotated[str, "Words to look for; '' lists all notes."]


@tool(
    effect="read_only",
    name="recall",
    description=(
        "Recall notes remembered in this workspace, by earlier sessions too. Matches the words "
        "of `query` against each note's key and text (simple term matching, case-insensitive); "
        f"best matches first, at most {RECALL_NOTES}. An empty query lists every note."
    ),
)
def recall(args: RecallArgs, ctx: ToolContext) -> ToolResult:
    """recall{query}: the notes of this workspace that match a query."""
    query = args.query
    notes = _notes(ctx)
    found = search(notes, query)
    if not found:
        what = f"matches {query!r}" if query.strip() else "is remembered"
        has = f"{len(notes)} note{'s' if len(notes) != 1 else ''}"
        return ToolResult(output=f"no note of this workspace {what} (it has {has}).")
    lines = [f"{len(found)} of {len(notes)} notes match:" if query.strip() else "notes:"]
    used = len(lines[0])
    shown = 0
    for note in found[:RECALL_NOTES]:
        text = note.text if len(note.text) <= 1500 else note.text[:1500] + " … [cut]"
        entry = f"- {note.key}: {text}"
        if shown and used + len(entry.encode()) > RECALL_BYTES:
            break
        lines.append(entry)
        used += len(entry.encode()) + 1
        shown += 1
    if shown < len(found):
        lines.append(f"({len(found) - shown} more; use a narrower query)")
    return ToolResult(output="\n".join(lines))


class PlanStep(Arguments):
    """One step of a plan."""

    text: str
    status: Literal["pending", "in_progress", "completed"]


class UpdatePlanArgs(Arguments):
    """The arguments of update_plan."""

    items: Annotated[list[PlanStep], "Every step of the plan, in order."]


def _plan_words(args: Mapping[str, JSON]) -> None:
    """The plan's own words for a bad step ("item 2 has the status 'doing'; …"), which say more
    than the schema's; the schema check comes after."""
    raw = args.get("items")
    if isinstance(raw, list):
        items = plan_items(raw)
        if isinstance(items, str):
            raise ToolError(f"the plan was not changed: {items}")


@tool(
    effect="read_only",  # its only effect is its own outcome: a re-run is safe
    name="update_plan",
    validate=_plan_words,
    description=(
        "Keep a plan for a long task: give the whole list of steps each time, each with a "
        "status (pending, in_progress or completed). The newest plan is shown to the user and "
        "kept across compaction."
    ),
)
def update_plan(args: UpdatePlanArgs) -> ToolResult:
    """update_plan{items}: replace the plan of this task."""
    items = plan_items([{"text": s.text, "status": s.status} for s in args.items])
    if isinstance(items, str):
        raise ToolError(f"the plan was not changed: {items}")
    if len(items) > MAX_PLAN_ITEMS:
        raise ToolError(f"the plan was not changed: at most {MAX_PLAN_ITEMS} items")
    if not items:
        return ToolResult(output="plan cleared.")
    return ToolResult(output=f"plan {plan_counts(items)}:\n" + "\n".join(plan_lines(items)))
