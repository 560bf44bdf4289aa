"""A fork: a new session whose log begins with a verified copy of a prefix.

The source chain is verified up to SEQ first. Each copied event is re-made for the new session
with a fresh event id and otherwise unchanged, so seq N of the fork is seq N of the source and
every seq an event refers to (a dismissed notice, a recovered dispatch) still points at the right
event. The new session's first event records where it came from (a ``fork`` state delta: source
session, seq and chain digest at SEQ), a hidden note after the copy says so to people, and a
``session_started`` note records the fork's own facts (workspace, title, model, origin ``fork``).

A fork inside an open turn (calls dispatched without outcomes, or a model call in flight) is
allowed: it starts as an open turn that recovery handles, as after a crash — but only when the
user asks (`bubu recover FORK`): a forked session is never continued by itself. A fork that would
cut one model response in two is refused, since the model would be shown half of what it said.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from bubu import clock, ids
from bubu.engine.scope import acting_info
from bubu.errors import ConfigError, CorruptLog
from bubu.events import (
    Actions,
    CheckpointBody,
    Event,
    Info,
    Record,
    SessionStarted,
    SystemNote,
    make,
)
from bubu.log import codec
from bubu.log.codec import sanitize_text
from bubu.log.store import SessionInfo, Store
from bubu.projections.turn import fold

FORK_KEY = "fork"
"""The state_delta key, on the new session's first event, that records the source."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fork:
    """A fork: the new session, the prefix it copies and the state it starts in."""

    session: str
    source: str
    seq: int
    digest: str
    events: int
    open_turn: bool
    dangling_calls: int


def _response_bounds(store: Store, session: str, records: list[Record]) -> tuple[int, int] | None:
    """The first and last seq of the model response that a cut after `records` splits, if any.

    A response is appended in one transaction and its last event carries ``end_invocation``.
    """
    last = records[-1].event
    if last.role != "model" or (last.actions is not None and last.actions.end_invocation):
        return None
    first = min(
        r.seq for r in records if r.event.role == "model" and r.event.invocation == last.invocation
    )
    end = records[-1].seq
    for r in store.read(session, after=end, upto=end + 64):
        end = r.seq
        if r.event.actions is not None and r.event.actions.end_invocation:
            break
    return first, end


def _copy(e: Event, session: str, provenance: dict[str, object] | None) -> Event:
    """`e` re-made for `session` with a fresh id; the first one also carries the provenance."""
    actions = e.actions
    if provenance is not None:
        base = actions or Actions()
        delta = {**(base.state_delta or {}), FORK_KEY: provenance}
        actions = msgspec.structs.replace(base, state_delta=delta)
    return make(
        session=session,
        turn=e.turn,
        run=e.run,
        invocation=e.invocation,
        role=e.role,
        author=e.author,
        status=e.status,
        visibility=e.visibility,
        ts=e.ts,
        content=e.content,
        actions=actions,
    )


def fork_session(
    store: Store, ref: str, at: int, *, fork_id: str | None = None, from_start: bool = False
) -> Fork:
    """Copy events 1..`at` of session `ref` into a new session (see the module docstring).

    `fork_id` names the new session (a rewind records it before it forks); `from_start` lets
    `at` be 0: a fork of none of the events (a rewind to before the first request)."""
    info = store.session(ref)
    head = store.head(info.id)
    if at == 0 and from_start:
        return _fork_from_start(store, info, fork_id or ids.session_id())
    if not 1 <= at <= head.high_water:
        raise ConfigError(
            f"--at {at} is outside session {info.id}, whose events are 1..{head.high_water}; "
            "pick a seq in that range (`bubu log` lists them)"
        )
    report = store.verify(info.id)
    if not report.ok and (report.first_bad_seq is None or report.first_bad_seq <= at):
        raise CorruptLog(
            f"session {info.id} does not verify up to seq {at} ({report.problem}); nothing was "
            "copied (fork from an earlier seq)",
            session=info.id,
            seq=report.first_bad_seq,
        )
    records = store.read(info.id, upto=at)
    cut = _response_bounds(store, info.id, records)
    if cut is not None:
        raise ConfigError(
            f"seq {at} is inside one model response (seqs {cut[0]}..{cut[1]}); fork at "
            f"{cut[0] - 1} or {cut[1]} instead"
        )
    last = records[-1].event.content
    if isinstance(last, SystemNote) and isinstance(last.note, CheckpointBody):
        # The checkpoint and its compaction note are one transaction: never half of it.
        raise ConfigError(
            f"seq {at} is a checkpoint whose compaction note follows at {at + 1}; fork at "
            f"{at - 1} or {at + 1} instead"
        )
    digest = records[-1].hash
    provenance: dict[str, object] = {"session": info.id, "seq": at, "digest": digest}
    fork_id = fork_id or ids.session_id()
    copies = [_copy(r.event, fork_id, provenance if r.seq == 1 else None) for r in records]
    note = make(
        session=fork_id,
        role="system",
        author="host",
        ts=clock.now_ms(),
        visibility="hidden",
        content=SystemNote(
            note=Info(text=f"forked from {info.id} at seq {at} (digest {digest[:16]}…)")
        ),
    )
    # The fork's own facts, under its chain; a forked session is never continued by itself.
    source, _ = acting_info(store, info)
    title = sanitize_text(f"fork@{at}: {source.title}"[:160])
    facts = make(
        session=fork_id,
        role="system",
        author="host",
        ts=clock.now_ms(),
        visibility="hidden",
        content=SystemNote(
            note=SessionStarted(
                workspace=source.workspace,
                title=title,
                model=source.model,
                origin="fork",
                source=info.id,
                source_seq=at,
                source_digest=digest,
            )
        ),
    )
    # The session and its copied events in one transaction: never a half-made fork.
    new = store.create_session(
        title=title,
        workspace=source.workspace,
        model=source.model,
        session_id=fork_id,
        events=[*copies, facts, note],
    )
    turn = fold(records)
    return Fork(
        session=new.id,
        source=info.id,
        seq=at,
        digest=digest,
        events=at + 2,
        open_turn=turn.open,
        dangling_calls=len(turn.dangling),
    )


def _fork_from_start(store: Store, info: SessionInfo, fork_id: str) -> Fork:
    """A fork of no events: the session's own facts only (its workspace, title and model)."""
    digest = codec.GENESIS.hex()
    source, _ = acting_info(store, info)
    title = sanitize_text(f"fork@0: {source.title}"[:160])
    provenance: dict[str, object] = {"session": info.id, "seq": 0, "digest": digest}
    facts = make(
        session=fork_id,
        role="system",
        author="host",
        ts=clock.now_ms(),
        visibility="hidden",
        content=SystemNote(
            note=SessionStarted(
                workspace=source.workspace,
                title=title,
                model=source.model,
                origin="fork",
                source=info.id,
                source_seq=0,
                source_digest=digest,
            )
        ),
        actions=Actions(state_delta={FORK_KEY: provenance}),
    )
    note = make(
        session=fork_id,
        role="system",
        author="host",
        ts=clock.now_ms(),
        visibility="hidden",
        content=SystemNote(note=Info(text=f"forked from {info.id} before its first event")),
    )
    new = store.create_session(
        title=title,
        workspace=source.workspace,
        model=source.model,
        session_id=fork_id,
        events=[facts, note],
    )
    return Fork(
        session=new.id,
        source=info.id,
        seq=0,
        digest=digest,
        events=2,
        open_turn=False,
        dangling_calls=0,
    )


__all__ = ["FORK_KEY", "Fork", "fork_session"]
