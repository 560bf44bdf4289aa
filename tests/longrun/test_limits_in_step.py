"""Limits bind inside a step, through the real CLI: a command still running at `--max-time` is
stopped and its result says why; a model call still running then is cancelled and the turn ends
`stopped` (resumable); a streamed answer that takes the turn past `--max-tokens` is cancelled."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.events import FunctionResponse, Record, SystemNote, TurnEnded
from faults.helpers import bubu, only_session, read, write_script


def _end(records: list[Record]) -> TurnEnded:
    ends = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnEnded)
    ]
    return ends[-1]


def _results(records: list[Record]) -> list[FunctionResponse]:
    return [c for r in records if isinstance(c := r.event.content, FunctionResponse)]


def _ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.mark.heavy
def test_a_command_past_max_time_is_stopped_and_its_result_says_so(tmp_path: Path) -> None:
    slow = {"name": "run_command", "arguments": {"command": "sleep 30; echo late > late.txt"}}
    script = write_script(
        tmp_path / "s.jsonl", [{"text": "wait", "tool_calls": [slow]}, {"text": "done"}]
    )
    ws, db = _ws(tmp_path), tmp_path / "bubu.db"
    done = bubu(
        db,
        "run",
        "go",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        "--max-time",
        "3s",
        timeout=60,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    records = read(db)
    (result,) = _results(records)
    assert result.is_error
    assert "the turn's time limit of 3s (--max-time) was reached while it ran" in result.result
    assert "the command and its processes were killed" in result.result
    end = _end(records)
    assert (end.reason, end.cause) == ("stopped", "max_time")
    assert not (ws / "late.txt").exists()


@pytest.mark.heavy
def test_a_model_call_past_max_time_is_cancelled_and_the_turn_is_resumable(
    tmp_path: Path,
) -> None:
    # A 35-second answer streamed a word every 0.35 s: the call is dropped at its next fragment.
    slow = " ".join(["slow"] * 100)
    script = write_script(tmp_path / "s.jsonl", [{"text": slow, "delay_s": 35}])
    ws, db = _ws(tmp_path), tmp_path / "bubu.db"
    done = bubu(
        db, "run", "go", "-w", str(ws), "-m", f"scripted:{script}", "--max-time", "2s", timeout=60
    )
    assert done.returncode == 3, done.stdout + done.stderr
    records = read(db)
    end = _end(records)
    assert (end.reason, end.cause) == ("stopped", "max_time")
    assert end.message is not None
    assert end.message.startswith("the time limit of 2s was reached during a model call, which")
    assert "cancelled" in end.message
    assert not any(r.event.role == "model" for r in records), "nothing of the call is committed"
    status = bubu(db, "status", only_session(db))
    assert "stopped" in status.stdout


@pytest.mark.heavy
def test_an_answer_streaming_past_max_tokens_is_cancelled(tmp_path: Path) -> None:
    long = " ".join(f"word{i}" for i in range(120_000))  # about 200,000 tokens
    script = write_script(tmp_path / "s.jsonl", [{"text": long}])
    ws, db = _ws(tmp_path), tmp_path / "bubu.db"
    done = bubu(
        db,
        "run",
        "go",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--max-tokens",
        "50000",
        timeout=60,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    end = _end(read(db))
    assert (end.reason, end.cause) == ("stopped", "max_tokens")
    assert (end.message or "").startswith("the token limit of 50,000 was reached during a model")
