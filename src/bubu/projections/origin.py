"""A session's own facts (workspace, title, model, origin) as its hash chain records them.

The sessions table is a header that the chain does not cover: an export's header can be edited
without breaking a hash. What acts — recovery, resume, a new turn — takes the workspace from the
chain instead: each turn records the session's workspace and title in its `turn_started` note, and
an import or a fork appends a `session_started` note with the copy's facts and its origin. The
latest of these holds; the origin, once imported or forked, stays.

A session written before these fields existed (a *legacy* session) has only its header. The header
is then trusted as far as the database it sits in: a session created here is as trustworthy as the
rest of this database. A legacy session that was forked carries the fork's state delta on its
first event and counts as forked; a legacy export cannot be checked against its chain, so import
warns that its workspace comes from the file's header alone, and marks the session imported.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from bubu.events import Record, SessionStarted, SystemNote, TurnStarted

Origin = Literal["new", "import", "fork"]

FACT_KINDS = ("turn_started", "session_started")
"""The event kinds the facts are folded from."""

LEGACY_FORK_KEY = "fork"
"""The state-delta key a fork puts on its first event (older forks have nothing else)."""


class SessionFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What a session is, from its chain (or, for a legacy session, from its header)."""

    workspace: str
    title: str
    model: str | None
    """The session's model where its chain names one (an import or a fork), else the header's."""
    origin: Origin
    """Sticky: once imported or forked, always so, whatever a later note says."""
    source: str | None = None
    chained: bool = True
    """False for a legacy session: the facts are the header's."""
    title_known: bool = True
    model_known: bool = True
    """Whether the title and the model come from the chain (else from the header)."""
    parent: str | None = None
    parent_call: str | None = None
    """A sub-agent's parent session and the `delegate` call that started it (it is recovered
    with its parent, never by itself)."""

    @property
    def adopted(self) -> bool:
        """Imported or forked: it continues only when the user runs it explicitly."""
        return self.origin != "new"

    def describe(self) -> str:
        """`imported` / `forked from S`, for the one line that says it was skipped."""
        if self.origin == "import":
            return "imported"
        return f"forked from {self.source}" if self.source else "forked"


def fold_facts(
    notes: Iterable[Record],
    *,
    workspace: str,
    title: str,
    model: str | None,
    first: Record | None = None,
) -> SessionFacts:
    """The facts from the `session_started` records in `notes`, falling back on the header
    (`workspace`, `title`, `model`) when there are none; `first` is the session's seq-1 record,
    which marks a legacy fork."""
    chained: tuple[str, str | None, str | None, bool] | None = None
    """(workspace, title, model, model_known) of the latest note that states them."""
    origin: Origin = "new"
    source: str | None = None
    parent: tuple[str, str | None] | None = None
    for r in notes:
        c = r.event.content
        if not isinstance(c, SystemNote):
            continue
        n = c.note
        if isinstance(n, SessionStarted):
            chained = (n.workspace, n.title, n.model, True)
            if n.origin != "new":
                origin, source = n.origin, n.source
            if n.parent is not None:
                parent = (n.parent, n.parent_call)
        elif isinstance(n, TurnStarted) and n.workspace is not None:
            known = chained is not None and chained[3]
            chained = (n.workspace, n.title, chained[2] if known and chained else None, known)
    if first is not None and origin == "new":
        a = first.event.actions
        delta = a.state_delta if a is not None else None
        fork = delta.get(LEGACY_FORK_KEY) if delta else None
        if isinstance(fork, dict):
            origin = "fork"
            source = str(fork.get("session")) if fork.get("session") else None
    up, call = parent if parent is not None else (None, None)
    if chained is None:
        return SessionFacts(
            workspace=workspace,
            title=title,
            model=model,
            origin=origin,
            source=source,
            chained=False,
            parent=up,
            parent_call=call,
        )
    ws, chained_title, chained_model, model_known = chained
    return SessionFacts(
        workspace=ws,
        title=chained_title if chained_title is not None else title,
        model=chained_model if model_known else model,
        origin=origin,
        source=source,
        title_known=chained_title is not None,
        model_known=model_known,
        parent=up,
        parent_call=call,
    )


def disagreement(facts: SessionFacts, *, workspace: str, title: str, model: str | None) -> str:
    """What a header says differently from the chained facts ('' when it agrees)."""
    if not facts.chained:
        return ""
    checks = [
        ("workspace", workspace, facts.workspace, True),
        ("title", title, facts.title, facts.title_known),
        ("model", model, facts.model, facts.model_known),
    ]
    wrong = [
        f"{name} {given!r} (the chain says {chained!r})"
        for name, given, chained, known in checks
        if known and given != chained
    ]
    return ", ".join(wrong)


__all__ = ["FACT_KINDS", "Origin", "SessionFacts", "disagreement", "fold_facts"]
