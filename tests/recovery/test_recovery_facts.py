"""Recovery facts are checked like outcomes: a `tool_recovery` fact that names a call never made,
or contradicts the dispatch it claims to be decided from, makes the plan `blocked` with the reason,
so the notice can never report as applied what nothing proves."""

from __future__ import annotations

import pytest

from bubu.events import (
    Actions,
    Content,
    EffectClass,
    FunctionCall,
    FunctionResponse,
    Record,
    RecoveryDecision,
    Role,
    RunStarted,
    SystemNote,
    Text,
    ToolDispatch,
    ToolRecovery,
    TurnStarted,
    make,
)
from bubu.projections.recovery import plan_recovery

EFFECTS: dict[str, EffectClass] = {"run_command": "side_effecting", "write_file": "provable_write"}


def _log(*facts: ToolRecovery, answered: bool = False) -> list[Record]:
    """A turn with two dispatched calls and no outcomes (a crash), then `facts`."""
    out: list[Record] = []

    def add(role: Role, content: Content | None = None, actions: Actions | None = None) -> None:
        ev = make(
            session="s1",
            turn="t1",
            run="r1",
            invocation="i1",
            role=role,
            author="system",
            ts=1,
            content=content,
            actions=actions,
        )
        out.append(Record(seq=len(out) + 1, hash=f"{len(out) + 1:064x}", event=ev))

    add("system", SystemNote(note=TurnStarted(model="scripted:x")))
    add("system", SystemNote(note=RunStarted(cause="new")))
    add("user", Text(text="tidy the repository"))
    add("model", FunctionCall(call_id="c1", name="run_command", arguments={"command": "make"}))
    add("model", FunctionCall(call_id="c2", name="write_file", arguments={"path": "a.txt"}))
    add(
        "system",
        actions=Actions(
            tool_dispatch=ToolDispatch(
                call_id="c1", tool="run_command", effect="side_effecting", args_digest="d1"
            )
        ),
    )
    add(
        "system",
        actions=Actions(
            tool_dispatch=ToolDispatch(
                call_id="c2",
                tool="write_file",
                effect="provable_write",
                args_digest="d2",
                path="/w/a.txt",
                before_sha256=None,
                after_sha256="ab" * 32,
            )
        ),
    )
    for f in facts:
        add("system", actions=Actions(tool_recovery=f))
        if answered:
            add(
                "tool",
                FunctionResponse(
                    call_id=f.call_id, name=f.tool, result="interrupted: …", is_error=True
                ),
            )
    return out


def _fact(
    call: str = "c1",
    tool: str = "run_command",
    decision: RecoveryDecision = "interrupted",
    at: int = 6,
) -> ToolRecovery:
    return ToolRecovery(call_id=call, tool=tool, decision=decision, reason="r", dispatch_seq=at)


BAD = [
    ("ghost_call", _fact(call="ghost"), "names a call that was never made (ghost)"),
    ("wrong_dispatch", _fact(at=7), "names seq 7 as the dispatch of c1, which it is not"),
    ("no_dispatch", _fact(at=3), "names seq 3 as the dispatch of c1, which it is not"),
    ("wrong_tool", _fact(tool="read_file"), "says c1 was read_file, its dispatch says run_command"),
    (
        "applied_command",
        _fact(decision="applied"),
        "was applied, but its dispatch is not a provable write",
    ),
    ("rerun_command", _fact(decision="rerun"), "re-runs c1, but its dispatch is side_effecting"),
]


@pytest.mark.parametrize(("fact", "why"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_recovery_fact_that_does_not_match_the_log_blocks_the_plan(
    fact: ToolRecovery, why: str
) -> None:
    plan = plan_recovery(_log(fact), EFFECTS, {"/w/a.txt": None})
    assert plan.kind == "blocked"
    assert plan.reason is not None
    assert plan.reason.startswith("the recovery fact at seq 8 ")
    assert why in plan.reason


def test_facts_that_match_their_dispatch_leave_the_plan_ready() -> None:
    facts = (
        _fact(),
        _fact(call="c2", tool="write_file", decision="applied", at=7),
    )
    plan = plan_recovery(_log(*facts, answered=True), EFFECTS, {})
    assert plan.kind == "ready"
    assert plan.reason is None
