"""The engine's pure step: `decide` on hand-built folds, the context projection's pairing of calls
with results, and the purity of both (no I/O imports)."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterable
from pathlib import Path

import pytest

from bubu.engine.decide import CallModel, EndTurn, Idle, NeedsRecovery, RunTools, decide
from bubu.engine.session import new_session, start_turn
from bubu.events import (
    Content,
    Event,
    FunctionCall,
    FunctionResponse,
    Record,
    Role,
    Text,
    ToolDispatch,
    make,
)
from bubu.log.sqlite import SQLiteStore
from bubu.projections.context import fold_context
from bubu.projections.turn import CallState, TurnFold, fold
from bubu.providers.base import AssistantMessage, Message, ToolCallPart, ToolResultsMessage

from .helpers import call, make_host, scripted, write_script


def _call(cid: str, *, dispatched_in: str | None = None, answered: bool = False) -> CallState:
    state = CallState(
        call_id=cid,
        name="read_file",
        arguments={"path": "a"},
        raw_arguments=None,
        call_seq=5,
        invocation="i1",
    )
    if dispatched_in is not None:
        state.dispatch = ToolDispatch(
            call_id=cid, tool="read_file", effect="read_only", args_digest="d"
        )
        state.dispatch_seq, state.dispatch_run = 6, dispatched_in
    if answered:
        state.outcome_seq = 7
    return state


def _fold(
    *calls: CallState, awaiting: bool = False, steps: int = 1, max_steps: int | None = None
) -> TurnFold:
    t = TurnFold(turn="t1", open=True, run="r2", runs=2, steps_in_run=steps, max_steps=max_steps)
    t.awaiting_model = awaiting
    t.calls = {c.call_id: c for c in calls}
    t.open_calls = [c.call_id for c in calls if c.outcome_seq is None]
    return t


def test_no_open_turn_is_idle() -> None:
    assert decide(TurnFold()) == Idle()
    ended = TurnFold(turn="t1", open=False, end_reason="completed")
    assert decide(ended) == Idle()


def test_a_fresh_turn_calls_the_model() -> None:
    assert decide(_fold(awaiting=True, steps=0)) == CallModel()


def test_calls_of_the_last_response_are_run() -> None:
    a, b = _call("a"), _call("b")
    assert decide(_fold(a, b)) == RunTools((a, b))


def test_calls_running_in_this_run_are_waited_for() -> None:
    running = _call("a", dispatched_in="r2")
    assert decide(_fold(running)) == RunTools(())


def test_calls_dispatched_by_an_earlier_run_need_recovery() -> None:
    stale, fresh = _call("a", dispatched_in="r1"), _call("b")
    step = decide(_fold(stale, fresh))
    assert step == NeedsRecovery((stale,)), "recovery comes before anything else"


def test_all_results_in_and_nothing_asked_ends_the_turn() -> None:
    assert decide(_fold(_call("a", dispatched_in="r2", answered=True))) == EndTurn("completed")


def test_the_step_limit_stops_the_turn() -> None:
    step = decide(_fold(awaiting=True, steps=3, max_steps=3))
    assert isinstance(step, EndTurn)
    assert (step.reason, step.step_limit) == ("stopped", 3)
    assert step.message is not None
    assert "bubu resume" in step.message
    assert decide(_fold(awaiting=True, steps=2, max_steps=3)) == CallModel()


def test_the_callers_limit_overrides_the_recorded_one() -> None:
    t = _fold(awaiting=True, steps=3, max_steps=3)
    assert decide(t, max_steps=10) == CallModel()
    limited = decide(_fold(awaiting=True, steps=1), max_steps=1)
    assert isinstance(limited, EndTurn)
    assert limited.step_limit == 1


def test_decide_does_not_change_the_fold() -> None:
    t = _fold(_call("a"), _call("b", dispatched_in="r1"), awaiting=True)
    before = t.copy()
    decide(t)
    assert t == before


# ---- the context projection -------------------------------------------------------------------


def _ev(content: Content, *, role: Role, inv: str | None = None) -> Event:
    return make(
        session="s",
        turn="t",
        run="r",
        invocation=inv,
        role=role,
        author="agent",
        ts=0,
        content=content,
    )


def _records(events: Iterable[Event]) -> list[Record]:
    return [Record(seq=i, hash=f"h{i}", event=e) for i, e in enumerate(events, start=1)]


def _assert_paired(messages: tuple[Message, ...]) -> None:
    for i, m in enumerate(messages):
        if not isinstance(m, AssistantMessage):
            continue
        ids = [p.call_id for p in m.parts if isinstance(p, ToolCallPart)]
        if not ids:
            continue
        nxt = messages[i + 1] if i + 1 < len(messages) else None
        assert isinstance(nxt, ToolResultsMessage), f"calls {ids} have no results after them"
        assert [r.call_id for r in nxt.results] == ids


def test_a_call_without_a_committed_result_is_left_out() -> None:
    records = _records(
        [
            _ev(Text(text="task"), role="user"),
            _ev(Text(text="three at once"), role="model", inv="i1"),
            *[
                _ev(
                    FunctionCall(call_id=c, name="read_file", arguments={"path": c}),
                    role="model",
                    inv="i1",
                )
                for c in "abc"
            ],
            _ev(FunctionResponse(call_id="b", name="read_file", result="B"), role="tool", inv="i1"),
            _ev(FunctionResponse(call_id="a", name="read_file", result="A"), role="tool", inv="i1"),
        ]
    )
    messages = fold_context(records).messages()
    _assert_paired(messages)
    (assistant,) = [m for m in messages if isinstance(m, AssistantMessage)]
    assert [p.call_id for p in assistant.parts if isinstance(p, ToolCallPart)] == ["a", "b"]
    (results,) = [m for m in messages if isinstance(m, ToolResultsMessage)]
    assert [r.content for r in results.results] == ["A", "B"], "results follow call order"


def test_a_second_outcome_for_a_call_is_not_shown_twice() -> None:
    records = _records(
        [
            _ev(Text(text="task"), role="user"),
            _ev(FunctionCall(call_id="a", name="read_file", arguments={}), role="model", inv="i1"),
            _ev(FunctionResponse(call_id="a", name="read_file", result="first"), role="tool"),
            _ev(FunctionResponse(call_id="a", name="read_file", result="second"), role="tool"),
        ]
    )
    (results,) = [m for m in fold_context(records).messages() if isinstance(m, ToolResultsMessage)]
    assert [r.content for r in results.results] == ["first"]


def test_every_prefix_of_a_real_turn_pairs_its_calls(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    batch = [call("read_file", path="a.txt"), call("list_files"), call("frobnicate")]
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": batch},
            {"text": "more", "tool_calls": [call("grep", pattern="a")]},
            {"text": "ok"},
        ],
    )
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    assert start_turn(make_host(sqlite_store, provider), info, "t") == "completed"
    records = sqlite_store.read(info.id)
    for n in range(len(records) + 1):
        prefix = records[:n]
        messages = fold_context(prefix).messages()
        _assert_paired(messages)
        answered = {c.call_id for r in prefix if isinstance(c := r.event.content, FunctionResponse)}
        shown = {
            p.call_id
            for m in messages
            if isinstance(m, AssistantMessage)
            for p in m.parts
            if isinstance(p, ToolCallPart)
        }
        assert shown == answered
    # The folds are incremental: folding in two halves equals folding at once.
    half = len(records) // 2
    assert fold(records[half:], fold(records[:half])) == fold(records)


# ---- purity ------------------------------------------------------------------------------------

FORBIDDEN = (
    "sqlite3",
    "subprocess",
    "httpx",
    "socket",
    "threading",
    "time",
    "os",
    "psycopg",
    "bubu.clock",
    "bubu.log",
    "bubu.tools",
    "bubu.engine.driver",
    "bubu.providers.openai",
    "bubu.providers.anthropic",
    "bubu.providers.scripted",
)

PURE = (
    "bubu.engine.decide",
    "bubu.projections.turn",
    "bubu.projections.recovery",
    "bubu.projections.status",
    "bubu.projections.transcript",
    "bubu.projections.context",
)


def _imports(module: str) -> set[str]:
    source = importlib.import_module(module).__file__
    assert source is not None
    tree = ast.parse(Path(source).read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", PURE)
def test_the_decision_and_projections_do_no_io(module: str) -> None:
    bad = {n for n in _imports(module) if any(n == f or n.startswith(f + ".") for f in FORBIDDEN)}
    assert bad == set(), f"{module} imports {sorted(bad)}"
