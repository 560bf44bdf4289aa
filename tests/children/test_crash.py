"""A parent with two children in parallel, SIGKILLed; `bubu recover` finishes each child once.

Each child appends its mark to a counter file with run_command, then reports. Killed when the
first child's turn has ended (`after_turn_end@1`: that child finished, its parent never heard), or
when both children's commands have committed (`after_outcome@2`): recovery resumes the parent,
whose delegate calls continue the same children (or read a finished one's report back); no
child is started again and no command runs twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.engine.scope import session_facts
from bubu.events import TurnEnded, TurnStarted
from bubu.log.sqlite import SQLiteStore
from engine.cli import bubu

from .helpers import child_script, delegate, finished, notes, results, script


def _lay_out(root: Path) -> tuple[Path, Path, list[str]]:
    ws = root / "ws"
    ws.mkdir()
    counter = ws / "counter"
    # A sleeps after its mark: B ends first, while A's command is still running.
    a = child_script(root / "a.jsonl", "A", counter, sleep=0.8)
    b = child_script(root / "b.jsonl", "B", counter)
    parent = script(
        root / "parent.jsonl",
        [
            {"tool_calls": [delegate("do A", model=a), delegate("do B", model=b)]},
            {"text": "both done"},
        ],
    )
    args = ["run", "split it", "-w", str(ws), "-m", parent, "--sandbox", "off", "--yes"]
    return root / "bubu.db", counter, args


@pytest.mark.heavy
@pytest.mark.parametrize("failpoint", ["after_turn_end@1", "after_outcome@2"])
def test_recover_finishes_each_child_once_and_the_parent_gets_both(
    tmp_path: Path, failpoint: str
) -> None:
    db, counter, args = _lay_out(tmp_path)
    run = bubu(db, *args, failpoint=failpoint)
    assert run.returncode == -9, run.stdout + run.stderr
    rec = bubu(db, "recover", "--json")
    assert rec.returncode == 0, rec.stdout + rec.stderr

    marks = counter.read_text().split()
    if failpoint.startswith("after_outcome"):
        assert sorted(marks) == ["A", "B"]  # both commands had committed: each ran once
    else:
        # B had ended; A was inside its command, which on a loaded machine may not have written
        # its mark yet: then it was interrupted, never run again. Either way, at most once each.
        assert "B" in marks
        assert sorted(marks) in (["A", "B"], ["B"])
    with SQLiteStore(db) as store:
        sessions = store.sessions()
        assert len(sessions) == 3  # no child started twice
        (parent,) = [s for s in sessions if session_facts(store, s).parent is None]
        recs = store.read(parent.id)
        ends = notes(recs, TurnEnded)
        assert [e.reason for e in ends] == ["completed"]
        got = results(recs)
        assert len(got) == 2
        assert not any(g.is_error for g in got)
        assert sorted(g.result.splitlines()[-1] for g in got) == ["report of A", "report of B"]
        decisions = [
            a.tool_recovery for r in recs if (a := r.event.actions) is not None and a.tool_recovery
        ]
        assert decisions, "the parent's delegate calls were recovered"
        assert [d.decision for d in decisions] == ["resume"] * len(decisions)
        kids = {f.child for f in finished(recs)}
        assert len(kids) == 2
        for kid in kids:
            child = store.read(kid)
            assert len(notes(child, TurnStarted)) == 1, "a child's turn is never started again"
            assert [e.reason for e in notes(child, TurnEnded)] == ["completed"]
        if failpoint.startswith("after_turn_end"):
            assert any(f.read_back for f in finished(recs)), "the finished child was read back"
