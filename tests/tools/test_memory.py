"""Workspace memory and the plan through real `bubu` processes: remember in one session, recall in
the next of the same workspace (never in another), idempotence, forget, `bubu memory --json`, and
the plan in `bubu status`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bubu.events import FunctionCall, FunctionResponse, MemoryForgotten, Record, SystemNote
from bubu.log.sqlite import SQLiteStore
from engine.cli import bubu, bubu_json


def _script(path: Path, calls: list[tuple[str, dict[str, Any]]]) -> Path:
    lines = [{"tool_calls": [{"name": n, "arguments": a}]} for n, a in calls]
    path.write_text("".join(json.dumps(x) + "\n" for x in [*lines, {"text": "done"}]))
    return path


def _run(tmp: Path, db: Path, ws: Path, name: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """Run one session of scripted calls in `ws`; its id."""
    script = _script(tmp / f"{name}.jsonl", calls)
    done = bubu(db, "run", f"task {name}", "-w", str(ws), "-m", f"scripted:{script}", "--jsonl")
    assert done.returncode == 0, done.stdout + done.stderr
    return str(_newest(db).id)


def _newest(db: Path) -> Any:
    with SQLiteStore(db) as store:
        return max(store.sessions(), key=lambda s: (s.created_ms, s.id))


def _results(db: Path, session: str, tool: str) -> list[FunctionResponse]:
    with SQLiteStore(db) as store:
        recs = store.read(session)
    return [
        c for r in recs if isinstance(c := r.event.content, FunctionResponse) and c.name == tool
    ]


def _records(db: Path, session: str) -> list[Record]:
    with SQLiteStore(db) as store:
        return store.read(session)


def _dirs(tmp: Path) -> tuple[Path, Path, Path]:
    a, b = tmp / "a", tmp / "b"
    a.mkdir()
    b.mkdir()
    return tmp / "bubu.db", a, b


@pytest.mark.heavy
def test_a_later_session_of_the_workspace_recalls_what_an_earlier_one_remembered(
    tmp_path: Path,
) -> None:
    db, a, b = _dirs(tmp_path)
    _run(tmp_path, db, a, "one", [("remember", {"key": "test-cmd", "text": "run make check-fast"})])
    two = _run(tmp_path, db, a, "two", [("recall", {"query": "check"})])
    (got,) = _results(db, two, "recall")
    assert not got.is_error
    assert "test-cmd: run make check-fast" in got.result
    other = _run(tmp_path, db, b, "three", [("recall", {"query": "check"})])
    (none,) = _results(db, other, "recall")
    assert "make check-fast" not in none.result
    assert none.result.startswith("no note of this workspace matches")


def test_remembering_is_idempotent_by_key_and_text_and_a_new_text_replaces(tmp_path: Path) -> None:
    db, a, _ = _dirs(tmp_path)
    note = {"key": "style", "text": "tabs, never spaces"}
    s = _run(
        tmp_path,
        db,
        a,
        "one",
        [
            ("remember", note),
            ("remember", note),
            ("remember", {"key": "style", "text": "four spaces"}),
            ("recall", {"query": ""}),
        ],
    )
    first, again, replaced = _results(db, s, "remember")
    assert first.result.startswith("remembered 'style'")
    assert again.result == "already remembered 'style' with this text; nothing changed."
    assert replaced.result.startswith("replaced 'style'")
    (listed,) = _results(db, s, "recall")
    assert "style: four spaces" in listed.result
    assert "tabs" not in listed.result
    out = bubu_json(db, "memory", "list", "-w", str(a), "--json")
    assert [(n["key"], n["text"]) for n in out["notes"]] == [("style", "four spaces")]


@pytest.mark.heavy
def test_a_note_is_credited_to_the_session_that_wrote_it_not_one_that_repeated_it(
    tmp_path: Path,
) -> None:
    db, a, _ = _dirs(tmp_path)
    note = {"key": "style", "text": "tabs, never spaces"}
    one = _run(tmp_path, db, a, "one", [("remember", note)])
    _run(tmp_path, db, a, "two", [("remember", note)])  # the same text: nothing changed
    shown = bubu_json(db, "memory", "show", "style", "-w", str(a), "--json")["note"]
    assert (shown["text"], shown["session"]) == ("tabs, never spaces", one)
    plain = bubu(db, "memory", "show", "style", "-w", str(a))
    assert plain.stdout.splitlines()[0] == f"style  (remembered by {one})"
    three = _run(tmp_path, db, a, "three", [("remember", {"key": "style", "text": "spaces"})])
    shown = bubu_json(db, "memory", "show", "style", "-w", str(a), "--json")["note"]
    assert (shown["text"], shown["session"]) == ("spaces", three)


@pytest.mark.slow
def test_forget_is_an_event_and_the_note_is_no_longer_recalled(tmp_path: Path) -> None:
    db, a, b = _dirs(tmp_path)
    one = _run(
        tmp_path,
        db,
        a,
        "one",
        [
            ("remember", {"key": "db", "text": "postgres on 5432"}),
            ("remember", {"key": "ci", "text": "github actions"}),
        ],
    )
    _run(tmp_path, db, b, "other", [("remember", {"key": "db", "text": "sqlite in b"})])
    shown = bubu_json(db, "memory", "show", "db", "-w", str(a), "--json")
    assert shown["note"]["text"] == "postgres on 5432"
    assert shown["note"]["session"] == one
    before = len(_records(db, one))
    gone = bubu_json(db, "memory", "forget", "db", "-w", str(a), "--json")
    assert gone == {"workspace": str(a.resolve()), "forgotten": "db", "session": one}
    recs = _records(db, one)
    assert len(recs) == before + 1, "forgetting appends; nothing is deleted"
    last = recs[-1].event.content
    assert isinstance(last, SystemNote)
    assert last.note == MemoryForgotten(key="db")
    assert any(isinstance(r.event.content, FunctionCall) for r in recs)
    keys = [n["key"] for n in bubu_json(db, "memory", "list", "-w", str(a), "--json")["notes"]]
    assert keys == ["ci"]
    assert bubu_json(db, "memory", "show", "db", "-w", str(b), "--json")["note"]["text"] == (
        "sqlite in b"
    ), "a forget in one workspace leaves another's note of that key"
    later = _run(tmp_path, db, a, "later", [("recall", {"query": "postgres db"})])
    (got,) = _results(db, later, "recall")
    assert got.result == "no note of this workspace matches 'postgres db' (it has 1 note)."
    again = bubu(db, "memory", "forget", "db", "-w", str(a))
    assert again.returncode == 1
    assert again.stderr.startswith("bubu: error: no note 'db' is remembered in")
    assert len(again.stderr.strip().splitlines()) == 1
    assert bubu(db, "verify").returncode == 0


@pytest.mark.slow
def test_bad_memory_and_plan_arguments_are_one_line_errors_for_the_model(tmp_path: Path) -> None:
    db, a, _ = _dirs(tmp_path)
    s = _run(
        tmp_path,
        db,
        a,
        "bad",
        [
            ("remember", {"key": "  ", "text": "x"}),
            ("remember", {"key": "k", "text": ""}),
            ("update_plan", {"items": [{"text": "a", "status": "doing"}]}),
            ("update_plan", {"items": [{"text": " ", "status": "pending"}]}),
            ("update_plan", {"items": "write tests"}),
        ],
    )
    rem = _results(db, s, "remember")
    plan = _results(db, s, "update_plan")
    assert all(r.is_error and "\n" not in r.result for r in [*rem, *plan])
    assert rem[0].result.startswith("the key is empty")
    assert rem[1].result.startswith("the text is empty")
    assert plan[0].result == (
        "the plan was not changed: item 1 has the status 'doing'; it must be one of "
        "pending, in_progress, completed"
    )
    assert "empty text" in plan[1].result
    assert "must be an array" in plan[2].result
    assert bubu_json(db, "memory", "-w", str(a), "--json")["notes"] == []
    assert bubu_json(db, "status", s, "--json")["plan"] is None


@pytest.mark.heavy
def test_the_plan_is_the_newest_valid_update_plan_in_status(tmp_path: Path) -> None:
    db, a, _ = _dirs(tmp_path)
    steps = [
        {"text": "read the code", "status": "completed"},
        {"text": "write the fix", "status": "in_progress"},
        {"text": "run the tests", "status": "pending"},
    ]
    s = _run(
        tmp_path,
        db,
        a,
        "plan",
        [
            ("update_plan", {"items": [{"text": "read the code", "status": "pending"}]}),
            ("update_plan", {"items": steps}),
            ("update_plan", {"items": [{"text": "oops", "status": "later"}]}),
        ],
    )
    assert bubu_json(db, "status", s, "--json")["plan"] == steps
    text = bubu(db, "status", s)
    assert text.returncode == 0
    assert "  plan 1/3\n    [x] read the code\n    [>] write the fix\n    [ ] run the tests" in (
        text.stdout
    )


def test_bubu_memory_without_notes_and_with_a_bad_workspace(tmp_path: Path) -> None:
    db, a, _ = _dirs(tmp_path)
    out = bubu(db, "memory", "list", "-w", str(a))
    assert out.returncode == 0
    assert out.stdout.startswith("no notes remembered in")
    bad = bubu(db, "memory", "-w", str(tmp_path / "missing"))
    assert bad.returncode != 0
    missing = bubu(db, "memory", "show", "nope", "-w", str(a))
    assert missing.returncode == 1
    assert "no note 'nope'" in missing.stderr
