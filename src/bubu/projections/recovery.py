"""The recovery plan: a pure function of the committed prefix, the tools' effect classes and the
file hashes observed now (DESIGN §4, §5).

    nothing  — no open turn;
    ready    — an open turn to continue; for each dangling call (dispatched, no outcome): re-run it
               silently (read_only; a provable write whose file is still *before*), record it as
               applied (a provable write whose file is *after*), or give it an explicit interrupted
               result (side effects, and writes whose file is neither); an in-flight model call is
               simply issued again;
    blocked  — the prefix is not trustworthy: a broken chain, a successful outcome without a
               dispatch, two outcomes for one call, a recovery fact naming a call that was never
               made or contradicting its dispatch, or a crash loop (a dispatch already recovered
               once is dangling again, or the process died during a model call for the
               `MODEL_CRASH_LOOP`-th time in a row).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

import msgspec

from bubu.events import (
    EffectClass,
    FunctionCall,
    FunctionResponse,
    Record,
    RecoveryDecision,
    SystemNote,
    ToolRecovery,
)
from bubu.projections.idset import IdSet
from bubu.projections.turn import CallState, TurnFold, fold
from bubu.toolfacts import facts_of

PlanKind = Literal["nothing", "ready", "blocked"]

INTERRUPTED = (
    "interrupted: the run that was running this call ended before its outcome could be committed "
    "(Bubu was killed or crashed, or its database was out of reach), after it was dispatched. "
    "The action may or may not have happened; inspect the workspace before deciding whether to "
    "retry."
)


class CallPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What recovery does with one dangling call."""

    call_id: str
    tool: str
    effect: EffectClass
    decision: RecoveryDecision
    reason: str
    dispatch_seq: int
    label: str


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """The recovery plan of a session."""

    kind: PlanKind
    turn: str | None = None
    calls: tuple[CallPlan, ...] = ()
    dropped_model_calls: int = 0
    reason: str | None = None
    forced: bool = False
    """The user overrode a block (`reason`) with `bubu recover --force`."""


RESUMABLE = frozenset({"delegate"})
"""Tools whose call is resumed after a crash: a `delegate` call's child session is keyed by the
call, so running the call again continues that child (or reads its result back), exactly once."""

DELETED = "deleted"
"""The ``after_sha256`` of a provable write that removes its file (a rewind deleting a file that
was created after the seq it goes back to): applied when the file is absent."""

_RANK: dict[EffectClass, int] = {"read_only": 0, "provable_write": 1, "side_effecting": 2}


NEWLINE_MARK = "⏎"
"""Where a label folded onto one line had a newline (the same mark the permission prompt uses)."""


def one_line_marked(text: str) -> str:
    """`text` on one line: each newline kept as ⏎, so two commands never read as one, and the
    runs of other whitespace folded."""
    return f"{NEWLINE_MARK} ".join(" ".join(line.split()) for line in text.split("\n"))


def label(name: str, args: Mapping[str, object]) -> str:
    """A short human label for a call: the tool and its main argument (on one line, newlines
    marked ⏎)."""
    main = facts_of(name).headline_of(args)
    text = one_line_marked(str(main)) if main is not None else ""
    if len(text) > 60:
        text = text[:59] + "…"
    return f"{name} {text}".rstrip()


def paths_to_observe(records: Sequence[Record], *, turn: TurnFold | None = None) -> list[str]:
    """The files whose current hash the plan needs: targets of dangling provable writes (`turn`:
    the fold of `records` when the caller has it, e.g. reloaded from a snapshot)."""
    t = turn if turn is not None else fold(records)
    return sorted(
        {c.dispatch.path for c in t.dangling if c.dispatch is not None and c.dispatch.path}
    )


class Dispatched(NamedTuple):
    """What a recovery fact is checked against of its dispatch (not the whole decoded fact)."""

    call_id: str
    tool: str
    effect: EffectClass
    proven: bool
    """A provable write that names its file and the hash it writes."""


class Integrity:
    """What the plan checks of the whole prefix (see `plan_recovery`), folded one record at a
    time so that a caller can stream the log through it, and small enough to keep in the
    runner's state snapshot: `problem` is the first one found.

    The calls still waiting for their outcome are held exactly, with their dispatches; a call
    whose outcomes have all come is only a key in `IdSet`s (8 bytes), which is all a later
    record can be checked against: an outcome or a recovery fact naming it again."""

    __slots__ = ("_closed", "_open", "_undispatched", "problem")

    def __init__(self) -> None:
        self.problem: str | None = None
        self._open: dict[str, _Open] = {}
        """The calls made whose outcomes have not all come, by id."""
        self._closed = IdSet()
        """The calls every one of whose outcomes came."""
        self._undispatched = IdSet()
        """Of those, the ones never dispatched (an error outcome needs no dispatch)."""

    def apply(self, r: Record) -> None:
        """Fold one record in (in seq order); nothing more is checked once a problem is found."""
        if self.problem is not None:
            return
        c, a = r.event.content, r.event.actions
        if isinstance(c, FunctionCall):
            # Logs written before call ids were made unique may reuse one id, call after call:
            # each call of that id may have its outcome.
            cid = c.call_id
            state = self._open.get(cid)
            if state is not None:
                state.made += 1
            elif cid in self._closed:  # one more call of an id whose outcomes all came
                self._open[cid] = _Open(
                    made=2, answered=1, dispatched=cid not in self._undispatched
                )
            else:
                self._open[cid] = _Open()
        if a is not None and a.tool_dispatch is not None:
            d = a.tool_dispatch
            proven = d.effect == "provable_write" and bool(d.path and d.after_sha256)
            state = self._open.get(d.call_id)
            if state is None:  # a dispatch of a call not (or no longer) waiting: kept as is
                state = self._open[d.call_id] = _Open(made=0)
            state.dispatched = True
            state.dispatches[r.seq] = Dispatched(d.call_id, d.tool, d.effect, proven)
        if a is not None and a.tool_recovery is not None:
            problem = _recovery_fact(a.tool_recovery, r.seq, self)
            if problem is not None:
                self.problem = problem
                return
        if isinstance(c, FunctionResponse):
            self._answer(c, r.seq)

    def _answer(self, c: FunctionResponse, seq: int) -> None:
        cid = c.call_id
        state = self._open.get(cid)
        if state is None or state.made == 0:
            if cid in self._closed:
                self.problem = f"two outcomes for the call {cid} (seq {seq})"
            else:
                self.problem = f"an outcome for a call that was never made ({cid}, seq {seq})"
        elif state.answered >= state.made:
            self.problem = f"two outcomes for the call {cid} (seq {seq})"
        elif not c.is_error and not state.dispatched:
            self.problem = f"an outcome without a dispatch for the call {cid} (seq {seq})"
        else:
            state.answered += 1
            if state.answered >= state.made:
                del self._open[cid]
                self._closed.add(cid)
                if not state.dispatched:
                    self._undispatched.add(cid)

    def made(self, cid: str) -> bool:
        """Whether a call of this id was made."""
        state = self._open.get(cid)
        return (state is not None and state.made > 0) or cid in self._closed

    def dispatch(self, seq: int, cid: str) -> Dispatched | None:
        """The dispatch at `seq` of the call `cid` while that call waits for its outcome."""
        state = self._open.get(cid)
        return None if state is None else state.dispatches.get(seq)


class _Open(msgspec.Struct, kw_only=True):
    """A call waiting for its outcome(s), as `Integrity` holds it."""

    made: int = 1
    answered: int = 0
    dispatched: bool = False
    dispatches: dict[int, Dispatched] = msgspec.field(default_factory=dict)
    """Its dispatches by seq (a re-run read is dispatched again)."""


REWIND_KEY = "rewind"
"""The state_delta key of a rewind's plan event."""


class Rewinding:
    """The plan of the open turn when it is a rewind's (as the event recorded it, undecoded),
    folded one record at a time."""

    __slots__ = ("_turn", "plan")

    def __init__(self) -> None:
        self._turn: str | None = None
        self.plan: object | None = None
        """The open turn's rewind plan as recorded, of the records folded so far, or None."""

    def apply(self, r: Record) -> None:
        c, a = r.event.content, r.event.actions
        if isinstance(c, SystemNote):
            name = type(c.note).__name__
            if name == "TurnStarted" and r.event.turn != self._turn:
                self._turn, self.plan = r.event.turn, None
            elif name == "TurnEnded":
                self._turn, self.plan = None, None
        open_turn = self._turn is not None
        if a is not None and a.state_delta and REWIND_KEY in a.state_delta and open_turn:
            self.plan = a.state_delta[REWIND_KEY]


def _integrity(records: Sequence[Record]) -> str | None:
    check = Integrity()
    for r in records:
        check.apply(r)
        if check.problem is not None:
            break
    return check.problem


def _recovery_fact(f: ToolRecovery, seq: int, calls: Integrity) -> str | None:
    """Why a committed recovery decision cannot be trusted, or None: it must name a call that was
    made, the dispatch it was decided from, and a decision that dispatch allows."""
    where = f"the recovery fact at seq {seq}"
    if not calls.made(f.call_id):
        return f"{where} names a call that was never made ({f.call_id})"
    d = calls.dispatch(f.dispatch_seq, f.call_id)
    if d is None or d.call_id != f.call_id:
        return f"{where} names seq {f.dispatch_seq} as the dispatch of {f.call_id}, which it is not"
    if d.tool != f.tool:
        return f"{where} says {f.call_id} was {f.tool}, its dispatch says {d.tool}"
    proven = d.proven
    if f.decision == "resume" and d.tool not in RESUMABLE:
        return f"{where} resumes {f.call_id}, but {d.tool} is not a sub-agent"
    if f.decision == "rerun" and d.effect != "read_only":
        return f"{where} re-runs {f.call_id}, but its dispatch is {d.effect}, not read-only"
    if f.decision in ("applied", "rerun_not_applied") and not proven:
        return (
            f"{where} says {f.call_id} was {f.decision}, but its dispatch is not a provable write"
        )
    return None


def _decide(
    c: CallState, effects: Mapping[str, EffectClass], observed: Mapping[str, str | None]
) -> CallPlan:
    d = c.dispatch
    assert d is not None
    assert c.dispatch_seq is not None
    known = effects.get(c.name, "side_effecting")
    effect = known if _RANK[known] >= _RANK[d.effect] else d.effect
    decision: RecoveryDecision
    if d.tool in RESUMABLE:
        decision, reason = (
            "resume",
            "a sub-agent: its child session is continued, never started again",
        )
    elif effect == "read_only":
        decision, reason = "rerun", "read-only: re-run silently"
    elif effect == "provable_write" and d.path and d.after_sha256:
        now = observed.get(d.path)
        if now == (None if d.after_sha256 == DELETED else d.after_sha256):
            decision, reason = "applied", "the file has the intended content (hash verified)"
        elif now == d.before_sha256:
            decision, reason = (
                "rerun_not_applied",
                "the file is unchanged (hash verified), so the write is re-run",
            )
        else:
            decision, reason = (
                "interrupted",
                "the file matches neither the content before nor the intended content",
            )
    else:
        decision, reason = "interrupted", "a side effect that cannot be proven; never re-run"
    return CallPlan(
        call_id=c.call_id,
        tool=c.name,
        effect=effect,
        decision=decision,
        reason=reason,
        dispatch_seq=c.dispatch_seq,
        label=label(c.name, c.arguments),
    )


MODEL_CRASH_LOOP = 3
"""Deaths during model calls, back to back with no answer committed, that block a turn. A model
call has no side effect, so it is retried a few times (a killed machine, an OOM) before Bubu
stops and waits for a person."""


def plan_recovery(
    records: Sequence[Record],
    effects: Mapping[str, EffectClass],
    observed: Mapping[str, str | None],
    *,
    chain_problem: str | None = None,
    turn: TurnFold | None = None,
    integrity: Integrity | None = None,
) -> Plan:
    """The recovery plan for the prefix `records` (see the module docstring); `turn` is the
    fold of `records` when the caller has it (reloaded from a snapshot: the same plan), and
    `integrity` the `Integrity` of every record of the prefix when the caller streamed the log
    through it (then `records` is not read at all: pass none)."""
    t = turn if turn is not None else fold(records)
    if not t.open:
        return Plan(kind="nothing")
    if chain_problem is not None:
        return Plan(kind="blocked", turn=t.turn, reason=f"the log does not verify: {chain_problem}")
    problem = integrity.problem if integrity is not None else _integrity(records)
    if problem is not None:
        return Plan(kind="blocked", turn=t.turn, reason=problem)
    dangling = t.dangling
    for c in dangling:
        # A child crashing again is its own recovery's concern (its plan sees its crash loops).
        if c.recoveries and c.name not in RESUMABLE:
            return Plan(
                kind="blocked",
                turn=t.turn,
                reason=f"crash loop: {label(c.name, c.arguments)} was already recovered once "
                "and the process died again at the same call",
            )
    dropped = 1 if t.inflight_request is not None else 0
    if dropped and t.dropped_in_a_row + 1 >= MODEL_CRASH_LOOP:
        return Plan(
            kind="blocked",
            turn=t.turn,
            reason=f"crash loop: the process died during a model call {t.dropped_in_a_row + 1} "
            "times in a row, with no answer committed in between",
        )
    calls = tuple(_decide(c, effects, observed) for c in dangling)
    return Plan(kind="ready", turn=t.turn, calls=calls, dropped_model_calls=dropped)


FORCED = "the user forced the recovery past a block: never re-run"


def forced_plan(records: Sequence[Record], blocked: Plan, *, turn: TurnFold | None = None) -> Plan:
    """The plan `bubu recover --force` follows past `blocked`: the safe path for every dangling
    call (an interrupted result, nothing re-run), then the turn continues."""
    t = turn if turn is not None else fold(records)
    calls = tuple(
        CallPlan(
            call_id=c.call_id,
            tool=c.name,
            effect=c.dispatch.effect,
            decision="interrupted",
            reason=FORCED,
            dispatch_seq=c.dispatch_seq,
            label=label(c.name, c.arguments),
        )
        for c in t.dangling
        if c.dispatch is not None and c.dispatch_seq is not None
    )
    dropped = 1 if t.inflight_request is not None else 0
    return Plan(
        kind="ready",
        turn=t.turn,
        calls=calls,
        dropped_model_calls=dropped,
        reason=blocked.reason,
        forced=True,
    )
