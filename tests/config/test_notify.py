"""The notify command: a real process that gets a JSON payload on stdin when a turn ends and when
a permission is needed; a failing one is reported once and never changes the task's outcome."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from bubu.notify import Notifier
from engine.cli import bubu, only_session
from engine.helpers import call, write_script

RECORDER = "import sys; open(sys.argv[1], 'a').write(sys.stdin.read())"


def notes(path: Path, count: int) -> list[dict[str, object]]:
    """The payloads the recorder wrote (waiting briefly for the last ones)."""
    for _ in range(100):
        if path.exists() and len(path.read_text().splitlines()) >= count:
            break
        time.sleep(0.05)
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_notify_runs_on_a_permission_request_and_at_the_turn_end(tmp_path: Path) -> None:
    db = tmp_path / "bubu.db"
    out = tmp_path / "notes.jsonl"
    script = write_script(
        tmp_path / "m.jsonl",
        [{"tool_calls": [call("run_command", command="touch made")]}, {"text": "done"}],
    )
    (tmp_path / "config.toml").write_text(
        f"notify = {json.dumps([sys.executable, '-c', RECORDER, str(out)])}\n"
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    done = bubu(db, "run", "-w", str(ws), "-m", f"scripted:{script}", "--sandbox", "off", "hi")
    assert done.returncode == 0, done.stderr
    got = sorted(notes(out, 2), key=lambda n: int(str(n["seq"])))  # two processes, any order
    kinds = [n["kind"] for n in got]
    assert kinds == ["permission", "turn_ended"]
    perm, end = got
    sid = only_session(db)
    assert perm["tool"] == "run_command"
    assert perm["summary"] == "run `touch made`"
    assert end["status"] == "completed"
    for n in got:
        assert (n["session"], n["title"], n["workspace"]) == (sid, "hi", str(ws.resolve()))
        assert isinstance(n["turn"], str)
        assert isinstance(n["time"], str)


@pytest.mark.heavy
def test_a_failing_notifier_is_reported_once_and_the_task_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "bubu.db"
    script = write_script(
        tmp_path / "m.jsonl",
        [{"tool_calls": [call("run_command", command="touch made")]}, {"text": "done"}],
    )
    for notify in (["false"], [str(tmp_path / "no-such-notifier")]):
        (tmp_path / "config.toml").write_text(f"notify = {json.dumps(notify)}\n")
        done = bubu(db, "run", "-w", str(tmp_path), "-m", f"scripted:{script}", "--yes", "hi")
        assert done.returncode == 0, done.stderr
        warnings = [ln for ln in done.stderr.splitlines() if "notify command failed" in ln]
        assert len(warnings) == 1, done.stderr
        assert (tmp_path / "made").exists()
        (tmp_path / "made").unlink()


def test_a_hanging_notifier_is_killed_at_its_timeout() -> None:
    n = Notifier([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.3)
    started = time.monotonic()
    n.send({"kind": "turn_ended"})
    for _ in range(100):
        if n.failed:
            break
        time.sleep(0.05)
    assert n.failed
    assert time.monotonic() - started < 10


def test_a_request_answered_by_yes_does_not_call_anyone(tmp_path: Path) -> None:
    db = tmp_path / "bubu.db"
    out = tmp_path / "notes.jsonl"
    script = write_script(
        tmp_path / "m.jsonl",
        [{"tool_calls": [call("run_command", command="touch made")]}, {"text": "done"}],
    )
    (tmp_path / "config.toml").write_text(
        f"notify = {json.dumps([sys.executable, '-c', RECORDER, str(out)])}\n"
    )
    done = bubu(
        db,
        "run",
        "-w",
        str(tmp_path),
        "-m",
        f"scripted:{script}",
        "--sandbox",
        "off",
        "--yes",
        "hi",
    )
    assert done.returncode == 0, done.stderr
    assert [n["kind"] for n in notes(out, 1)] == ["turn_ended"]
