"""Recovery streams the committed prefix through its checks a chunk at a time instead of decoding
the whole log into memory: at every crash point of sessions with several turns, the streamed
answers — the integrity checks, an unfinished rewind, the snapshot before each dangling dispatch —
and so the plan (blocked, ready or forced) are exactly those computed from the whole log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bubu.engine.driver import RunConfig
from bubu.engine.permissions import Policy
from bubu.engine.recovery import scan_prefix
from bubu.engine.rewind import unfinished
from bubu.engine.session import Host, new_session, start_turn
from bubu.events import (
    Actions,
    Content,
    EffectClass,
    Event,
    FunctionCall,
    FunctionResponse,
    Record,
    Role,
    SystemNote,
    ToolDispatch,
    ToolRecovery,
    TurnStarted,
    make,
)
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store
from bubu.projections.recovery import forced_plan, plan_recovery
from bubu.projections.turn import fold
from bubu.providers.scripted import ScriptedProvider
from bubu.snapshot import refs
from bubu.tools import builtin_tools

EFFECTS: dict[str, EffectClass] = {
    "read_file": "read_only",
    "write_file": "provable_write",
    "run_command": "side_effecting",
}
TURNS = 3


def _session(tmp_path: Path) -> tuple[SQLiteStore, str]:
    """A real session of `TURNS` turns, each reading, writing and running a command."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    lines: list[dict[str, object]] = []
    for t in range(TURNS):
        lines += [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": f"t{t}.txt", "content": f"{t}\n"}},
                    {"name": "run_command", "arguments": {"command": f"echo {t} > c{t}.txt"}},
                ]
            },
            {"text": f"turn {t} done"},
        ]
    script = tmp_path / "s.jsonl"
    script.write_text("".join(json.dumps(x) + "\n" for x in lines))
    store = SQLiteStore(tmp_path / "bubu.db")
    provider = ScriptedProvider(str(script))
    info = new_session(store, task="work", workspace=ws, model=provider.spec)
    host = Host(
        store=store,
        provider=provider,
        tools=builtin_tools(),
        policy=Policy(yes=True, sandbox="off"),
        config=RunConfig(loop_limit=None),
    )
    for t in range(TURNS):
        assert start_turn(host, info, f"turn {t}") == "completed"
    return store, info.id


def _same_at_every_crash_point(store: Store, session: str, chunk: int) -> int:
    """Compare the streamed prefix with the whole one at every prefix end; returns how many
    prefixes had dangling calls (so a test can tell it saw crashes mid-call)."""
    records = store.read(session)
    mid_call = 0
    for end in range(1, len(records) + 1):
        prefix = records[:end]
        turn = fold(prefix)
        seqs = [c.dispatch_seq for c in turn.dangling if c.dispatch_seq is not None]
        mid_call += bool(seqs)
        # Every dispatch seq of the log, not only the dangling ones: each snapshot lookup agrees.
        every = [r.seq for r in prefix if r.event.actions and r.event.actions.tool_dispatch]
        streamed = scan_prefix(store, session, end, [*seqs, *every], chunk=chunk)
        whole = plan_recovery(prefix, EFFECTS, {})
        assert plan_recovery((), EFFECTS, {}, turn=turn, integrity=streamed.integrity) == whole
        observed = {"t0.txt": None, "t1.txt": "x"}
        assert plan_recovery(
            (), EFFECTS, observed, turn=turn, integrity=streamed.integrity
        ) == plan_recovery(prefix, EFFECTS, observed)
        if whole.kind == "blocked":
            assert forced_plan((), whole, turn=turn) == forced_plan(prefix, whole)
        assert streamed.rewinding == unfinished(prefix)
        for s in [*seqs, *every]:
            assert streamed.snapshots[s] == refs.snapshot_before(prefix, s)
    return mid_call


@pytest.mark.parametrize("chunk", [1, 7, 2_000])
def test_the_streamed_prefix_plans_as_the_whole_log_at_every_crash_point(
    tmp_path: Path, chunk: int
) -> None:
    store, session = _session(tmp_path)
    with store:
        assert _same_at_every_crash_point(store, session, chunk) > 0
        # The snapshots it compared were real ones (writes and commands snapshot the workspace).
        assert any(refs.snapshot_of(r) is not None for r in store.read(session))


def test_a_problem_in_an_earlier_turn_still_blocks_a_later_turns_recovery(
    tmp_path: Path,
) -> None:
    """A second outcome for a call of the first turn, then a crash in a later turn: the streamed
    checks see the old problem exactly as the whole log does."""
    store, session = _session(tmp_path)
    with store:
        records = store.read(session)
        first = next(
            r for r in records if isinstance(r.event.content, FunctionResponse)
        ).event.content
        assert isinstance(first, FunctionResponse)
        head = store.head(session).high_water
        forged = make(
            session=session,
            turn=records[-1].event.turn,
            run=records[-1].event.run,
            role="tool",
            author="tool",
            ts=1,
            content=FunctionResponse(
                call_id=first.call_id, name=first.name, result="again", is_error=False
            ),
        )
        store.append(session, [forged], expect=head)
        _extend_with_crash(store, session, records)
        whole = store.read(session)
        plan = plan_recovery(whole, EFFECTS, {})
        assert plan.kind == "blocked"
        assert plan.reason is not None
        assert "two outcomes" in plan.reason
        _same_at_every_crash_point(store, session, chunk=5)


def _extend_with_crash(store: Store, session: str, records: list[Record]) -> int:
    """A new turn whose command was dispatched, recovered once as interrupted and dispatched
    again with no outcome (a crash loop): a recovery fact checked against the dispatch before."""
    run = records[-1].event.run

    def ev(role: Role, content: Content | None = None, actions: Actions | None = None) -> Event:
        return make(
            session=session,
            turn="turn-late",
            run=run,
            role=role,
            author="system",
            ts=1,
            content=content,
            actions=actions,
        )

    head = store.head(session).high_water
    d = ToolDispatch(call_id="late-1", tool="run_command", effect="side_effecting", args_digest="d")
    store.append(
        session,
        [
            ev("system", SystemNote(note=TurnStarted(model="scripted:x"))),
            ev("model", FunctionCall(call_id="late-1", name="run_command", arguments={})),
            ev("system", actions=Actions(tool_dispatch=d)),
        ],
        expect=head,
    )
    fact = ToolRecovery(
        call_id="late-1",
        tool="run_command",
        decision="interrupted",
        reason="x",
        dispatch_seq=head + 3,
    )
    store.append(session, [ev("system", actions=Actions(tool_recovery=fact))], expect=head + 3)
    return head + 3
