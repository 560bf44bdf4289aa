"""A model looping on a call that succeeds: the same tool, the same arguments, the same result.

The result tells the model after a few repeats; at the loop limit the turn ends `stopped`
(resumable); polling whose results change is left alone. A scripted model over the real tools,
the real engine and a real SQLite log.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bubu.engine.loops import DEFAULT_LOOP_LIMIT, REPEAT_WARN_AT, GoOn, Looping, verdict
from bubu.engine.session import new_session, resume_turn, start_turn
from bubu.events import FunctionResponse, Record
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import SessionInfo
from bubu.projections.turn import fold

from .helpers import FAST, call, make_host, scripted, turn_end, write_script


def _results(records: list[Record]) -> list[FunctionResponse]:
    return [c for r in records if isinstance(c := r.event.content, FunctionResponse)]


def _run(
    tmp_path: Path,
    store: SQLiteStore,
    ws: Path,
    lines: list[dict[str, object]],
    loop_limit: int = DEFAULT_LOOP_LIMIT,
) -> tuple[str | None, list[Record], SessionInfo]:
    provider = scripted(write_script(tmp_path / "s.jsonl", lines))
    info = new_session(store, task="t", workspace=ws, model=provider.spec)
    host = make_host(store, provider, config=replace(FAST, loop_limit=loop_limit))
    reason = start_turn(host, info, "t")
    return reason, store.read(info.id), info


def test_the_same_successful_read_forty_times_is_told_then_stopped_resumably(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    (ws / "a.txt").write_text("hello\n")
    same: dict[str, object] = {"text": "again", "tool_calls": [call("read_file", path="a.txt")]}
    reason, records, info = _run(tmp_path, sqlite_store, ws, [same] * 40 + [{"text": "done"}])
    assert reason == "stopped"
    results = _results(records)
    assert len(results) == DEFAULT_LOOP_LIMIT, "not forty"
    notes = ["same result" in r.result for r in results]
    assert notes == [False] * (REPEAT_WARN_AT - 1) + [True] * (
        DEFAULT_LOOP_LIMIT - REPEAT_WARN_AT + 1
    )
    assert f"[this exact call has returned the same result {REPEAT_WARN_AT} times in a row" in (
        results[REPEAT_WARN_AT - 1].result
    )
    message = turn_end(records).message or ""
    assert f"read_file with the same arguments {DEFAULT_LOOP_LIMIT} times" in message
    assert "got the same result every time" in message
    assert not any(r.is_error for r in results)
    # Resumable: a resumed run gives the model another chance (counted afresh).
    provider = scripted(tmp_path / "s.jsonl")
    host = make_host(sqlite_store, provider, config=replace(FAST, loop_limit=DEFAULT_LOOP_LIMIT))
    assert resume_turn(host, info) == "stopped"
    assert len(_results(sqlite_store.read(info.id))) == 2 * DEFAULT_LOOP_LIMIT


def test_polling_whose_result_changes_is_left_alone(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    poll: dict[str, object] = {
        "text": "poll",
        "tool_calls": [call("run_command", command="date +%s%N")],
    }
    n = DEFAULT_LOOP_LIMIT + 4
    reason, records, _ = _run(tmp_path, sqlite_store, ws, [poll] * n + [{"text": "done"}])
    assert reason == "completed"
    results = _results(records)
    assert len(results) == n
    assert not any("same result" in r.result for r in results)


def test_the_loop_limit_is_configurable(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    (ws / "a.txt").write_text("hello\n")
    same: dict[str, object] = {"text": "again", "tool_calls": [call("list_files", path=".")]}
    reason, records, _ = _run(tmp_path, sqlite_store, ws, [same] * 10, loop_limit=4)
    assert reason == "stopped"
    assert len(_results(records)) == 4


def test_a_loop_is_the_same_result_not_only_the_same_call(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    # Read, write, read again: the same call, but the file changed, so its result did.
    (ws / "a.txt").write_text("one\n")
    lines: list[dict[str, object]] = []
    for i in range(DEFAULT_LOOP_LIMIT + 2):
        lines.append({"text": "r", "tool_calls": [call("read_file", path="a.txt")]})
        lines.append(
            {"text": "w", "tool_calls": [call("write_file", path="a.txt", content=f"{i}\n")]}
        )
    reason, records, _ = _run(tmp_path, sqlite_store, ws, [*lines, {"text": "done"}])
    assert reason == "completed"
    t = fold(records)
    assert verdict(t.calls.values(), last=t.last_outcome) == GoOn()
    assert max(c.repeats for c in t.calls.values()) == 1
    # The same fold with the last read repeated up to the limit is a loop.
    last = t.last_outcome
    assert last is not None
    last.repeats = DEFAULT_LOOP_LIMIT
    assert verdict(t.calls.values(), last=last) == Looping(last.name, DEFAULT_LOOP_LIMIT)
