"""The transcript a person reads: messages, thinking, tool cards with their status, notes, usage."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from bubu.events import (
    CheckpointBody,
    ChildFinished,
    ChildStarted,
    Compaction,
    Error,
    FunctionCall,
    FunctionResponse,
    HookRun,
    Info,
    MemoryAccepted,
    MemoryForgotten,
    ModelSwitch,
    NoticeDismissed,
    PlanApproved,
    ProcessEnded,
    ProcessOutput,
    ProcessStarted,
    ProjectInstructions,
    Record,
    RecoveryNotice,
    RunStarted,
    ServerNote,
    SessionStarted,
    SkillsListed,
    StepLimit,
    SummaryChunk,
    SystemNote,
    TaskApproved,
    TaskHeld,
    Text,
    Thinking,
    TurnEnded,
    TurnStarted,
    WindowLearned,
    WorkspaceTaken,
)
from bubu.pricing import CostTally

ToolStatus = Literal[
    "proposed", "dispatched", "completed", "failed", "interrupted", "recovered", "denied"
]


class ToolCard(msgspec.Struct, kw_only=True):
    """One tool call and what became of it."""

    seq: int
    call_id: str
    name: str
    arguments: dict[str, object]
    status: ToolStatus = "proposed"
    effect: str | None = None
    result: str | None = None
    is_error: bool = False
    duration_ms: int | None = None
    blob: str | None = None
    recovery: str | None = None
    kind: Literal["tool"] = "tool"


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """A message, thinking, error or boundary line."""

    seq: int
    kind: Literal["user", "assistant", "thinking", "error", "note", "notice"]
    text: str
    turn: str | None = None


class Transcript(msgspec.Struct, kw_only=True):
    """The transcript plus totals."""

    items: list[Message | ToolCard] = msgspec.field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    model_calls: int = 0
    usage_unknown_calls: int = 0
    """Calls whose server reported no token usage (their tokens are unknown, not 0)."""
    cost: CostTally = msgspec.field(default_factory=CostTally)
    """What the calls cost, in total and per model (unknown prices kept apart)."""
    cards: dict[str, ToolCard] = msgspec.field(default_factory=dict)

    def apply(self, r: Record) -> None:
        """Fold one record in."""
        ev, c, a = r.event, r.event.content, r.event.actions
        add = self.items.append
        if isinstance(c, Text) and c.text:
            add(
                Message(
                    seq=r.seq,
                    # What the host told the model (a hook's context, plan mode) is a note.
                    kind=("note" if ev.author == "host" else "user")
                    if ev.role == "user"
                    else "assistant",
                    text=c.text,
                    turn=ev.turn,
                )
            )
        elif isinstance(c, Thinking):
            add(
                Message(
                    seq=r.seq, kind="thinking", text=c.text or "(redacted thinking)", turn=ev.turn
                )
            )
        elif isinstance(c, FunctionCall):
            card = ToolCard(seq=r.seq, call_id=c.call_id, name=c.name, arguments=dict(c.arguments))
            self.cards[c.call_id] = card
            add(card)
        elif isinstance(c, FunctionResponse):
            done = self.cards.get(c.call_id)
            if done is not None:
                done.result, done.is_error, done.duration_ms = c.result, c.is_error, c.duration_ms
                done.blob = None if c.blob is None else c.blob.sha256
                if done.recovery is None:
                    denied = c.is_error and c.result.startswith("permission denied")
                    done.status = "denied" if denied else ("failed" if c.is_error else "completed")
        elif isinstance(c, Error):
            wait = "" if c.retry_in_ms is None else f" (retrying in {c.retry_in_ms / 1000:.1f}s)"
            add(
                Message(
                    seq=r.seq,
                    kind="error",
                    text=f"{c.error_class}: {c.message}{wait}",
                    turn=ev.turn,
                )
            )
        elif isinstance(c, SystemNote):
            self._note(r, c)
        if a is not None:
            if a.tool_dispatch is not None and (dcard := self.cards.get(a.tool_dispatch.call_id)):
                dcard.status, dcard.effect = "dispatched", a.tool_dispatch.effect
            if a.tool_recovery is not None and (rcard := self.cards.get(a.tool_recovery.call_id)):
                rcard.recovery = a.tool_recovery.decision
                rcard.status = (
                    "interrupted" if a.tool_recovery.decision == "interrupted" else "recovered"
                )
            if a.token_usage is not None:
                u = a.token_usage
                self.model_calls += 1
                self.usage_unknown_calls += u.usage_unknown
                self.input_tokens += u.input_tokens
                self.output_tokens += u.output_tokens
                self.cache_read_tokens += u.cache_read_tokens
                self.cache_write_tokens += u.cache_write_tokens
                self.reasoning_tokens += u.reasoning_tokens
                self.cost.add(u.model, u.cost_usd, u.input_tokens, u.output_tokens)

    def _note(self, r: Record, c: SystemNote) -> None:
        n, turn = c.note, r.event.turn
        text: str | None = None
        kind: Literal["note", "notice"] = "note"
        match n:
            case TurnStarted(model=model):
                text = f"turn started ({model})"
            case TurnEnded(reason=reason, message=message):
                text = f"turn {reason}" + (f": {message}" if message else "")
            case RunStarted(cause=cause):
                text = {"new": None, "resume": "resumed", "recovery": "recovered after a crash"}[
                    cause
                ]
            case StepLimit(steps=steps):
                text = f"step limit of {steps} reached"
            case ModelSwitch():
                text = switch_text(n)
            case RecoveryNotice():
                kind, text = "notice", notice_text(n)
            case NoticeDismissed():
                text = "recovery notice dismissed"
            case Compaction(watermark=w, ok=ok):
                text = (
                    f"context compacted through seq {w}"
                    if ok
                    else f"summary failed at seq {w}: the fact sheet covers it until a retry"
                )
            case Info(text=t):
                text = t
            case ServerNote() | WindowLearned():
                text = server_text(n)
            case SessionStarted(origin="import", workspace=ws):
                # (A fork says so in its own note, which people have always read.)
                text = f"imported here; it continues only when run explicitly (workspace {ws})"
            case ProjectInstructions():
                from bubu.projections.instructions import note_line

                text = note_line(n)
            case SkillsListed():
                from bubu.projections.skills import note_line as skills_line

                text = skills_line(n)
            case MemoryForgotten(key=key):
                text = f"note {key!r} forgotten (bubu memory forget)"
            case TaskHeld(reasons=reasons):
                kind, text = (
                    "notice",
                    "held by the worker, waiting for `bubu approve-task`: " + ("; ".join(reasons)),
                )
            case TaskApproved(by=by):
                text = "approved to run above the worker's ceiling" + (f" by {by}" if by else "")

            case MemoryAccepted(key=key, source=source):
                text = f"imported note {key!r} of {source} accepted (bubu memory accept)"
            case WorkspaceTaken(snapshot=snap, source=source):
                text = (
                    f"workspace {source} stored with the task ({snap.files} files)"
                    if snap.tree is not None
                    else f"the workspace {source} could not be stored: {snap.partial}"
                )
            case ChildStarted() | ChildFinished():
                text = child_text(n)
            case SessionStarted(parent=str(parent), parent_call=call):
                text = f"sub-agent of session {parent} (call {call}); it recovers with its parent"
            case HookRun():
                text = hook_text(n)
            case PlanApproved(plan=plan):
                text = f"plan approved ({len(plan)} steps): the session acts on it"
            case ProcessStarted() | ProcessEnded():
                from bubu.projections.processes import lifecycle_text

                kind, text = "note", lifecycle_text(n)
            case CheckpointBody() | SummaryChunk() | ProcessOutput():
                text = None  # a marker follows (the compaction note), or nothing is said
            case _:
                text = None
        if text:
            self.items.append(Message(seq=r.seq, kind=kind, text=text, turn=turn))


def child_text(n: ChildStarted | ChildFinished) -> str:
    """A sub-agent's start or end as a person reads it."""
    if isinstance(n, ChildStarted):
        how = "resumed" if n.resumed else "started"
        agent = f" ({n.agent})" if n.agent else ""
        branch = f" on branch {n.branch}" if n.branch else ""
        return f"sub-agent {n.child}{agent} {how} for {n.call_id}{branch}"
    back = ", read back after a crash" if n.read_back else ""
    return f"sub-agent {n.child} {n.reason} ({n.tokens:,} tokens{back})"


def server_text(n: ServerNote | WindowLearned) -> str:
    """What the model server turned out to be, as a person reads it."""
    if isinstance(n, WindowLearned):
        return f"window: {n.tokens:,} tokens (from {n.source}); compacting to it"
    return n.text


def unknown_usage(calls: int) -> str:
    """What a token count leaves out: calls whose server reported no usage ("" when none)."""
    if not calls:
        return ""
    return f" (+{calls} call{'s' if calls != 1 else ''} of unknown usage)"


def switch_text(n: ModelSwitch) -> str:
    """A switch of model as a person reads it."""
    return (
        f"switched from {n.from_model} to {n.to_model} after {n.failures} failed attempts "
        f"in a row ({n.reason})"
    )


FORCE_HINT = (
    "after a look (`bubu show {session}`), `bubu recover {session} --force` continues it: every "
    "call left running gets an interrupted result, nothing is re-run"
)
"""What a person can do about a blocked session (besides `bubu fork`)."""


def notice_text(n: RecoveryNotice, session: str | None = None, *, ongoing: bool = True) -> str:
    """The recovery notice as a person reads it (naming `session`, what `--force` would do).
    `ongoing`: the recovered turn still runs; once it has ended, the notice says it recovered."""
    if n.status == "blocked":
        killed = "".join(f"\nleft running by the crashed run: {line}" for line in n.leftovers)
        hint = "" if session is None else "\n" + FORCE_HINT.format(session=session)
        return f"recovery blocked: {n.reason}{killed}{hint}"
    lines = [f"unfinished task detected, {'auto-recovering' if ongoing else 'recovered'}"]
    if n.forced is not None:
        lines = [f"recovery forced by the user past a block ({n.forced}); nothing was re-run"]
    if n.silent_retries:
        lines.append("re-run silently: " + ", ".join(n.silent_retries))
    if n.verified_applied:
        lines.append("recorded as applied: " + ", ".join(n.verified_applied))
    if n.pending_review:
        lines.append(
            "awaiting your review (may or may not have happened): " + ", ".join(n.pending_review)
        )
    if n.workspace_changes:
        lines.append(
            "changed in the workspace while interrupted: " + "; ".join(n.workspace_changes)
        )
    if n.dropped_model_calls:
        lines.append(f"in-flight model call issued again: {n.dropped_model_calls}")
    if n.leftovers:
        lines.append("left running by the crashed run: " + "; ".join(n.leftovers))
    return "\n".join(lines)


def transcript(records: Iterable[Record]) -> Transcript:
    """The transcript of the records."""
    t = Transcript()
    for r in records:
        t.apply(r)
    return t


_DECIDED = {"allow": "allowed", "deny": "denied", "ask": "asked", "block": "blocked"}


def hook_text(n: HookRun) -> str:
    """One line for a hook run: which hook, what it decided and why, or how it failed."""
    line = f"{n.event} hook `{n.hook}`"
    if n.decision != "none":
        line += f" {_DECIDED[n.decision]}"
    if n.updated_input is not None:
        line += " with new arguments"
    if n.reason:
        line += f": {n.reason}"
    if n.failure:
        line += f" (failed: {n.failure})"
    return line
