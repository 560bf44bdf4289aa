"""Recovery's checks of the whole prefix, held small enough for the runner's state snapshot:
`IdSet` is exact, and the bounded `Integrity` finds the same first problem as a check that
remembers every call and dispatch of the log (the reference below), for random logs of calls,
dispatches, outcomes and recovery facts — reused ids, forged outcomes and facts included. (A
recovery fact for a call whose outcomes have all come is a problem: recovery decides only for
calls still waiting.)"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bubu.events import (
    Actions,
    FunctionCall,
    FunctionResponse,
    Record,
    ToolDispatch,
    ToolRecovery,
    make,
)
from bubu.projections.idset import IdSet
from bubu.projections.recovery import Integrity


@pytest.fixture(scope="module")
def small_runs() -> Iterator[None]:
    """Runs of four keys, so that a few additions merge runs again and again."""
    before = IdSet.RECENT
    IdSet.RECENT = 4
    try:
        yield
    finally:
        IdSet.RECENT = before


@settings(max_examples=150, deadline=None)
@given(added=st.lists(st.text(max_size=6)), probes=st.lists(st.text(max_size=6)))
def test_an_id_set_answers_exactly_as_a_set_does(
    small_runs: None, added: list[str], probes: list[str]
) -> None:
    ids = IdSet()
    for i, ident in enumerate(added):
        ids.add(ident)
        assert all(x in ids for x in added[: i + 1])
    again = pickle.loads(pickle.dumps(ids))
    for probe in [*probes, *added]:
        assert (probe in ids) == (probe in set(added)), probe
        assert (probe in again) == (probe in set(added)), probe
    assert again.keys() == ids.keys()
    assert len(ids.keys()) == len(set(added))


class Reference:
    """The prefix check as it was when it remembered every call and dispatch of the log."""

    def __init__(self) -> None:
        self.problem: str | None = None
        self.calls: set[str] = set()
        self.dispatched: set[str] = set()
        self.answered: set[str] = set()
        self.made: dict[str, int] = {}
        self.outcomes: dict[str, int] = {}
        self.dispatches: dict[int, tuple[str, str, str, bool]] = {}

    def settled(self, cid: str) -> bool:
        """Every call of this id has its outcome: a recovery decision for it is made up."""
        return cid in self.answered and self.outcomes[cid] >= self.made.get(cid, 0)

    def apply(self, r: Record) -> None:
        if self.problem is not None:
            return
        c, a = r.event.content, r.event.actions
        if isinstance(c, FunctionCall):
            self.calls.add(c.call_id)
            self.made[c.call_id] = self.made.get(c.call_id, 0) + 1
        if a is not None and a.tool_dispatch is not None:
            d = a.tool_dispatch
            self.dispatched.add(d.call_id)
            proven = d.effect == "provable_write" and bool(d.path and d.after_sha256)
            self.dispatches[r.seq] = (d.call_id, d.tool, d.effect, proven)
        if a is not None and a.tool_recovery is not None:
            f, where = a.tool_recovery, f"the recovery fact at seq {r.seq}"
            named = self.dispatches.get(f.dispatch_seq)
            if f.call_id not in self.calls:
                self.problem = f"{where} names a call that was never made ({f.call_id})"
            elif named is None or named[0] != f.call_id or self.settled(f.call_id):
                self.problem = (
                    f"{where} names seq {f.dispatch_seq} as the dispatch of {f.call_id}, "
                    "which it is not"
                )
            if self.problem is not None:
                return
        if isinstance(c, FunctionResponse):
            cid = c.call_id
            if cid in self.answered and self.outcomes[cid] >= self.made.get(cid, 0):
                self.problem = f"two outcomes for the call {cid} (seq {r.seq})"
            elif cid not in self.calls:
                self.problem = f"an outcome for a call that was never made ({cid}, seq {r.seq})"
            elif not c.is_error and cid not in self.dispatched:
                self.problem = f"an outcome without a dispatch for the call {cid} (seq {r.seq})"
            else:
                self.answered.add(cid)
                self.outcomes[cid] = self.outcomes.get(cid, 0) + 1


STEP = st.tuples(
    st.sampled_from(["call", "dispatch", "ok", "error", "fact"]),
    st.sampled_from(["a", "b"]),
    st.integers(min_value=0, max_value=3),
)


def records(steps: Sequence[tuple[str, str, int]]) -> list[Record]:
    """A log of `steps`: what each is, the call id it names, and (for a recovery fact) how many
    records back the dispatch it names is."""
    out: list[Record] = []
    for seq, (what, cid, back) in enumerate(steps, 1):
        content: FunctionCall | FunctionResponse | None = None
        actions = None
        if what == "call":
            content = FunctionCall(call_id=cid, name="grep")
        elif what == "dispatch":
            d = ToolDispatch(call_id=cid, tool="grep", effect="read_only", args_digest="x")
            actions = Actions(tool_dispatch=d)
        elif what in ("ok", "error"):
            content = FunctionResponse(call_id=cid, name="grep", result="r", is_error=what != "ok")
        else:
            fact = ToolRecovery(
                call_id=cid, tool="grep", decision="rerun", reason="", dispatch_seq=seq - 1 - back
            )
            actions = Actions(tool_recovery=fact)
        ev = make(session="s", role="tool", author="tool", ts=1, content=content, actions=actions)
        out.append(Record(seq=seq, hash="", event=ev))
    return out


@settings(max_examples=600, deadline=None)
@given(steps=st.lists(STEP, max_size=30))
@example(steps=[("call", "a", 0), ("error", "a", 0), ("call", "a", 0), ("ok", "a", 0)])
@example(steps=[("call", "a", 0), ("dispatch", "a", 0), ("ok", "a", 0), ("fact", "a", 1)])
def test_the_bounded_check_finds_what_the_whole_log_check_finds(
    small_runs: None, steps: list[tuple[str, str, int]]
) -> None:
    ours, reference = Integrity(), Reference()
    for r in records(steps):
        ours.apply(r)
        reference.apply(r)
        assert ours.problem == reference.problem, steps[: r.seq]
        ours = pickle.loads(pickle.dumps(ours))  # what a snapshot stores and reloads


def test_answered_calls_leave_only_their_keys() -> None:
    check = Integrity()
    steps = [(what, f"call_{i}", 0) for i in range(5_000) for what in ("call", "dispatch", "ok")]
    for r in records(steps):
        check.apply(r)
    assert check.problem is None
    assert check._open == {}
    assert len(check._closed.keys()) == 5_000
    # An outcome for one of them again is still found, however old the call.
    (again,) = records([("ok", "call_7", 0)])
    check.apply(again)
    assert check.problem == "two outcomes for the call call_7 (seq 1)"
