"""The recovery plan of a dangling delegate call is `resume` (pure), and a `resume` fact for any
other tool makes the log untrustworthy."""

from __future__ import annotations

from bubu.events import (
    Actions,
    Content,
    FunctionCall,
    Record,
    SystemNote,
    Text,
    ToolDispatch,
    ToolRecovery,
    TurnStarted,
    make,
)
from bubu.projections.recovery import plan_recovery


def _log(tool: str, *, recovered: str | None = None) -> list[Record]:
    def ev(role: str, content: Content | None = None, actions: Actions | None = None) -> Record:
        e = make(
            session="ses_p",
            turn="trn_1",
            role=role,  # type: ignore[arg-type]
            author="system",
            ts=1,
            content=content,
            actions=actions,
            invocation="inv_1",
        )
        return Record(seq=len(out) + 1, hash="", event=e)

    out: list[Record] = []
    out.append(ev("user", Text(text="go")))
    out.append(ev("system", SystemNote(note=TurnStarted(model="scripted:x"))))
    out.append(ev("model", FunctionCall(call_id="c1", name=tool, arguments={"task": "t"})))
    dispatch = ToolDispatch(call_id="c1", tool=tool, effect="side_effecting", args_digest="d")
    out.append(ev("system", actions=Actions(tool_dispatch=dispatch)))
    if recovered is not None:
        fact = ToolRecovery(call_id="c1", tool=tool, decision=recovered, reason="r", dispatch_seq=4)  # type: ignore[arg-type]
        out.append(ev("system", actions=Actions(tool_recovery=fact)))
    return out


def test_a_dangling_delegate_call_is_resumed_even_after_an_earlier_recovery() -> None:
    effects = {"delegate": "side_effecting", "run_command": "side_effecting"}
    plan = plan_recovery(_log("delegate"), effects, {})  # type: ignore[arg-type]
    assert plan.kind == "ready"
    (call,) = plan.calls
    assert call.decision == "resume"
    again = plan_recovery(_log("delegate", recovered="resume"), effects, {})  # type: ignore[arg-type]
    assert again.kind == "ready", "a child crashing again is its own recovery's concern"
    command = plan_recovery(_log("run_command"), effects, {})  # type: ignore[arg-type]
    assert command.calls[0].decision == "interrupted"


def test_a_resume_fact_for_another_tool_blocks() -> None:
    effects = {"run_command": "side_effecting"}
    plan = plan_recovery(_log("run_command", recovered="resume"), effects, {})  # type: ignore[arg-type]
    assert plan.kind == "blocked"
    assert plan.reason is not None
    assert "run_command is not a sub-agent" in plan.reason
