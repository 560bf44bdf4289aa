"""Limits of a turn through the real CLI: none by default (a 150-step task completes), and
`--max-steps`, `--max-tokens`, `--max-time` stop the turn cleanly (`stopped`, the limit named);
`bubu resume` continues it, with a raised limit if one is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bubu.events import Record, StepLimit, SystemNote, TurnEnded, TurnStarted
from faults.helpers import bubu, only_session, read, write_script


def _ends(records: list[Record]) -> list[TurnEnded]:
    return [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnEnded)
    ]


def _starts(records: list[Record]) -> list[TurnStarted]:
    return [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
    ]


def _model_calls(records: list[Record]) -> int:
    return sum(1 for r in records if r.event.actions and r.event.actions.token_usage)


def _script(tmp_path: Path, steps: int, **extra: object) -> Path:
    lines: list[dict[str, object]] = [
        # Each step asks something new: the same call with the same result is a loop.
        {
            "text": f"step {i}",
            "tool_calls": [{"name": "list_files", "arguments": {"pattern": f"*{i}*"}}],
            **extra,
        }
        for i in range(steps)
    ]
    lines.append({"text": "all done"})
    return write_script(tmp_path / "script.jsonl", lines)


def _ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    return ws


@pytest.mark.heavy
def test_a_150_step_task_completes_with_default_settings(tmp_path: Path) -> None:
    script, ws, db = _script(tmp_path, 150), _ws(tmp_path), tmp_path / "bubu.db"
    done = bubu(db, "run", "go", "-w", str(ws), "-m", f"scripted:{script}", timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    records = read(db)
    assert _model_calls(records) == 151
    assert _ends(records)[-1].reason == "completed"
    assert _starts(records)[0].max_steps is None, "no step limit by default"


@pytest.mark.heavy
def test_max_steps_stops_cleanly_and_resume_continues_with_a_raised_limit(tmp_path: Path) -> None:
    script, ws, db = _script(tmp_path, 10), _ws(tmp_path), tmp_path / "bubu.db"
    model = f"scripted:{script}"
    done = bubu(db, "run", "go", "-w", str(ws), "-m", model, "--max-steps", "3")
    assert done.returncode == 3, done.stdout + done.stderr
    session = only_session(db)
    end = _ends(read(db))[-1]
    assert (end.reason, end.cause) == ("stopped", "max_steps")
    assert end.message is not None
    assert end.message.startswith("the step limit of 3 model calls was reached;")
    assert "raise the limit with --max-steps N" in end.message
    assert f"● turn stopped: {end.message}" in done.stdout
    assert _model_calls(read(db)) == 3
    assert any(
        isinstance(c, SystemNote) and isinstance(c.note, StepLimit)
        for c in (r.event.content for r in read(db))
    )
    status = json.loads(bubu(db, "status", session, "--json").stdout)
    assert (status["status"], status["cause"]) == ("stopped", "max_steps")
    assert status["reason"] == end.message
    shown = bubu(db, "show", session).stdout
    assert "turn stopped: the step limit of 3 model calls was reached" in shown

    # Without a new limit, a resume grants the same allowance again, counted from the resume.
    again = bubu(db, "resume", session)
    assert again.returncode == 3, again.stdout + again.stderr
    assert _model_calls(read(db)) == 6
    assert _starts(read(db))[-1].max_steps == 3, "the recorded limit is kept"

    raised = bubu(db, "resume", session, "--max-steps", "500")
    assert raised.returncode == 0, raised.stdout + raised.stderr
    records = read(db)
    assert _model_calls(records) == 11
    assert _ends(records)[-1].reason == "completed"
    assert _starts(records)[-1].max_steps == 500


@pytest.mark.heavy
def test_max_tokens_stops_cleanly_and_resume_continues(tmp_path: Path) -> None:
    script, ws, db = _script(tmp_path, 4), _ws(tmp_path), tmp_path / "bubu.db"
    done = bubu(db, "run", "go", "-w", str(ws), "-m", f"scripted:{script}", "--max-tokens", "500")
    assert done.returncode == 3, done.stdout + done.stderr
    records = read(db)
    end = _ends(records)[-1]
    assert (end.reason, end.cause) == ("stopped", "max_tokens")
    assert end.message is not None
    # Between steps, or inside the call that would take the turn past it (cancelled).
    # Here inside the first call: its request alone is estimated past 500 tokens.
    assert end.message.startswith("the token limit of 500 was reached during a model call (about ")
    assert _model_calls(records) < 5
    raised = bubu(db, "resume", only_session(db), "--max-tokens", "1000000")
    assert raised.returncode == 0, raised.stdout + raised.stderr
    assert _ends(read(db))[-1].reason == "completed"


@pytest.mark.heavy
def test_max_time_stops_cleanly_and_resume_continues(tmp_path: Path) -> None:
    script, ws, db = _script(tmp_path, 6, delay_s=0.5), _ws(tmp_path), tmp_path / "bubu.db"
    done = bubu(db, "run", "go", "-w", str(ws), "-m", f"scripted:{script}", "--max-time", "1s")
    assert done.returncode == 3, done.stdout + done.stderr
    records = read(db)
    end = _ends(records)[-1]
    assert (end.reason, end.cause) == ("stopped", "max_time")
    assert end.message is not None
    assert end.message.startswith(
        (
            "the time limit of 1s was reached;",
            "the time limit of 1s was reached during a model call",
        )
    )
    assert "--max-time DURATION" in end.message
    assert 1 <= _model_calls(records) < 7
    raised = bubu(db, "resume", only_session(db), "--max-time", "1h")
    assert raised.returncode == 0, raised.stdout + raised.stderr
    assert _ends(read(db))[-1].reason == "completed"
    assert _starts(read(db))[-1].time_limit_s == 3600
