"""Plan mode: a planning turn offers only read-only tools and refuses, unasked, whatever may change
something (even a tool it did not offer); the session plans until its plan is approved, and the
approval is an event after which the same session acts."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bubu.engine.permissions import Policy
from bubu.engine.session import APPROVED, new_session, start_turn
from bubu.errors import ConfigError
from bubu.events import PlanApproved, SystemNote, TurnStarted
from bubu.log.sqlite import SQLiteStore

from .cli import bubu, bubu_json, only_session
from .helpers import FAST, call, make_host, outcomes, scripted, write_script

PLAN = [{"text": "read the code", "status": "completed"}, {"text": "fix it", "status": "pending"}]


def test_a_planning_turn_refuses_a_write_and_the_approval_switches_the_session_to_acting(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    lines: list[dict[str, object]] = [
        {
            "tool_calls": [
                call("read_file", path="a.txt"),
                call("write_file", path="a.txt", content="changed\n"),
                call("run_command", command="echo x > x.txt"),
            ]
        },
        {"tool_calls": [call("update_plan", items=PLAN)]},
        {"text": "Plan: 1. read the code 2. fix it"},
        {"text": "still planning"},
        {"tool_calls": [call("write_file", path="a.txt", content="changed\n")]},
        {"text": "done"},
    ]
    provider = scripted(write_script(tmp_path / "s.jsonl", lines))
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    policy = Policy(sandbox="off", yes=True)
    planner = make_host(sqlite_store, provider, policy=policy, config=replace(FAST, plan=True))
    assert start_turn(planner, info, "fix a.txt") == "completed"
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert not (ws / "x.txt").exists()
    offered = {t.name for t in provider.requests[0].tools}
    assert "read_file" in offered
    assert "update_plan" in offered
    assert not offered & {"write_file", "edit_file", "run_command"}
    results = {out.name: out for [(_, out)] in outcomes(sqlite_store.read(info.id)).values()}
    assert not results["read_file"].is_error
    for name in ("write_file", "run_command"):
        assert results[name].is_error
        assert "plan mode" in results[name].result
    # A later turn of the session, started without --plan, still plans: nothing approved it.
    host = make_host(sqlite_store, provider, policy=policy)
    assert start_turn(host, info, "also b.txt?") == "completed"
    assert {t.name for t in provider.requests[-1].tools} == offered
    # Approving switches the same session to acting.
    assert start_turn(host, info, APPROVED, approve_plan=True) == "completed"
    assert (ws / "a.txt").read_text() == "changed\n"
    assert "write_file" in {t.name for t in provider.requests[-1].tools}
    records = sqlite_store.read(info.id)
    notes = [c.note for r in records if isinstance(c := r.event.content, SystemNote)]
    approved = [n for n in notes if isinstance(n, PlanApproved)]
    assert [a.plan for a in approved] == [["read the code", "fix it"]]
    assert [n.plan for n in notes if isinstance(n, TurnStarted)] == [True, True, False]


def test_approving_without_a_plan_is_refused(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    provider = scripted(write_script(tmp_path / "s.jsonl", [{"text": "ok"}]))
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    host = make_host(sqlite_store, provider)
    assert start_turn(host, info, "hi") == "completed"
    before = sqlite_store.head(info.id).high_water
    with pytest.raises(ConfigError, match="no plan waiting for approval"):
        start_turn(host, info, APPROVED, approve_plan=True)
    assert sqlite_store.head(info.id).high_water == before


@pytest.mark.slow  # six processes; the in-process test above covers the engine
def test_run_plan_then_approve_plan_from_the_command_line(tmp_path: Path, ws: Path) -> None:
    script = tmp_path / "s.jsonl"
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("write_file", path="a.txt", content="changed\n")]},
        {"tool_calls": [call("update_plan", items=PLAN)]},
        {"text": "Plan: change a.txt"},
        {"tool_calls": [call("write_file", path="a.txt", content="changed\n")]},
        {"text": "done"},
    ]
    script.write_text("".join(json.dumps(line) + "\n" for line in lines))
    db = tmp_path / "bubu.db"
    base = ["-m", f"scripted:{script}", "--sandbox", "off"]
    planned = bubu(db, "run", "--plan", "change a.txt", "-w", str(ws), *base)
    assert planned.returncode == 0, planned.stderr
    assert (ws / "a.txt").read_text() == "alpha\n"
    sid = only_session(db)
    assert bubu_json(db, "status", sid, "--json")["plan_mode"] is True
    shown = bubu_json(db, "context", sid, "--json")["tools"]
    assert "read_file" in shown
    assert "write_file" not in shown
    assert f"plan mode: `bubu approve-plan {sid}`" in bubu(db, "status", sid).stdout
    acted = bubu(db, "approve-plan", sid, *base)
    assert acted.returncode == 0, acted.stderr
    assert bubu_json(db, "status", sid, "--json")["plan_mode"] is False
    assert (ws / "a.txt").read_text() == "changed\n"
    again = bubu(db, "approve-plan", sid, *base)
    assert again.returncode == 2
    assert "no plan waiting for approval" in again.stderr
