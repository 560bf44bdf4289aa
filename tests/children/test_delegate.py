"""Sub-agents in one process: children run in parallel, report back, are linked both ways."""

from __future__ import annotations

from pathlib import Path

from bubu import Agent
from bubu.engine.children import child_id
from bubu.engine.permissions import Policy
from bubu.engine.scope import session_facts
from bubu.events import Text

from .helpers import child_script, delegate, finished, results, script, started


def test_two_children_run_in_parallel_and_report_to_the_parent(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    counter = ws / "counter"
    a = child_script(tmp_path / "a.jsonl", "A", counter)
    b = child_script(tmp_path / "b.jsonl", "B", counter)
    parent = script(
        tmp_path / "parent.jsonl",
        [
            {"tool_calls": [delegate("do A", model=a), delegate("do B", model=b)]},
            {"text": "both done"},
        ],
    )
    with Agent(parent, store=tmp_path / "bubu.db", workspace=ws, policy=Policy(yes=True)) as agent:
        res = agent.run("split the work")
        assert res.ok, res
        recs = agent.session(res.session).records()
        got = results(recs)
        assert [g.is_error for g in got] == [False, False]
        assert sorted(g.result.splitlines()[-1] for g in got) == ["report of A", "report of B"]
        assert sorted(counter.read_text().split()) == ["A", "B"]
        kids = {s.child for s in started(recs)}
        assert kids == {child_id(res.session, s.call_id) for s in started(recs)}
        assert {f.child for f in finished(recs)} == kids
        assert all(f.reason == "completed" and f.tokens > 0 for f in finished(recs))
        for kid in kids:
            facts = session_facts(agent.store, agent.store.session(kid))
            assert facts.parent == res.session
            assert facts.parent_call in {s.call_id for s in started(recs)}


def test_the_status_line_lists_the_running_children(tmp_path: Path) -> None:
    import io

    from bubu.cli.render import TerminalObserver
    from bubu.events import ChildFinished, SystemNote

    ws = tmp_path / "ws"
    ws.mkdir()
    a = child_script(tmp_path / "a.jsonl", "A", ws / "counter")
    b = child_script(tmp_path / "b.jsonl", "B", ws / "counter")
    parent = script(
        tmp_path / "parent.jsonl",
        [{"tool_calls": [delegate("do A", model=a), delegate("do B", model=b)]}, {"text": "ok"}],
    )
    with Agent(parent, store=tmp_path / "bubu.db", workspace=ws, policy=Policy(yes=True)) as agent:
        recs = agent.session(agent.run("split").session).records()
    first_end = next(
        i
        for i, r in enumerate(recs)
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, ChildFinished)
    )
    out = io.StringIO()
    view = TerminalObserver(out)
    view.on_records(recs[:first_end])
    assert " · 2 sub-agents running (ses_" in view.status_text()
    view.on_records(recs[first_end:])
    assert "sub-agent" not in view.status_text()
    assert out.getvalue().count("↳ ") == 2
    view.close()


def test_children_editing_one_file_at_once_lose_no_edit(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("alpha\nbeta\n")
    specs = {}
    for old, new in (("alpha", "ALPHA"), ("beta", "BETA")):
        edit = {"name": "edit_file", "arguments": {"path": "f.txt", "old": old, "new": new}}
        specs[new] = script(tmp_path / f"{new}.jsonl", [{"tool_calls": [edit]}, {"text": new}])
    parent = script(
        tmp_path / "parent.jsonl",
        [{"tool_calls": [delegate(n, model=m) for n, m in specs.items()]}, {"text": "ok"}],
    )
    with Agent(parent, store=tmp_path / "bubu.db", workspace=ws, policy=Policy(yes=True)) as agent:
        res = agent.run("edit together")
        assert res.ok
        text = (ws / "f.txt").read_text()
        kids = finished(agent.session(res.session).records())
        assert len(kids) == 2
        for f in kids:
            child = agent.store.read(f.child)
            (outcome,) = results(child, "edit_file")
            word = next(c.text for r in child if isinstance(c := r.event.content, Text))
            # A write lands only on the content it was prepared against: an edit that succeeded
            # is in the file; one that lost the race says so and changed nothing.
            assert (word in text) == (not outcome.is_error), (word, outcome.result, text)


def test_continue_here_picks_the_conversation_not_a_sub_agent(tmp_path: Path) -> None:
    from bubu.cli.agentcmds import latest_here

    ws = tmp_path / "ws"
    ws.mkdir()
    kid = child_script(tmp_path / "k.jsonl", "K", ws / "counter")
    parent = script(tmp_path / "p.jsonl", [{"tool_calls": [delegate("k", model=kid)]}])
    with Agent(parent, store=tmp_path / "bubu.db", workspace=ws, policy=Policy(yes=True)) as agent:
        res = agent.run("go")
        assert len(agent.sessions()) == 2  # the child is the newest
        assert latest_here(agent.store, str(ws)).id == res.session
