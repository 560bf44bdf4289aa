"""Whole turns against what real local servers send: the real OpenAI-compatible adapter over a
real HTTP server on a local socket (byte-exact fixtures), the real engine and a real SQLite log.

Reused call ids, arguments that are not JSON, a tool that does not exist, empty answers and empty
streams, a server's context overflow, a model stuck on one failing call, usage a server never
sent, and the window the server serves recorded with the turn.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bubu.engine.attempts import SAME_ANSWER_LIMIT
from bubu.engine.overflow import ODD_ANSWER_LIMIT
from bubu.engine.session import new_session, start_turn
from bubu.events import (
    Compaction,
    Error,
    FunctionCall,
    FunctionResponse,
    ModelRequestNote,
    Record,
    ServerNote,
    SystemNote,
    TurnStarted,
    WindowLearned,
)
from bubu.log.sqlite import SQLiteStore
from bubu.providers.openai import OpenAIProvider
from providers.servers import EMPTY_STREAM, Answer, LocalServer, json_file, serve, stream_file
from providers.wire import fixture

from .helpers import make_host, turn_end

CHAT = ("POST", "/v1/chat/completions")
LLAMA_404 = json_file("llamacpp_404.json", 404)


def _turn(
    store: SQLiteStore,
    ws: Path,
    answers: Sequence[Answer],
    *,
    routes: dict[tuple[str, str], Answer] | None = None,
    task: str = "do it",
) -> tuple[str | None, list[Record], LocalServer]:
    with serve({CHAT: list(answers), **(routes or {})}, not_found=LLAMA_404) as server:
        provider = OpenAIProvider("local", base_url=f"{server.url}/v1")
        info = new_session(store, task=task, workspace=ws, model=provider.spec)
        reason = start_turn(make_host(store, provider), info, task)
        return reason, store.read(info.id), server


def _results(records: list[Record]) -> list[FunctionResponse]:
    return [c for r in records if isinstance(c := r.event.content, FunctionResponse)]


def _notes(records: list[Record], kind: type) -> list[object]:
    return [
        n
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(n := c.note, kind)
    ]


def test_call_ids_a_server_reuses_become_unique_and_pair_with_their_results(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    for name in ("a.txt", "b.txt", "c.txt"):
        (ws / name).write_text(f"content of {name}\n")
    answers = [
        stream_file("compatible_call0_twice.sse"),
        stream_file("compatible_call0_again.sse"),
        stream_file("compatible_text.sse"),
    ]
    reason, records, server = _turn(sqlite_store, ws, answers)
    assert reason == "completed"
    made = [c for r in records if isinstance(c := r.event.content, FunctionCall)]
    assert [c.call_id for c in made] == ["call_0", "call_0_2", "call_0_3"]
    assert [c.provider_id for c in made] == [None, "call_0", "call_0"]
    by_id = {r.call_id: r.result for r in _results(records)}
    assert "content of a.txt" in by_id["call_0"]
    assert "content of b.txt" in by_id["call_0_2"]
    assert "content of c.txt" in by_id["call_0_3"]
    # What went back to the server names each call and its result by the same unique id.
    last = server.bodies("/v1/chat/completions")[-1]["messages"]
    sent = [t["id"] for m in last if m["role"] == "assistant" for t in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert sent == answered == ["call_0", "call_0_2", "call_0_3"]


def test_arguments_that_are_not_json_get_one_short_result_saying_where(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    answers = [stream_file("compatible_bad_json_call.sse"), stream_file("compatible_text.sse")]
    reason, records, _ = _turn(sqlite_store, ws, answers)
    assert reason == "completed", "the turn goes on"
    (result,) = _results(records)
    assert result.is_error
    assert result.result.startswith("read_file did not run: its arguments are not valid JSON: ")
    assert (
        "Expecting property name enclosed in double quotes (line 1, column 18, char 17)"
        in result.result
    )
    assert '{"path": "a.txt",' in result.result
    assert len(result.result) < 400


def test_a_tool_that_does_not_exist_gets_the_list_of_tools(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    answers = [stream_file("compatible_unknown_tool.sse"), stream_file("compatible_text.sse")]
    reason, records, _ = _turn(sqlite_store, ws, answers)
    assert reason == "completed"
    (result,) = _results(records)
    assert result.is_error
    assert result.result.startswith("unknown tool 'fetch_url'; the tools are: ")
    assert "read_file" in result.result
    assert "run_command" in result.result


def test_an_empty_answer_is_asked_again_then_waited_out_then_ends_the_turn_resumably(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    once = [stream_file("compatible_empty_answer.sse"), stream_file("compatible_text.sse")]
    reason, records, _ = _turn(sqlite_store, ws, once)
    assert reason == "completed"
    errors = [c for r in records if isinstance(c := r.event.content, Error)]
    assert [e.error_class for e in errors] == ["empty_response"]

    reason, records, server = _turn(sqlite_store, ws, [stream_file("compatible_empty_answer.sse")])
    assert reason == "failed"
    assert len(server.bodies("/v1/chat/completions")) == ODD_ANSWER_LIMIT
    end = turn_end(records)
    assert end.cause == "provider_unavailable", "resumable: `bubu resume` asks again"
    message = end.message or ""
    assert (
        f"answered with neither text nor a tool call, {ODD_ANSWER_LIMIT} times in a row" in message
    )
    assert "bubu resume" in message


def test_an_empty_200_stream_is_tried_again_then_ends_resumably_with_its_likely_cause(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    reason, records, _ = _turn(sqlite_store, ws, [EMPTY_STREAM, stream_file("compatible_text.sse")])
    assert reason == "completed"

    reason, records, server = _turn(sqlite_store, ws, [EMPTY_STREAM])
    assert reason == "failed"
    # Each attempt asked once more not streamed (to hear an overflow error; none came).
    streamed = [b["stream"] for b in server.bodies("/v1/chat/completions")]
    assert streamed == [True, False] * ODD_ANSWER_LIMIT
    assert turn_end(records).cause == "provider_unavailable"
    message = turn_end(records).message or ""
    assert "closed the response stream without sending anything" in message
    assert "--context-window" in message


def test_llama_cpp_python_s_empty_overflow_stream_teaches_the_window_it_states_not_streamed(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    answers = [
        EMPTY_STREAM,
        json_file("llamacpp_python_400_context.json", 400),
        stream_file("compatible_text.sse"),
    ]
    reason, records, server = _turn(sqlite_store, ws, answers)
    assert reason == "completed"
    learned = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, WindowLearned)
    ]
    assert [n.tokens for n in learned] == [4096]
    errors = [c for r in records if isinstance(c := r.event.content, Error)]
    assert [e.error_class for e in errors] == ["context_length"]
    assert [b["stream"] for b in server.bodies("/v1/chat/completions")] == [True, False, True]


def test_a_model_repeating_one_failing_call_is_told_then_stopped(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    reason, records, server = _turn(sqlite_store, ws, [stream_file("compatible_missing_file.sse")])
    assert reason == "stopped"
    results = _results(records)
    assert len(results) == 5
    assert all(r.is_error for r in results)
    assert ["this exact call has failed" in r.result for r in results] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert results[2].result.endswith("[this exact call has failed 3 times; change approach]")
    assert len(server.bodies("/v1/chat/completions")) == 5, "no sixth call"
    message = turn_end(records).message or ""
    assert message.startswith("stopped: the model called read_file with the same arguments 5 times")


def test_the_window_the_server_serves_is_recorded_with_the_turn_and_shown(
    sqlite_store: SQLiteStore, ws: Path, tmp_path: Path
) -> None:
    routes = {("GET", "/props"): json_file("llamacpp_props.json")}
    reason, records, _ = _turn(
        sqlite_store, ws, [stream_file("llamacpp_python_text_no_usage.sse")], routes=routes
    )
    assert reason == "completed"
    (started,) = _notes(records, TurnStarted)
    assert isinstance(started, TurnStarted)
    assert (started.context_window, started.window_source) == (4096, "llama.cpp /props")
    (usage,) = [a.token_usage for r in records if (a := r.event.actions) and a.token_usage]
    assert usage.usage_unknown
    assert (usage.input_tokens, usage.output_tokens) == (0, 0)
    assert usage.served_model == "SmolLM2-135M-Instruct"
    # A later run of this turn (a recovery) budgets with the recorded window, whatever the
    # server in front of it says now.
    restarted = OpenAIProvider("local", base_url="http://127.0.0.1:9/v1", context_window=None)
    assert restarted.context_window == 32_768
    info = sqlite_store.session(records[0].event.session)
    with make_host(sqlite_store, restarted).runner_for(info) as runner:
        assert runner.compacting.window() == 4096
    # `bubu context` reads it from the log: no server is asked.
    sid = records[0].event.session
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    shown = subprocess.run(
        [sys.executable, "-m", "bubu", "--db", str(sqlite_store.path), "context", sid],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "window: 4,096 tokens (from llama.cpp /props)" in shown.stdout
    # The server sent no usage: the status says so rather than showing 0 tokens as a fact.
    status = subprocess.run(
        [sys.executable, "-m", "bubu", "--db", str(sqlite_store.path), "status", sid],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert "1 model calls · 0 in / 0 out tokens (+1 call of unknown usage)" in status.stdout


def test_llama_servers_overflow_teaches_the_window_then_compacts_and_goes_on(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    (ws / "part.txt").write_text("".join(f"line {i}: " + "x" * 60 + "\n" for i in range(30)))
    answers = [
        *[stream_file("compatible_read_part.sse")] * 5,
        json_file("llamacpp_400_exceed_context.json", 400),
        stream_file("compatible_summary.sse"),
        stream_file("compatible_text.sse"),
    ]
    # /props says 32k (a server restarted with a smaller --ctx-size since); the overflow says 4,096.
    props = Answer(200, fixture("llamacpp_props.json").replace(b'"n_ctx":4096', b'"n_ctx":32768'))
    reason, records, server = _turn(sqlite_store, ws, answers, routes={("GET", "/props"): props})
    assert reason == "completed", turn_end(records).message
    (started,) = _notes(records, TurnStarted)
    assert isinstance(started, TurnStarted)
    assert started.context_window == 32768
    (learned,) = _notes(records, WindowLearned)
    assert isinstance(learned, WindowLearned)
    assert learned.tokens == 4096
    assert learned.source == "the server's overflow error"
    shown = _bubu(sqlite_store, "show", records[0].event.session)
    assert "window: 4,096 tokens (from the server's overflow error); compacting to it" in shown
    errors = [c for r in records if isinstance(c := r.event.content, Error)]
    assert [(e.error_class, e.status) for e in errors] == [("context_length", 400)]
    (compaction,) = _notes(records, Compaction)
    assert isinstance(compaction, Compaction)
    assert compaction.ok
    requests = [n for n in _notes(records, ModelRequestNote) if isinstance(n, ModelRequestNote)]
    turn_requests = [n for n in requests if n.purpose == "turn"]
    overflowed, retried = turn_requests[-2], turn_requests[-1]
    assert retried.checkpoint == compaction.checkpoint
    assert retried.estimated_tokens < overflowed.estimated_tokens
    assert len(server.bodies("/v1/chat/completions")) == 8


def test_an_overflow_that_compaction_cannot_cure_ends_the_turn_saying_so(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    answers = [json_file("llamacpp_400_exceed_context.json", 400)]
    reason, records, server = _turn(sqlite_store, ws, answers)
    assert reason == "failed"
    assert len(server.bodies("/v1/chat/completions")) == 2, "one retry after learning the window"
    message = turn_end(records).message or ""
    assert "exceeds the available context size (4096 tokens)" in message
    assert "compacting did not make the request fit" in message


def test_a_server_that_cannot_call_tools_is_said_in_one_line_in_the_log(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    answers = [
        json_file("llamacpp_500_tools_need_jinja.json", 500),
        stream_file("llamacpp_text.sse"),
    ]
    reason, records, server = _turn(sqlite_store, ws, answers)
    assert reason == "completed"
    infos = [n.text for n in _notes(records, ServerNote) if isinstance(n, ServerNote)]
    assert [t for t in infos if "cannot call tools" in t] == [
        f"the server at {server.url}/v1 cannot call tools (tools param requires --jinja flag); "
        "the model answers in text only"
    ]
    errors = [c for r in records if isinstance(c := r.event.content, Error)]
    assert errors == [], "a refusal the adapter adapted to is not a failed attempt"
    shown = _bubu(sqlite_store, "show", records[0].event.session)
    assert "cannot call tools (tools param requires --jinja flag)" in shown


def _bubu(store: SQLiteStore, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-m", "bubu", "--db", str(store.path), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_local_servers_500_that_repeats_word_for_word_ends_the_turn_resumably(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    # llama-cpp-python's answer to a message its schema refuses: the same 500 every time.
    refused = json_file("llamacpp_python_500_null_content.json", 500)
    reason, records, server = _turn(sqlite_store, ws, [refused])
    assert reason == "failed"
    asked = server.bodies("/v1/chat/completions")
    assert len(asked) == SAME_ANSWER_LIMIT
    assert all(b == asked[0] for b in asked), "the same request each time"
    end = turn_end(records)
    assert end.cause == "provider_unavailable"
    message = end.message or ""
    assert f"gave this same answer {SAME_ANSWER_LIMIT} times in a row" in message
    assert "500: 7 validation errors" in message
    assert "bubu resume" in message


def test_a_local_servers_500_that_changes_is_retried_as_a_transient_fault(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    refused = json_file("llamacpp_python_500_null_content.json", 500)
    other = Answer(
        500, b'{"error":{"message":"CUDA out of memory","type":"internal_server_error"}}'
    )
    answers = [refused, refused, other, refused, refused, stream_file("compatible_text.sse")]
    reason, _, server = _turn(sqlite_store, ws, answers)
    assert reason == "completed"
    assert len(server.bodies("/v1/chat/completions")) == 6


def test_empty_streams_for_tool_calls_switch_the_run_to_whole_answers_recorded_once(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    (ws / "a.txt").write_text("hello\n")
    answers = [
        EMPTY_STREAM,
        json_file("llamacpp_python_whole_tool_call.json"),
        json_file("llamacpp_python_whole_text.json"),
    ]
    reason, records, server = _turn(sqlite_store, ws, answers)
    assert reason == "completed"
    assert [b["stream"] for b in server.bodies("/v1/chat/completions")] == [True, False, False]
    infos = [n.text for n in _notes(records, ServerNote) if isinstance(n, ServerNote)]
    assert len([t for t in infos if "cannot stream tool calls" in t]) == 1
    assert [c for r in records if isinstance(c := r.event.content, Error)] == [], "no failure"


def test_the_session_call_ids_stay_exact_for_ids_past_the_recent_window() -> None:
    from bubu.engine.callids import CallIds, unique_call_id

    ids = CallIds()
    for i in range(CallIds.RECENT + 50):
        ids.add(f"call_{i}")
    # An id far older than the exact window is still known (the filter has no false negatives).
    assert "call_0" in ids
    assert unique_call_id("call_0", ids) == "call_0_2"
    assert unique_call_id("call_new", ids) == "call_new"
    assert 3 not in ids
