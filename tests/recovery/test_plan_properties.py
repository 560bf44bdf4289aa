"""Hypothesis: every prefix of a valid log yields a recovery plan, and applying it pairs every call.

A small simulated engine writes the logs: turns of model responses with 0–3 calls of random tools
(every effect class, and an unknown tool the engine refuses), dispatches, outcomes, user stops and
resumes, and crashes at random points, each followed by a recovery that applies its plan the way
`bubu.engine.recovery` does (and may itself crash). The expected plan of each prefix is computed
here from the records alone, not through the fold the plan uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from bubu.engine.decide import CallModel, EndTurn, Idle, NeedsRecovery, RunTools, decide
from bubu.events import (
    Actions,
    Content,
    EffectClass,
    Event,
    FunctionCall,
    FunctionResponse,
    ModelRequestNote,
    Note,
    Record,
    RecoveryDecision,
    RecoveryNotice,
    Role,
    RunStarted,
    SystemNote,
    Text,
    TokenUsage,
    ToolDispatch,
    ToolRecovery,
    TurnEnded,
    TurnStarted,
    make,
)
from bubu.projections.context import fold_context
from bubu.projections.recovery import Plan, plan_recovery
from bubu.projections.turn import CallState, fold
from bubu.providers.base import AssistantMessage, ToolCallPart, ToolResultsMessage
from hypo import examples

EFFECTS: dict[str, EffectClass] = {
    "read_file": "read_only",
    "grep": "read_only",
    "write_file": "provable_write",
    "edit_file": "provable_write",
    "run_command": "side_effecting",
}
TOOLS = (*EFFECTS, "mystery")
"""`mystery` is a tool the engine does not know: refused with an error outcome, never dispatched."""


class _Crash(Exception):
    pass


class _Blocked(Exception):
    pass


@dataclass
class Sim:
    """Writes a valid log, drawing every choice from hypothesis."""

    data: st.DataObject
    crashes: int = 3
    records: list[Record] = field(default_factory=list)
    observed: dict[str, str | None] = field(default_factory=dict)
    n: int = 0
    run: str = ""

    def _id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def event(
        self,
        role: Role,
        content: Content | None = None,
        actions: Actions | None = None,
        *,
        turn: str | None = None,
        inv: str | None = None,
    ) -> Event:
        """An event of the current turn and run."""
        return make(
            id=self._id("e"),
            session="s",
            turn=turn or fold(self.records).turn,
            run=self.run,
            invocation=inv,
            role=role,
            author="system",
            ts=0,
            content=content,
            actions=actions,
        )

    def commit(self, *events: Event) -> None:
        """One append: the events get the next seqs."""
        for e in events:
            seq = len(self.records) + 1
            self.records.append(Record(seq=seq, hash=f"h{seq}", event=e))

    def maybe_crash(self) -> None:
        """The process may die here."""
        if self.crashes and self.data.draw(st.integers(0, 4)) == 0:
            self.crashes -= 1
            raise _Crash

    def note(self, note: Note, *, turn: str | None = None) -> Event:
        """A hidden system note."""
        return self.event("system", SystemNote(note=note), turn=turn)

    # -- the session -------------------------------------------------------------------------------

    def session(self) -> None:
        """Some turns, each driven to its end through crashes, stops and resumes."""
        try:
            for _ in range(self.data.draw(st.integers(1, 3))):
                turn = self._id("t")
                self.run = self._id("r")
                self.commit(
                    self.event("user", Text(text="task"), turn=turn),
                    self.note(TurnStarted(model="m"), turn=turn),
                    self.note(RunStarted(cause="new"), turn=turn),
                )
                self.drive()
        except _Blocked:
            return

    def drive(self) -> None:
        """Run the open turn to its end, recovering after every crash."""
        crashed = False
        while True:
            try:
                if crashed:
                    self.recover()
                self._steps()
                return
            except _Crash:
                crashed = True

    def _steps(self) -> None:
        while True:
            t = fold(self.records)
            match decide(t):
                case Idle():
                    if t.end_reason in ("stopped", "suspended") and self.data.draw(st.booleans()):
                        self.run = self._id("r")
                        self.commit(
                            self.note(TurnStarted(model="m")), self.note(RunStarted(cause="resume"))
                        )
                        continue
                    return
                case CallModel():
                    self.model_call(t.steps_in_run)
                case RunTools(calls=calls):
                    if self.data.draw(st.integers(0, 9)) == 0:
                        self.stop(list(calls))
                    else:
                        self.run_tools(list(calls))
                case EndTurn(reason=reason):
                    self.commit(self.note(TurnEnded(reason=reason)))
                case NeedsRecovery():
                    raise AssertionError("a crash is always recovered before the turn goes on")

    def model_call(self, steps: int) -> None:
        """Commit the request, then (unless the process dies first) the response."""
        self.commit(self.note(ModelRequestNote(model="m", request_digest="d", estimated_tokens=1)))
        self.maybe_crash()
        inv = self._id("i")
        names = [] if steps >= 3 else self.data.draw(st.lists(st.sampled_from(TOOLS), max_size=3))
        parts: list[Content] = [Text(text="thinking aloud")]
        parts += [
            FunctionCall(call_id=self._id("c"), name=name, arguments={"path": f"f{self.n}"})
            for name in names
        ]
        usage = Actions(
            token_usage=TokenUsage(model="m", input_tokens=1, output_tokens=1), end_invocation=True
        )
        events = [self.event("model", p, inv=inv) for p in parts[:-1]]
        events.append(self.event("model", parts[-1], usage, inv=inv))
        self.commit(*events)
        self.maybe_crash()

    def outcome(self, c: CallState, text: str, *, error: bool = False) -> Event:
        """The function_response of a call."""
        return self.event(
            "tool",
            FunctionResponse(call_id=c.call_id, name=c.name, result=text, is_error=error),
            inv=c.invocation,
        )

    def run_tools(self, calls: list[CallState]) -> None:
        """Refuse unknown tools, dispatch the rest in one append, then commit outcomes as they
        come."""
        refused = [c for c in calls if c.name not in EFFECTS and c.dispatch is None]
        if refused:
            self.commit(*(self.outcome(c, "unknown tool", error=True) for c in refused))
        ready = [c for c in calls if c.name in EFFECTS and c.dispatch is None]
        if ready:
            self.commit(*(self.dispatch(c) for c in ready))
            self.maybe_crash()
        pending = [c.call_id for c in fold(self.records).dangling]
        order = self.data.draw(st.permutations(pending))
        for cid in order:
            c = fold(self.records).calls[cid]
            self.commit(self.outcome(c, f"result of {cid}"))
            self.maybe_crash()

    def dispatch(self, c: CallState) -> Event:
        """The dispatch fact; a write records its path and the hashes before and after."""
        effect = EFFECTS[c.name]
        path = f"/ws/{c.call_id}" if effect == "provable_write" else None
        if path is not None:
            self.observed[path] = self.data.draw(
                st.sampled_from([f"before-{c.call_id}", f"after-{c.call_id}", "other"])
            )
        d = ToolDispatch(
            call_id=c.call_id,
            tool=c.name,
            effect=effect,
            args_digest="a",
            path=path,
            before_sha256=None if path is None else f"before-{c.call_id}",
            after_sha256=None if path is None else f"after-{c.call_id}",
        )
        return self.event("system", actions=Actions(tool_dispatch=d), inv=c.invocation)

    def stop(self, calls: list[CallState]) -> None:
        """The user stops the turn: every unanswered call gets an error outcome, then the end."""
        t = fold(self.records)
        open_calls = [t.calls[c] for c in t.open_calls]
        self.commit(
            *(self.outcome(c, "stopped", error=True) for c in open_calls),
            self.note(TurnEnded(reason="stopped")),
        )
        assert {c.call_id for c in calls} <= {c.call_id for c in open_calls}

    # -- recovery, as bubu.engine.recovery applies a plan ------------------------------------------

    def recover(self) -> None:
        """A new process recovers the open turn (and may die while doing it)."""
        t = fold(self.records)
        if not t.open:
            return
        self.run = self._id("r")
        self.commit(self.note(RunStarted(cause="recovery")))
        plan = plan_recovery(self.records, EFFECTS, self.observed)
        if plan.kind == "blocked":
            self.commit(self.note(RecoveryNotice(status="blocked", reason=plan.reason)))
            raise _Blocked
        settled: list[Event] = []
        reruns = []
        for cp in plan.calls:
            c = t.calls[cp.call_id]
            settled.append(
                self.event(
                    "system",
                    actions=Actions(
                        tool_recovery=ToolRecovery(
                            call_id=cp.call_id,
                            tool=cp.tool,
                            decision=cp.decision,
                            reason=cp.reason,
                            dispatch_seq=cp.dispatch_seq,
                        )
                    ),
                    inv=c.invocation,
                )
            )
            if cp.decision in ("applied", "interrupted"):
                settled.append(self.outcome(c, cp.decision, error=cp.decision == "interrupted"))
            else:
                reruns.append(c)
        if settled:
            self.commit(*settled)
        self.maybe_crash()
        for c in reruns:
            self.commit(self.outcome(c, "re-run result"))
            self.maybe_crash()
        self.commit(self.note(RecoveryNotice(status="ready")))


# ---- what a plan must say, computed from the records alone ---------------------------------------


@dataclass(frozen=True, slots=True)
class Expected:
    kind: str
    dangling: frozenset[str] = frozenset()


def expected(prefix: Sequence[Record]) -> Expected:
    """The plan's kind and dangling calls for a valid prefix."""
    open_turn: str | None = None
    for r in prefix:
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, TurnStarted):
            open_turn = r.event.turn
        elif isinstance(c, SystemNote) and isinstance(c.note, TurnEnded):
            open_turn = None
    if open_turn is None:
        return Expected("nothing")
    made = {
        c.call_id
        for r in prefix
        if r.event.turn == open_turn and isinstance(c := r.event.content, FunctionCall)
    }
    answered = {c.call_id for r in prefix if isinstance(c := r.event.content, FunctionResponse)}
    acts = [r.event.actions for r in prefix if r.event.actions is not None]
    dispatched = {a.tool_dispatch.call_id for a in acts if a.tool_dispatch is not None}
    recovered = {a.tool_recovery.call_id for a in acts if a.tool_recovery is not None}
    dangling = frozenset((made & dispatched) - answered)
    return Expected("blocked" if dangling & recovered else "ready", dangling)


def decision_for(
    prefix: Sequence[Record], call_id: str, observed: dict[str, str | None]
) -> RecoveryDecision:
    """What the plan must decide for a dangling call."""
    d = next(
        a.tool_dispatch
        for r in prefix
        if (a := r.event.actions) and a.tool_dispatch and a.tool_dispatch.call_id == call_id
    )
    if d.effect == "read_only":
        return "rerun"
    if d.effect == "provable_write":
        assert d.path is not None
        now = observed[d.path]
        return (
            "applied"
            if now == d.after_sha256
            else "rerun_not_applied"
            if now == d.before_sha256
            else "interrupted"
        )
    return "interrupted"


def apply(prefix: Sequence[Record], plan: Plan) -> list[Record]:
    """The prefix plus, for each planned call, its recovery fact and an outcome."""
    out = list(prefix)
    t = fold(prefix)
    for cp in plan.calls:
        c = t.calls[cp.call_id]
        for content, actions in (
            (
                None,
                Actions(
                    tool_recovery=ToolRecovery(
                        call_id=cp.call_id,
                        tool=cp.tool,
                        decision=cp.decision,
                        reason=cp.reason,
                        dispatch_seq=cp.dispatch_seq,
                    )
                ),
            ),
            (
                FunctionResponse(
                    call_id=c.call_id,
                    name=c.name,
                    result=cp.decision,
                    is_error=cp.decision == "interrupted",
                ),
                None,
            ),
        ):
            seq = len(out) + 1
            ev = make(
                id=f"x{seq}",
                session="s",
                turn=t.turn,
                run="rx",
                invocation=c.invocation,
                role="tool" if content else "system",
                author="system",
                ts=0,
                content=content,
                actions=actions,
            )
            out.append(Record(seq=seq, hash=f"x{seq}", event=ev))
    return out


def assert_pairs(records: Sequence[Record]) -> None:
    """Every call the model sees is followed at once by exactly its results, in order."""
    messages = fold_context(records).messages()
    for i, m in enumerate(messages):
        if isinstance(m, AssistantMessage):
            ids = [p.call_id for p in m.parts if isinstance(p, ToolCallPart)]
            if ids:
                nxt = messages[i + 1]
                assert isinstance(nxt, ToolResultsMessage)
                assert [r.call_id for r in nxt.results] == ids
        elif isinstance(m, ToolResultsMessage):
            prev = messages[i - 1]
            assert isinstance(prev, AssistantMessage)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_prefix_yields_a_plan_and_applying_it_pairs_every_call(data: st.DataObject) -> None:
    sim = Sim(data)
    sim.session()
    records = sim.records
    for n in range(len(records) + 1):
        prefix = records[:n]
        plan = plan_recovery(prefix, EFFECTS, sim.observed)
        want = expected(prefix)
        assert plan.kind == want.kind, (n, plan.reason)
        event(f"plan {plan.kind}" + (f" with {len(plan.calls)} calls" if plan.calls else ""))
        for cp in plan.calls:
            event(f"decision {cp.decision}")
        if plan.kind == "blocked":
            assert plan.reason is not None
            assert "crash loop" in plan.reason
            continue
        assert {c.call_id for c in plan.calls} == want.dangling, (
            "every dangling call of a batch is planned"
        )
        for cp in plan.calls:
            assert cp.decision == decision_for(prefix, cp.call_id, sim.observed)
            assert cp.effect == EFFECTS.get(cp.tool, "side_effecting")
        if plan.kind == "nothing":
            continue
        after = apply(prefix, plan)
        assert fold(after).dangling == []
        assert_pairs(after)
        replanned = plan_recovery(after, EFFECTS, sim.observed)
        assert (replanned.kind, replanned.calls) == ("ready", ()), (
            "an applied plan leaves nothing to recover"
        )


TAMPERINGS = ("duplicate outcome", "outcome without dispatch", "outcome of a call never made")


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(TAMPERINGS))
def test_a_tampered_prefix_is_blocked(data: st.DataObject, tampering: str) -> None:
    sim = Sim(data)
    sim.session()
    records = sim.records
    cuts = [n for n in range(1, len(records) + 1) if expected(records[:n]).kind == "ready"]
    assume(cuts)
    prefix = records[: data.draw(st.sampled_from(cuts))]
    t = fold(prefix)
    answered = [r.event for r in prefix if isinstance(r.event.content, FunctionResponse)]
    extra: list[Event]
    if tampering == "duplicate outcome":
        assume(answered)
        copy = data.draw(st.sampled_from(answered))
        extra = [
            make(
                id="dup",
                session="s",
                turn=t.turn,
                role="tool",
                author="tool",
                ts=0,
                content=copy.content,
            )
        ]
    elif tampering == "outcome without dispatch":
        extra = [
            make(
                id="m1",
                session="s",
                turn=t.turn,
                invocation="ix",
                role="model",
                author="agent",
                ts=0,
                content=FunctionCall(call_id="forged", name="run_command", arguments={}),
            ),
            make(
                id="m2",
                session="s",
                turn=t.turn,
                role="tool",
                author="tool",
                ts=0,
                content=FunctionResponse(call_id="forged", name="run_command", result="ok"),
            ),
        ]
    else:
        extra = [
            make(
                id="g",
                session="s",
                turn=t.turn,
                role="tool",
                author="tool",
                ts=0,
                content=FunctionResponse(call_id="ghost", name="read_file", result="boo"),
            )
        ]
    tampered = [
        *prefix,
        *(Record(seq=len(prefix) + i, hash="t", event=e) for i, e in enumerate(extra, start=1)),
    ]
    plan = plan_recovery(tampered, EFFECTS, sim.observed)
    assert plan.kind == "blocked"
    assert plan.reason
    assert plan.calls == ()


def test_a_broken_chain_is_blocked() -> None:
    r = Record(
        seq=1,
        hash="h",
        event=make(
            id="e",
            session="s",
            turn="t",
            role="system",
            author="system",
            ts=0,
            content=SystemNote(note=TurnStarted(model="m")),
        ),
    )
    plan = plan_recovery([r], EFFECTS, {}, chain_problem="seq 1 hash mismatch")
    assert plan.kind == "blocked"
    assert plan.reason is not None
    assert "seq 1 hash mismatch" in plan.reason
    assert plan_recovery([], EFFECTS, {}).kind == "nothing"
