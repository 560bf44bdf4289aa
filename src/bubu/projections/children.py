"""A session's sub-agents, folded from its `child_started` / `child_finished` facts; and what a
child session spent and reported, folded from its own log. Pure, like every projection."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from bubu.events import ChildFinished, ChildStarted, Record, SystemNote, Text, TurnEnded

RUNNING = "running"


class Child(msgspec.Struct, frozen=True, kw_only=True):
    """One sub-agent of a session, as the parent's log says."""

    session: str
    call_id: str
    agent: str | None = None
    model: str = ""
    branch: str | None = None
    base: str | None = None
    state: str = RUNNING
    """``running`` until its end is recorded, then how its turn ended."""
    tokens: int = 0
    cost_usd: float = 0.0
    started_seq: int = 0


def fold_children(records: Iterable[Record]) -> dict[str, Child]:
    """The session's children by session id, in the order they started."""
    out: dict[str, Child] = {}
    for r in records:
        c = r.event.content
        if not isinstance(c, SystemNote):
            continue
        n = c.note
        if isinstance(n, ChildStarted):
            if n.child not in out:  # a resumed child is the same child
                out[n.child] = Child(
                    session=n.child,
                    call_id=n.call_id,
                    agent=n.agent,
                    model=n.model,
                    branch=n.branch,
                    base=n.base,
                    started_seq=r.seq,
                )
        elif isinstance(n, ChildFinished):
            known = out.get(n.child)
            if known is not None:
                out[n.child] = msgspec.structs.replace(
                    known, state=n.reason, tokens=n.tokens, cost_usd=n.cost_usd
                )
    return out


def running(records: Iterable[Record]) -> list[Child]:
    """The children that started and have not finished."""
    return [c for c in fold_children(records).values() if c.state == RUNNING]


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """What a child session came to: its last turn's end and last words, and its spend."""

    reason: str | None = None
    """How its last turn ended (None: it has not ended)."""
    message: str | None = None
    cause: str | None = None
    text: str = ""
    tokens: int = 0
    cost_usd: float = 0.0


def report(records: Iterable[Record]) -> Report:
    """The child's report: the model's last text of its last turn, how that turn ended, and
    the tokens and cost of all its model calls and of its own finished children."""
    reason = message = cause = None
    text = ""
    tokens, cost = 0, 0.0
    counted: set[str] = set()
    for r in records:
        ev, c, a = r.event, r.event.content, r.event.actions
        if isinstance(c, Text) and ev.role == "model" and c.text:
            text = c.text
        elif isinstance(c, SystemNote):
            n = c.note
            if isinstance(n, TurnEnded):
                reason, message, cause = n.reason, n.message, n.cause
            elif isinstance(n, ChildFinished) and n.child not in counted:
                counted.add(n.child)
                tokens, cost = tokens + n.tokens, cost + n.cost_usd
        if a is not None and a.token_usage is not None and ev.role == "model":
            u = a.token_usage
            tokens += u.input_tokens + u.output_tokens
            cost += u.cost_usd or 0.0
    return Report(
        reason=reason, message=message, cause=cause, text=text, tokens=tokens, cost_usd=cost
    )


BUDGET_CAUSES = frozenset({"max_tokens", "max_time"})


def outcome_line(r: Report) -> str:
    """How a child ended, in the words its parent's model reads first: ``completed``,
    ``stopped: budget (…)``, ``failed: …``."""
    if r.reason == "completed":
        return "completed"
    why = r.message or ""
    if r.reason == "stopped" and (r.cause in BUDGET_CAUSES or "cost limit" in why):
        return f"stopped: budget ({why})" if why else "stopped: budget"
    return f"{r.reason}: {why}" if why else str(r.reason)


__all__ = ["RUNNING", "Child", "Report", "fold_children", "outcome_line", "report", "running"]
