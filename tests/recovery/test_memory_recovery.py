"""A SIGKILL between the dispatch and the outcome of `remember`: recovery proves from the memory
projection whether the note was written (re-run once, recorded as applied, or left for review when
another session changed the note meanwhile); `update_plan` and `recall` re-run silently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bubu.engine.session import new_session, start_turn
from bubu.events import FunctionResponse, Record, ToolDispatch
from bubu.log.sqlite import SQLiteStore
from bubu.projections.memory import text_sha256
from engine.cli import bubu, bubu_json
from engine.helpers import make_host, scripted


def _script(path: Path, calls: list[tuple[str, dict[str, Any]]]) -> Path:
    lines = [{"tool_calls": [{"name": n, "arguments": a}]} for n, a in calls]
    path.write_text("".join(json.dumps(x) + "\n" for x in [*lines, {"text": "done"}]))
    return path


def _run(
    tmp: Path, db: Path, ws: Path, name: str, calls: list[tuple[str, dict[str, Any]]], **kw: Any
) -> Any:
    script = _script(tmp / f"{name}.jsonl", calls)
    return bubu(db, "run", name, "-w", str(ws), "-m", f"scripted:{script}", "--jsonl", **kw)


def _session(db: Path, title: str) -> tuple[str, list[Record]]:
    with SQLiteStore(db) as store:
        (info,) = [s for s in store.sessions() if s.title == title]
        return info.id, store.read(info.id)


def _outcomes(records: list[Record], tool: str) -> list[FunctionResponse]:
    return [
        c for r in records if isinstance(c := r.event.content, FunctionResponse) and c.name == tool
    ]


def _dispatch(records: list[Record], tool: str) -> ToolDispatch:
    (d,) = [
        a.tool_dispatch
        for r in records
        if (a := r.event.actions) is not None
        and a.tool_dispatch is not None
        and a.tool_dispatch.tool == tool
    ]
    return d


NOTE = {"key": "build", "text": "make -j2 all"}


@pytest.mark.parametrize(
    "failpoint", ["after_dispatch", pytest.param("after_tool", marks=pytest.mark.slow)]
)
@pytest.mark.heavy
def test_a_remember_killed_before_its_outcome_is_re_run_once(
    tmp_path: Path, failpoint: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    db = tmp_path / "bubu.db"
    killed = _run(tmp_path, db, ws, "crash", [("remember", NOTE)], failpoint=failpoint)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    session, before = _session(db, "crash")
    d = _dispatch(before, "remember")
    assert (d.effect, d.path, d.before_sha256) == ("provable_write", "memory:build", None)
    assert d.after_sha256 == text_sha256(NOTE["text"])
    assert _outcomes(before, "remember") == []
    assert bubu_json(db, "memory", "-w", str(ws), "--json")["notes"] == []
    done = bubu(db, "recover", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    _, after = _session(db, "crash")
    (fact,) = [a.tool_recovery for r in after if (a := r.event.actions) and a.tool_recovery]
    assert fact.decision == "rerun_not_applied", fact
    (out,) = _outcomes(after, "remember")
    assert not out.is_error
    assert out.result.startswith("remembered 'build'")
    notes = bubu_json(db, "memory", "-w", str(ws), "--json")["notes"]
    assert [(n["key"], n["text"]) for n in notes] == [("build", "make -j2 all")]
    status = bubu_json(db, "status", session, "--json")
    assert status["status"] == "completed"
    assert status["recovery"]["silent_retries"] == ["remember build"]
    assert bubu(db, "verify").returncode == 0


@pytest.mark.parametrize(
    ("meanwhile", "decision", "text"),
    [
        ("make -j2 all", "applied", "make -j2 all"),
        ("ninja", "interrupted", "ninja"),
    ],
)
@pytest.mark.heavy
def test_a_note_changed_by_another_session_before_recovery_is_proven_or_left_for_review(
    tmp_path: Path, meanwhile: str, decision: str, text: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    db = tmp_path / "bubu.db"
    killed = _run(tmp_path, db, ws, "crash", [("remember", NOTE)], failpoint="after_dispatch")
    assert killed.returncode == -9
    # Another session writes the note in-process (`bubu run` would recover the crashed one first).
    script = _script(tmp_path / "other.jsonl", [("remember", {"key": "build", "text": meanwhile})])
    with SQLiteStore(db) as store:
        info = new_session(store, task="other", workspace=ws, model=f"scripted:{script}")
        host = make_host(store, scripted(script))
        assert start_turn(host, info, "other") == "completed"
    done = bubu(db, "recover", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    _, after = _session(db, "crash")
    (fact,) = [a.tool_recovery for r in after if (a := r.event.actions) and a.tool_recovery]
    assert fact.decision == decision, fact
    (out,) = _outcomes(after, "remember")
    assert out.is_error == (decision == "interrupted")
    notes = bubu_json(db, "memory", "-w", str(ws), "--json")["notes"]
    assert [(n["key"], n["text"]) for n in notes] == [("build", text)]


@pytest.mark.slow
def test_plan_and_recall_killed_after_dispatch_re_run_silently(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    db = tmp_path / "bubu.db"
    items = [{"text": "step one", "status": "in_progress"}]
    killed = _run(
        tmp_path,
        db,
        ws,
        "crash",
        [("update_plan", {"items": items}), ("recall", {"query": "x"})],
        failpoint="after_dispatch@2",
    )
    assert killed.returncode == -9, killed.stdout + killed.stderr
    session, _ = _session(db, "crash")
    assert bubu_json(db, "status", session, "--json")["plan"] == items
    done = bubu(db, "recover", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    _, after = _session(db, "crash")
    (fact,) = [a.tool_recovery for r in after if (a := r.event.actions) and a.tool_recovery]
    assert (fact.tool, fact.decision) == ("recall", "rerun")
    assert bubu_json(db, "status", session, "--json")["status"] == "completed"
