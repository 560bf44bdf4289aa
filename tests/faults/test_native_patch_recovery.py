"""OpenAI's apply_patch end to end: a three-file patch (create, update, delete) killed between
dispatch and outcome is recovered file by file from the hashes its dispatches recorded, each
answered in the tool's own shape; a kill during the next call re-issues it byte for byte."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from bubu.events import FunctionCall, SystemNote, ToolDispatch, TurnStarted
from bubu.projections.recovery import DELETED

from .helpers import bubu, finish, only_session, read, start_bubu
from .wire import OPENAI_KEY, Reply, Stall, serve

FIXTURES = Path(__file__).parent.parent / "providers" / "fixtures"
SPEC = "openai-responses:gpt-5.1"
APP = 'def greet():\n    print("Hi")\n'
PATCHED_APP = 'def greet():\n    print(shout("hello"))\n'
HELPERS = "def shout(text):\n    return text.upper()\n"


def _sse(name: str) -> Reply:
    return Reply(body=((FIXTURES / name).read_bytes(),))


def _patch_items() -> list[dict[str, Any]]:
    items = []
    for line in (FIXTURES / "responses_three_file_patch.sse").read_text().splitlines():
        if line.startswith("data: "):
            data = json.loads(line.removeprefix("data: "))
            if data["type"] == "response.output_item.done":
                items.append(data["item"])
    return items


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_text(APP)
    (ws / "old.py").write_text("x = 1\n")
    return ws


def _outputs(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in request["input"] if i.get("type") == "apply_patch_call_output"]


@pytest.mark.heavy
def test_a_three_file_patch_killed_after_dispatch_is_recovered_file_by_file(
    tmp_path: Path,
) -> None:
    ws = _workspace(tmp_path)
    db = tmp_path / "bubu.db"
    with serve([_sse("responses_three_file_patch.sse")]) as server:
        url = f"{server.url}/v1"
        proc = start_bubu(
            db,
            "run",
            "shout the greeting",
            "-w",
            str(ws),
            "-m",
            SPEC,
            "--base-url",
            url,
            "--native-tools",
            env={"OPENAI_API_KEY": OPENAI_KEY, "BUBU_FAILPOINT": "after_dispatch"},
        )
        assert finish(proc)[0] == -signal.SIGKILL
        # The crash left the patch part way: one file written, one untouched, one changed by
        # someone else since (it matches neither side of its dispatch).
        (ws / "helpers.py").write_text(HELPERS)
        (ws / "old.py").write_text("x = 2  # edited by hand\n")
        server.replies.append(_sse("responses_text.sse"))
        # No --native-tools here: the turn recorded it.
        done = bubu(
            db, "recover", "-m", SPEC, "--base-url", url, env={"OPENAI_API_KEY": OPENAI_KEY}
        )
        assert done.returncode == 0, done.stdout + done.stderr
        requests = server.requests

    records = read(db)
    dispatches = [a.tool_dispatch for r in records if (a := r.event.actions) and a.tool_dispatch]
    by_path = {Path(d.path or "").name: d for d in dispatches}
    assert set(by_path) == {"helpers.py", "app.py", "old.py"}
    assert all(d.tool == "apply_patch" and d.effect == "provable_write" for d in dispatches)
    assert by_path["helpers.py"].before_sha256 is None
    assert by_path["old.py"].after_sha256 == DELETED
    decided = {
        Path(by_id[f.call_id].path or "").name: f.decision
        for r in records
        if (a := r.event.actions) and (f := a.tool_recovery)
        for by_id in [{d.call_id: d for d in dispatches}]
    }
    assert decided == {
        "helpers.py": "applied",
        "app.py": "rerun_not_applied",
        "old.py": "interrupted",
    }
    assert (ws / "helpers.py").read_text() == HELPERS
    assert (ws / "app.py").read_text() == PATCHED_APP  # re-run once, exactly
    assert (ws / "old.py").read_text() == "x = 2  # edited by hand\n"  # never touched

    # The log keeps what the model sent; the next request replays it and answers in kind.
    calls = [c for r in records if isinstance(c := r.event.content, FunctionCall)]
    assert [c.native for c in calls] == _patch_items()
    started = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
    ]
    assert all(note.native_tools is True for note in started)
    after = requests[-1]
    assert {"type": "apply_patch"} in after["tools"]
    assert [i for i in after["input"] if i.get("type") == "apply_patch_call"] == _patch_items()
    outputs = {o["call_id"]: o for o in _outputs(after)}
    helpers, app, old = (item["call_id"] for item in _patch_items())
    assert outputs[helpers]["status"] == "completed"
    assert "applied before the crash" in outputs[helpers]["output"]
    assert outputs[app]["status"] == "completed"
    assert outputs[app]["output"].startswith("updated app.py")
    assert outputs[old]["status"] == "failed"
    assert "interrupted" in outputs[old]["output"]
    verified = bubu(db, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.heavy
def test_a_kill_during_the_call_after_a_patch_reissues_it_byte_for_byte(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    db = tmp_path / "bubu.db"
    replies = [_sse("responses_three_file_patch.sse"), Reply(body=(Stall(60),))]
    with serve(replies) as server:
        url = f"{server.url}/v1"
        proc = start_bubu(
            db,
            "run",
            "shout the greeting",
            "-w",
            str(ws),
            "-m",
            SPEC,
            "--base-url",
            url,
            "--native-tools",
            env={"OPENAI_API_KEY": OPENAI_KEY},
        )
        deadline = time.monotonic() + 60
        while len(server.bodies) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the second model call never came"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        finish(proc)
        server.replies.append(_sse("responses_text.sse"))
        done = bubu(
            db, "recover", "-m", SPEC, "--base-url", url, env={"OPENAI_API_KEY": OPENAI_KEY}
        )
        assert done.returncode == 0, done.stdout + done.stderr
        bodies, requests = server.bodies, server.requests

    assert len(bodies) == 3
    assert bodies[2] == bodies[1], "the re-issued request differs from the lost one"
    assert [o["status"] for o in _outputs(requests[1])] == ["completed"] * 3
    assert (ws / "helpers.py").read_text() == HELPERS
    assert (ws / "app.py").read_text() == PATCHED_APP
    assert not (ws / "old.py").exists()
    assert only_session(db)
    dispatches = [
        d
        for r in read(db)
        if (a := r.event.actions) and isinstance(d := a.tool_dispatch, ToolDispatch)
    ]
    assert len(dispatches) == 3
