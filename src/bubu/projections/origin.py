"""A session's own facts (workspace, title, model, origin) as its hash chain records them.

The sessions table is a header that the chain does not cover: an export's header can be edited
without breaking a hash. What acts — recovery, resume, a new turn — takes the workspace and the
model from the latest `session_started` note instead.

A session written before that note existed (a *legacy* session) has only its header. The header is
then trusted as far as the database it sits in: a session created here is as trustworthy as the
rest of this database. A legacy session that was forked carries the fork's state delta on its
first event and counts as forked; a legacy export cannot be checked against its chain, so import
warns that its workspace comes from the file's header alone, and marks the session imported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from bubu.events import Record, SessionStarted, SystemNote

Origin = Literal["new", "import", "fork"]

FACT_KINDS = ("session_started",)
"""The event kinds the facts are folded from."""

LEGACY_FORK_KEY = "fork"
"""The state-delta key a fork puts on its first event (older forks have nothing else)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionFacts:
    """What a session is, from its chain (or, for a legacy session, from its header)."""

    workspace: str
    title: str
    model: str | None
    origin: Origin
    """Sticky: once imported or forked, always so, whatever a later note says."""
    source: str | None = None
    chained: bool = True
    """False for a legacy session: the facts are the header's."""

    @property
    def adopted(self) -> bool:
        """Imported or forked: it continues only when the user runs it explicitly."""
        return self.origin != "new"

    def describe(self) -> str:
        """`imported from S` / `forked from S`, for the one line that says it was skipped."""
        verb = "imported" if self.origin == "import" else "forked"
        return f"{verb} from {self.source}" if self.source else verb


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
    latest: SessionStarted | None = None
    origin: Origin = "new"
    source: str | None = None
    for r in notes:
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, SessionStarted):
            latest = c.note
            if c.note.origin != "new":
                origin, source = c.note.origin, c.note.source
    if first is not None and origin == "new":
        a = first.event.actions
        delta = a.state_delta if a is not None else None
        fork = delta.get(LEGACY_FORK_KEY) if delta else None
        if isinstance(fork, dict):
            origin = "fork"
            source = str(fork.get("session")) if fork.get("session") else None
    if latest is None:
        return SessionFacts(
            workspace=workspace, title=title, model=model, origin=origin, source=source,
            chained=False,
        )  # fmt: skip
    return SessionFacts(
        workspace=latest.workspace,
        title=latest.title,
        model=latest.model,
        origin=origin,
        source=source,
    )


def disagreement(facts: SessionFacts, *, workspace: str, title: str, model: str | None) -> str:
    """What a header says differently from the chained facts ('' when it agrees)."""
    if not facts.chained:
        return ""
    wrong = [
        f"{name} {given!r} (the chain says {chained!r})"
        for name, given, chained in (
            ("workspace", workspace, facts.workspace),
            ("title", title, facts.title),
            ("model", model, facts.model),
        )
        if given != chained
    ]
    return ", ".join(wrong)


__all__ = ["FACT_KINDS", "Origin", "SessionFacts", "disagreement", "fold_facts"]
