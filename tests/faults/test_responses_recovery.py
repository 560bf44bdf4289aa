"""The Responses API end to end: a reasoning model's encrypted reasoning and its calls go into
the log natively, come back verbatim in the next request, and a SIGKILL during that request is
recovered by issuing it again byte for byte (reasoning effort, output cap and cache key too)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from bubu.events import FunctionCall, SystemNote, Thinking, TurnStarted

from .helpers import bubu, finish, only_session, read, start_bubu
from .wire import OPENAI_KEY, Reply, Stall, serve

FIXTURES = Path(__file__).parent.parent / "providers" / "fixtures"


def _sse(name: str) -> Reply:
    return Reply(body=((FIXTURES / name).read_bytes(),))


def _done_items(name: str) -> list[dict[str, object]]:
    items = []
    for line in (FIXTURES / name).read_text().splitlines():
        if line.startswith("data: "):
            data = json.loads(line.removeprefix("data: "))
            if data["type"] == "response.output_item.done":
                items.append(data["item"])
    return items


@pytest.mark.slow
def test_a_kill_during_the_call_after_reasoning_reissues_it_byte_for_byte(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (ws / "test_calc.py").write_text("from calc import add\n")
    db = tmp_path / "bubu.db"
    spec = "openai-responses:gpt-5"
    replies = [_sse("responses_reasoning_tool_calls.sse"), Reply(body=(Stall(60),))]
    with serve(replies) as server:
        url = f"{server.url}/v1"
        proc = start_bubu(
            db,
            "run",
            "fix the test",
            "-w",
            str(ws),
            "-m",
            spec,
            "--base-url",
            url,
            "--reasoning-effort",
            "high",
            "--max-output-tokens",
            "32000",
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
            db, "recover", "-m", spec, "--base-url", url, env={"OPENAI_API_KEY": OPENAI_KEY}
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "blocked" not in done.stdout + done.stderr
        bodies, requests = server.bodies, server.requests

    assert len(bodies) == 3
    assert bodies[2] == bodies[1], "the re-issued request differs from the lost one"
    records = read(db)
    session = only_session(db)
    reasoning, call_a, call_b = _done_items("responses_reasoning_tool_calls.sse")
    # The log holds the reasoning item as the server sent it, encrypted content and all.
    (thinking,) = [c for r in records if isinstance(c := r.event.content, Thinking)]
    assert thinking.native == reasoning
    calls = [c for r in records if isinstance(c := r.event.content, FunctionCall)]
    assert [c.native for c in calls] == [call_a, call_b]
    # The settings were recorded with the turn, so the recovered request asks the same.
    started = next(
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
    )
    assert (started.reasoning_effort, started.max_output_tokens) == ("high", 32000)
    second = requests[1]
    assert second["input"][1] == reasoning
    assert second["input"][2:4] == [call_a, call_b]
    assert [i["type"] for i in second["input"][4:]] == ["function_call_output"] * 2
    assert "return a - b" in second["input"][4]["output"]
    assert second["reasoning"] == {"summary": "auto", "effort": "high"}
    assert second["max_output_tokens"] == 32000
    assert second["prompt_cache_key"] == session
    assert requests[0]["prompt_cache_key"] == session
    verified = bubu(db, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
