"""Budgets are shared down the tree: a child gets a share of what its parent has left, a child
over its budget reports "stopped: budget" and the parent goes on, and a child's spend counts in
its parent's turn."""

from __future__ import annotations

from pathlib import Path

from bubu import Agent
from bubu.engine.permissions import Policy
from bubu.engine.ports import RunConfig
from bubu.events import ChildStarted, Record, SystemNote, TurnStarted
from bubu.projections.longrun import fold_longrun

from .helpers import child_script, delegate, finished, notes, results, script


def test_a_child_over_its_budget_reports_stopped_budget_and_the_parent_goes_on(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    kid = child_script(tmp_path / "kid.jsonl", "K", ws / "counter")
    parent = script(
        tmp_path / "parent.jsonl",
        [{"tool_calls": [delegate("do K", model=kid, budget={"tokens": 1})]}, {"text": "went on"}],
    )
    with Agent(parent, store=tmp_path / "bubu.db", workspace=ws, policy=Policy(yes=True)) as agent:
        res = agent.run("try it")
        assert res.ok
        assert res.text == "went on"
        recs = agent.session(res.session).records()
        (got,) = results(recs)
        assert got.is_error
        assert "stopped: budget (the token limit of 1 was reached" in got.result
        (done,) = finished(recs)
        assert done.reason == "stopped"
        # Its first answer's call still ran; the limit stopped it before a second model call.
        assert (ws / "counter").read_text().split() == ["K"]
        assert "report of K" not in got.result


def test_children_share_what_the_parent_has_left_and_their_spend_counts_in_it(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    a = child_script(tmp_path / "a.jsonl", "A", ws / "counter")
    b = child_script(tmp_path / "b.jsonl", "B", ws / "counter")
    parent = script(
        tmp_path / "parent.jsonl",
        [{"tool_calls": [delegate("do A", model=a), delegate("do B", model=b)]}, {"text": "ok"}],
    )
    config = RunConfig(token_limit=1_000_000)
    with Agent(
        parent, store=tmp_path / "bubu.db", workspace=ws, policy=Policy(yes=True), config=config
    ) as agent:
        res = agent.run("split it")
        assert res.ok
        recs = agent.session(res.session).records()
        first_call = fold_longrun(recs[: _first_start(recs)]).tokens
        shares = set()
        spent = 0
        for f in finished(recs):
            (start,) = notes(agent.store.read(f.child), TurnStarted)
            shares.add(start.token_limit)
            spent += f.tokens
        assert shares == {(1_000_000 - first_call) // 2}
        parent_own = sum(
            act.token_usage.input_tokens + act.token_usage.output_tokens
            for r in recs
            if (act := r.event.actions) is not None and act.token_usage is not None
        )
        assert spent > 0
        assert fold_longrun(recs).tokens == parent_own + spent


def _first_start(recs: list[Record]) -> int:
    return next(
        i
        for i, r in enumerate(recs)
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, ChildStarted)
    )
