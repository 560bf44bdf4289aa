"""The state of a session, folded from its boundary events."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from bubu.events import (
    Event,
    NoticeDismissed,
    PermissionDecision,
    PermissionRequest,
    Record,
    RecoveryNotice,
    RunStarted,
    SystemNote,
    TaskApproved,
    TaskHeld,
    Text,
    TurnEnded,
    TurnStarted,
)

State = Literal[
    "idle", "queued", "held", "open", "completed", "failed", "stopped", "suspended", "blocked"
]
"""`open` is a turn with no end: running if its runner holds a live lease, crashed otherwise.
`queued` is a request waiting for a worker to open its turn (`bubu submit`); `held` is one a
worker would not run under its ceiling, waiting for `bubu approve-task`."""

BOUNDARY_KINDS = (
    "text",
    "turn_started",
    "turn_ended",
    "run_started",
    "recovery_notice",
    "notice_dismissed",
    "permission_request",
    "permission_decision",
    "task_held",
    "task_approved",
)
"""The event kinds `fold_status` looks at; a store can read just these."""


Shown = Literal[
    "running",
    "open turn",
    "queued",
    "held",
    "idle",
    "completed",
    "failed",
    "stopped",
    "suspended",
    "blocked",
]
"""A session's state as every command shows it."""

STATES: tuple[Shown, ...] = (
    "running",
    "open turn",
    "queued",
    "held",
    "idle",
    "completed",
    "failed",
    "stopped",
    "suspended",
    "blocked",
)


class Status(msgspec.Struct, frozen=True, kw_only=True):
    """What a session is doing, as far as the log says."""

    state: State = "idle"
    turn: str | None = None
    turns: int = 0
    runs_in_turn: int = 0
    reason: str | None = None
    notice_seq: int | None = None
    notice: RecoveryNotice | None = None
    notice_dismissed: bool = False
    pending_permissions: tuple[str, ...] = ()
    last_seq: int = 0


def step(s: Status, seq: int, ev: Event) -> Status:
    """Fold one event into the status."""
    c = ev.content
    a = ev.actions
    if a is not None and (a.permission_request is not None or a.permission_decision is not None):
        s = _permissions(s, a.permission_request, a.permission_decision)
    if isinstance(c, Text) and ev.role == "user" and ev.visibility == "visible":
        if s.state not in ("open", "blocked", "held"):
            return msgspec.structs.replace(s, state="queued", reason=None, last_seq=seq)
        return msgspec.structs.replace(s, last_seq=seq)
    if not isinstance(c, SystemNote):
        return msgspec.structs.replace(s, last_seq=seq)
    n = c.note
    match n:
        case TurnStarted():
            return msgspec.structs.replace(
                s,
                state="open",
                turn=ev.turn,
                turns=s.turns + 1,
                runs_in_turn=0,
                reason=None,
                pending_permissions=(),
                last_seq=seq,
            )
        case TurnEnded(reason=reason, message=message):
            return msgspec.structs.replace(
                s, state=reason, reason=message, pending_permissions=(), last_seq=seq
            )
        case RunStarted():
            state: State = "open" if s.state in ("open", "blocked") else s.state
            return msgspec.structs.replace(
                s, state=state, runs_in_turn=s.runs_in_turn + 1, last_seq=seq
            )
        case RecoveryNotice(status=status, reason=reason):
            return msgspec.structs.replace(
                s,
                state="blocked" if status == "blocked" else s.state,
                reason=reason if status == "blocked" else s.reason,
                notice_seq=seq,
                notice=n,
                notice_dismissed=False,
                last_seq=seq,
            )
        case TaskHeld(reasons=reasons):
            return msgspec.structs.replace(s, state="held", reason="; ".join(reasons), last_seq=seq)
        case TaskApproved():
            state = "queued" if s.state == "held" else s.state
            return msgspec.structs.replace(s, state=state, reason=None, last_seq=seq)
        case NoticeDismissed(notice_seq=ns):
            dismissed = s.notice_dismissed or ns == s.notice_seq
            return msgspec.structs.replace(s, notice_dismissed=dismissed, last_seq=seq)
        case _:
            return msgspec.structs.replace(s, last_seq=seq)


def _permissions(
    s: Status, req: PermissionRequest | None, dec: PermissionDecision | None
) -> Status:
    pending = list(s.pending_permissions)
    if req is not None:
        pending.append(req.request_id)
    if dec is not None and dec.request_id in pending:
        pending.remove(dec.request_id)
    return msgspec.structs.replace(s, pending_permissions=tuple(pending))


def fold_status(records: Iterable[Record], start: Status | None = None) -> Status:
    """The status after `records`, continuing from `start` (so fold(a+b) == fold(b, fold(a)))."""
    s = start or Status()
    for r in records:
        s = step(s, r.seq, r.event)
    return s
