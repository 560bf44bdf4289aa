"""A server that reuses call ids (`call_0`) within a response and across responses: every call
gets a session-unique id, the request sent back pairs each result with its call, and a recovery
after a SIGKILL mid-tool is not blocked."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from bubu.engine import modelcall
from bubu.engine.session import new_session, start_turn
from bubu.events import FunctionCall, Record
from bubu.log.sqlite import SQLiteStore
from bubu.projections.recovery import plan_recovery
from bubu.providers.openai import OpenAIProvider
from bubu.providers.scripted import ScriptedProvider
from bubu.tools import builtin_tools

from .helpers import bubu, finish, make_host, read, results, start_bubu
from .wire import DONE, OPENAI_KEY, Reply, _chunk, _usage, openai_text, serve


def _calls_reply(*calls: tuple[str, str, dict[str, object]]) -> Reply:
    """A streamed response with one tool call per (id, name, arguments), ids as given."""
    fragments = [
        {
            "index": i,
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for i, (cid, name, args) in enumerate(calls)
    ]
    return Reply(
        body=(
            _chunk({"role": "assistant", "content": None, "tool_calls": fragments}),
            _chunk({}, "tool_calls"),
            _usage(),
            DONE,
        )
    )


def _calls(records: list[Record]) -> list[FunctionCall]:
    return [c for r in records if isinstance(c := r.event.content, FunctionCall)]


def _pairs_are_consistent(request: dict[str, object]) -> list[str]:
    """The ids of the calls a request replays; each tool message answers one of them, once."""
    messages = request["messages"]
    assert isinstance(messages, list)
    called = [
        tc["id"] for m in messages if m["role"] == "assistant" for tc in m.get("tool_calls") or []
    ]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert len(set(called)) == len(called), called
    assert sorted(answered) == sorted(called)
    return called


def test_two_calls_with_one_id_in_one_response_both_complete(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    (ws / "b.txt").write_text("beta\n")
    replies = [
        _calls_reply(
            ("call_0", "read_file", {"path": "a.txt"}), ("call_0", "read_file", {"path": "b.txt"})
        ),
        openai_text("Done."),
    ]
    with serve(replies) as server, SQLiteStore(tmp_path / "bubu.db") as store:
        provider = OpenAIProvider("gpt-fault", api_key=OPENAI_KEY, base_url=f"{server.url}/v1")
        info = new_session(store, task="read both", workspace=ws, model=provider.spec)
        host, ended = make_host(store, provider), []
        # In a thread so that a hang (what a duplicate id once caused) fails instead of waiting.
        turn = threading.Thread(target=lambda: ended.append(start_turn(host, info, "read both")))
        turn.daemon = True
        turn.start()
        turn.join(60)
        assert not turn.is_alive(), "the turn hung on two calls with one id"
        (reason,) = ended
        records = store.read(info.id)
        assert store.verify(info.id).ok
    assert reason == "completed"
    first, second = _calls(records)
    assert (first.call_id, first.provider_id) == ("call_0", None)
    assert second.call_id != "call_0"
    assert second.provider_id == "call_0"
    outs = {r.call_id: r.result for r in results(records)}
    assert "alpha" in outs[first.call_id]
    assert "beta" in outs[second.call_id]
    assert _pairs_are_consistent(server.requests[1]) == [first.call_id, second.call_id]


@pytest.mark.heavy
def test_one_id_across_responses_then_a_kill_mid_tool_recovers(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    db = tmp_path / "bubu.db"
    pid_file = ws / "pid.txt"
    slow = "echo $$ > pid.txt; sleep 60"
    replies = [
        _calls_reply(("call_0", "read_file", {"path": "a.txt"})),
        _calls_reply(("call_0", "run_command", {"command": slow})),
    ]
    with serve(replies) as server:
        url = f"{server.url}/v1"
        proc = start_bubu(
            db,
            "run",
            "read, then wait",
            "-w",
            str(ws),
            "-m",
            "openai:gpt-fault",
            "--base-url",
            url,
            "--yes",
            env={"OPENAI_API_KEY": OPENAI_KEY},
        )
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text().strip().isdigit()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        finish(proc)
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        server.replies.append(openai_text("Done."))
        done = bubu(
            db,
            "recover",
            "-m",
            "openai:gpt-fault",
            "--base-url",
            url,
            env={"OPENAI_API_KEY": OPENAI_KEY},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "blocked" not in done.stdout + done.stderr
        records = read(db)
        first, second = _calls(records)
        assert first.call_id != second.call_id
        assert second.provider_id == "call_0"
        assert _pairs_are_consistent(server.requests[-1]) == [first.call_id, second.call_id]
    verified = bubu(db, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_an_older_log_that_reused_an_id_across_responses_still_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What Bubu wrote before call ids were made unique: the provider's id, reused, as it came.
    monkeypatch.setattr(modelcall, "unique_call_id", lambda provider_id, taken: provider_id)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    (ws / "b.txt").write_text("beta\n")
    script = tmp_path / "s.jsonl"
    lines = [
        {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.txt"}}]},
        {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "b.txt"}}]},
        {"text": "done"},
    ]
    script.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with SQLiteStore(tmp_path / "bubu.db") as store:
        provider = ScriptedProvider(str(script))
        info = new_session(store, task="t", workspace=ws, model=provider.spec)
        assert start_turn(make_host(store, provider), info, "t") == "completed"
        records = store.read(info.id)
        assert store.verify(info.id).ok
    assert [c.call_id for c in _calls(records)] == ["c1", "c1"]
    effects = {name: t.effect for name, t in builtin_tools().items()}
    # Every prefix short of the turn's end is a state a crash could leave: none is blocked.
    for end in range(len(records) - 1, 0, -1):
        plan = plan_recovery(records[:end], effects, {})
        assert plan.kind != "blocked", (end, plan.reason)
