"""Provider faults, end to end: the engine drives the real OpenAI and Anthropic adapters against a
local HTTP server that answers with hand-written wire replies (rate limits, server errors, a reset
or stalled stream, broken tool calls, an empty or cut-off answer, a rejected key).

Each row checks what the person sees (the error line, the turn's end), the events written, and
that every event committed during the run is still in the log and the chain verifies.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import httpx2
import pytest

from bubu.engine.driver import RunConfig
from bubu.engine.session import new_session, start_turn
from bubu.events import ModelRequestNote, Record, SystemNote, Text, TurnEndReason
from bubu.log.sqlite import SQLiteStore
from bubu.providers.anthropic import AnthropicProvider
from bubu.providers.base import Provider, close_provider
from bubu.providers.openai import OpenAIProvider

from .helpers import (
    FAST,
    Watcher,
    bubu,
    error_line,
    errors,
    kinds,
    make_host,
    results,
    turn_end,
)
from .wire import (
    ANTHROPIC_KEY,
    OPENAI_KEY,
    Reply,
    Reset,
    Server,
    Stall,
    anthropic_error,
    anthropic_events,
    anthropic_reply,
    openai_error,
    openai_text,
    openai_text_events,
    openai_tool_call,
    serve,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Api:
    """One vendor's wire format and adapter, so each row runs against both."""

    name: str
    key: str
    key_env: str
    stop_cut: str
    text: Callable[[str], Reply]
    cut_text: Callable[[str], Reply]
    text_events: Callable[[str], list[bytes]]
    tool: Callable[[str, str], Reply]
    error: Callable[..., Reply]
    adapter: Callable[[str, httpx2.Client | None], Provider]

    def base(self, url: str) -> str:
        """The base URL the adapter is given for the server at `url`."""
        return f"{url}/v1" if self.name == "openai" else url


def _openai_error(status: int, message: str, *headers: tuple[str, str]) -> Reply:
    code = {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(status, "server_error")
    return openai_error(status, message, code, *headers)


def _anthropic_error(status: int, message: str, *headers: tuple[str, str]) -> Reply:
    kind = {401: "authentication_error", 429: "rate_limit_error"}.get(status, "api_error")
    return anthropic_error(status, kind, message, *headers)


OPENAI = Api(
    name="openai",
    key=OPENAI_KEY,
    key_env="OPENAI_API_KEY",
    stop_cut="length",
    text=openai_text,
    cut_text=lambda text: openai_text(text, "length"),
    text_events=openai_text_events,
    tool=openai_tool_call,
    error=_openai_error,
    adapter=lambda url, client: OpenAIProvider(
        "gpt-fault", api_key=OPENAI_KEY, base_url=f"{url}/v1", http_client=client
    ),
)
ANTHROPIC = Api(
    name="anthropic",
    key=ANTHROPIC_KEY,
    key_env="ANTHROPIC_API_KEY",
    stop_cut="max_tokens",
    text=lambda text: anthropic_reply([("text", text)] if text else []),
    cut_text=lambda text: anthropic_reply([("text", text)], "max_tokens"),
    text_events=lambda text: anthropic_events([("text", text)], "end_turn"),
    tool=lambda name, args: anthropic_reply([(f"tool:{name}", args)], "tool_use"),
    error=_anthropic_error,
    adapter=lambda url, client: AnthropicProvider(
        "claude-fault", api_key=ANTHROPIC_KEY, base_url=url, http_client=client
    ),
)


@pytest.fixture(params=[OPENAI, ANTHROPIC], ids=lambda api: api.name)
def api(request: pytest.FixtureRequest) -> Api:
    """Each provider row runs once per vendor adapter."""
    chosen: Api = request.param
    return chosen


@dataclass
class Turn:
    """What one turn against the local server left behind."""

    reason: TurnEndReason | None
    records: list[Record]
    watcher: Watcher
    server: Server
    workspace: Path

    @property
    def requests(self) -> list[ModelRequestNote]:
        """The model_request facts, in order."""
        return [
            c.note
            for r in self.records
            if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, ModelRequestNote)
        ]

    @property
    def answer(self) -> list[str]:
        """The model's committed text."""
        return [
            c.text
            for r in self.records
            if r.event.role == "model" and isinstance(c := r.event.content, Text)
        ]


def drive(
    tmp_path: Path,
    api: Api,
    replies: Sequence[Reply],
    *,
    config: RunConfig = FAST,
    client: httpx2.Client | None = None,
) -> Turn:
    """Run one turn with `api`'s real adapter against a server giving `replies`; check that the
    log holds every event the run reported committed, verifies, and never holds the API key."""
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    watcher = Watcher()
    with serve(replies) as server, SQLiteStore(tmp_path / "bubu.db") as store:
        provider = api.adapter(server.url, client)
        info = new_session(store, task="fix the bug", workspace=ws, model=provider.spec)
        host = make_host(store, provider, config=config, observer=watcher)
        try:
            reason = start_turn(host, info, "fix the bug")
        finally:
            close_provider(provider)
        records = store.read(info.id)
        assert store.verify(info.id).ok
        assert not any(api.key.encode() in payload for _, _, payload in store.raw(info.id))
    assert [(r.seq, r.hash) for r in watcher.committed] == [(r.seq, r.hash) for r in records]
    return Turn(reason=reason, records=records, watcher=watcher, server=server, workspace=ws)


def _shape(turn: Turn) -> list[str]:
    """The kinds after the user's request and the turn/run start notes."""
    got = kinds(turn.records)
    assert got[:3] == ["text", "turn_started", "run_started"], got
    return got[3:]


# ---- rate limits and server errors -------------------------------------------------------------


def test_429_with_retry_after_waits_as_asked_then_succeeds(tmp_path: Path, api: Api) -> None:
    limited = api.error(429, "Rate limit reached; try again in 0.2s.", ("retry-after", "0.2"))
    turn = drive(
        tmp_path, api, [limited, api.text("Done.")], config=replace(FAST, backoff_max_s=60.0)
    )
    assert turn.reason == "completed"
    assert _shape(turn) == ["model_request", "error", "model_request", "text", "turn_ended"]
    (err,) = errors(turn.records)
    assert (err.error_class, err.status, err.retryable) == ("rate_limited", 429, True)
    assert err.message.endswith("rate-limited the request (429); wait a moment and try again")
    assert "retrying in 0.2s (rate_limited)" in turn.watcher.activity
    first, second = turn.requests
    assert (first.attempt, second.attempt) == (1, 2)
    assert first.request_digest == second.request_digest, "the retry asks exactly the same"
    assert turn.answer == ["Done."]


@pytest.mark.parametrize("status", [500, 503])
def test_server_errors_are_retried_with_backoff(tmp_path: Path, api: Api, status: int) -> None:
    failing = api.error(status, "The server had an error while processing your request.")
    turn = drive(tmp_path, api, [failing, failing, api.text("Done.")])
    assert turn.reason == "completed"
    assert _shape(turn) == [*["model_request", "error"] * 2, "model_request", "text", "turn_ended"]
    assert [(e.error_class, e.status, e.retryable) for e in errors(turn.records)] == [
        ("server_error", status, True)
    ] * 2
    assert (
        f"returned a server error ({status}: The server had an error"
        in errors(turn.records)[0].message
    )
    assert [a for a in turn.watcher.activity if a.startswith("retrying")] == [
        "retrying in 0.0s (server_error)"
    ] * 2


def test_server_errors_past_the_last_attempt_fail_the_turn(tmp_path: Path, api: Api) -> None:
    failing = api.error(503, "Service Unavailable")
    turn = drive(tmp_path, api, [failing] * 3)
    assert turn.reason == "failed"
    assert _shape(turn) == [*["model_request", "error"] * 3, "turn_ended"]
    end = turn_end(turn.records)
    assert end.cause == "provider_unavailable", "a transient give-up is not a hard failure"
    assert end.message is not None
    assert errors(turn.records)[-1].message in end.message
    assert "returned a server error (503" in end.message
    assert end.message.startswith("gave up waiting for the provider after 3 attempts")
    assert end.message.endswith("continues the turn")


# ---- broken streams ----------------------------------------------------------------------------


def test_a_connection_reset_mid_stream_is_retried(tmp_path: Path, api: Api) -> None:
    events = api.text_events("Half an answer that never finishes")
    reset = Reply(body=(*events[:3], Reset()))
    turn = drive(tmp_path, api, [reset, api.text("Whole answer.")])
    assert turn.reason == "completed"
    (err,) = errors(turn.records)
    assert (err.error_class, err.retryable) == ("stream_incomplete", True)
    assert "broke off while the response was streaming" in err.message
    assert err.message.endswith("; try again")
    # The half answer was shown while it streamed, but only the whole one was committed.
    assert any(d.text for d in turn.watcher.deltas)
    assert turn.answer == ["Whole answer."]


def test_a_stalled_stream_times_out_and_is_retried(tmp_path: Path, api: Api) -> None:
    events = api.text_events("A stream that stops")
    stalled = Reply(body=(*events[:2], Stall(60.0)))
    client = httpx2.Client(timeout=httpx2.Timeout(0.5))
    with client:
        turn = drive(tmp_path, api, [stalled, api.text("Answer.")], client=client)
    assert turn.reason == "completed"
    (err,) = errors(turn.records)
    assert (err.error_class, err.retryable) == ("timeout", True)
    assert err.message.endswith("timed out; check the network and try again")
    assert turn.answer == ["Answer."]


def test_a_stall_longer_than_the_stall_timeout_is_named_and_retried(
    tmp_path: Path, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No client of the caller's: the adapter's own timeouts come from BUBU_STALL_TIMEOUT.
    monkeypatch.setenv("BUBU_STALL_TIMEOUT", "0.5")
    events = api.text_events("A stream that stops")
    stalled = Reply(body=(*events[:2], Stall(60.0)))
    turn = drive(tmp_path, api, [stalled, api.text("Answer.")])
    assert turn.reason == "completed"
    (err,) = errors(turn.records)
    assert (err.error_class, err.retryable) == ("timeout", True)
    assert "sent nothing for 0.5 s" in err.message
    assert "--stall-timeout or BUBU_STALL_TIMEOUT" in err.message
    assert turn.answer == ["Answer."]


def test_a_bad_stall_timeout_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    db = tmp_path / "bubu.db"
    args = (
        "run",
        "fix the bug",
        "-w",
        str(ws),
        "-m",
        "openai:gpt-fault",
        "--base-url",
        "http://127.0.0.1:9/v1",
    )
    done = bubu(db, *args, "--stall-timeout", "0")
    assert done.returncode == 2
    assert "Invalid value for '--stall-timeout'" in done.stderr
    done = bubu(db, *args, env={"BUBU_STALL_TIMEOUT": "soon"})
    assert done.returncode == 2  # a configuration error, as a bad flag is
    assert error_line(done.stderr) == (
        "bubu: error: BUBU_STALL_TIMEOUT must be a number of seconds (got 'soon'); "
        "e.g. BUBU_STALL_TIMEOUT=120"
    )
    if db.exists():
        with SQLiteStore(db) as store:
            assert store.sessions() == []


def test_the_adapters_never_wait_forever_for_a_stalled_stream(api: Api) -> None:
    # Without a client of the caller's, a stall ends at the SDK's read timeout, as a retryable
    # timeout (the row above): bounded, though long (10 minutes per read).
    provider = api.adapter("http://127.0.0.1:9", None)
    timeout = provider._client.timeout  # type: ignore[attr-defined]
    assert isinstance(timeout, httpx2.Timeout)
    assert timeout.read is not None
    assert timeout.read <= 600
    assert timeout.connect is not None
    assert timeout.connect <= 10


def test_an_empty_stream_is_retried_once(tmp_path: Path, api: Api) -> None:
    empty = Reply(body=(b"data: [DONE]\n\n",) if api.name == "openai" else (b"",))
    turn = drive(tmp_path, api, [empty, api.text("Answer.")])
    assert turn.reason == "completed"
    (err,) = errors(turn.records)
    assert (err.error_class, err.retryable) == ("empty_stream", True)
    assert "closed the response stream without sending anything" in err.message
    assert turn.answer == ["Answer."]


def test_a_complete_but_empty_answer_is_asked_again_once(tmp_path: Path, api: Api) -> None:
    turn = drive(tmp_path, api, [api.text(""), api.text("Answer.")])
    assert turn.reason == "completed"
    assert _shape(turn) == ["model_request", "error", "model_request", "text", "turn_ended"]
    assert turn.answer == ["Answer."]
    (err,) = errors(turn.records)
    assert err.error_class == "empty_response"


def test_empty_answers_in_a_row_are_waited_out_and_end_the_turn_resumably(
    tmp_path: Path, api: Api
) -> None:
    turn = drive(tmp_path, api, [api.text("")] * 3)
    assert turn.reason == "failed"
    # The first is asked again at once; the next ones are the retry policy's (3 attempts here).
    assert _shape(turn) == [*["model_request", "error"] * 3, "turn_ended"]
    end = turn_end(turn.records)
    assert end.cause == "provider_unavailable", "resumable: the server may answer next time"
    assert "gave up waiting for the provider after 3 attempts" in (end.message or "")
    assert "answered with neither text nor a tool call" in (end.message or "")


def test_an_outage_followed_by_one_empty_answer_ends_no_task(tmp_path: Path, api: Api) -> None:
    # A restarted server's first answer is empty: it is the first odd answer in a row, however
    # long the outage before it was.
    down = api.error(503, "Service Unavailable")
    empty = Reply(body=(b"data: [DONE]\n\n",) if api.name == "openai" else (b"",))
    replies = [down, down, down, empty, api.text("Answer.")]
    turn = drive(tmp_path, api, replies, config=replace(FAST, model_attempts=10))
    assert turn.reason == "completed"
    assert [e.error_class for e in errors(turn.records)] == [
        "server_error",
        "server_error",
        "server_error",
        "empty_stream",
    ]
    assert turn.answer == ["Answer."]


# ---- what the model asked for ------------------------------------------------------------------


def test_malformed_tool_arguments_are_an_error_result_the_model_sees(
    tmp_path: Path, api: Api
) -> None:
    broken = api.tool("write_file", '{"path": "notes.txt", "content": "unterminated')
    turn = drive(tmp_path, api, [broken, api.text("I will retry with valid JSON.")])
    assert turn.reason == "completed"
    assert _shape(turn) == [
        "model_request",
        "function_call",
        "function_response",
        "model_request",
        "text",
        "turn_ended",
    ]
    (result,) = results(turn.records)
    assert result.is_error
    assert result.result.startswith(
        "write_file did not run: its arguments are not valid JSON: Unterminated string starting "
        "at (line 1, column 34, char 33); send them as one JSON object. "
        'They were: {"path": "notes.txt"'
    )
    assert not (turn.workspace / "notes.txt").exists(), "nothing was written"
    # The next request shows the model its error result.
    assert "did not run" in json.dumps(turn.server.requests[1])


@pytest.mark.parametrize(
    "arguments",
    [
        '{"path": "a.txt", "limit": 1e999}',
        '{"path": "a.txt", "limit": NaN}',
        '{"path": ' + "[" * 100_000 + "]" * 100_000 + "}",
    ],
    ids=["1e999", "NaN", "deep"],
)
def test_arguments_the_log_cannot_hold_are_an_error_result(
    tmp_path: Path, api: Api, arguments: str
) -> None:
    turn = drive(tmp_path, api, [api.tool("read_file", arguments), api.text("Retrying.")])
    assert turn.reason == "completed"
    (result,) = results(turn.records)
    assert result.is_error
    assert result.result.startswith("read_file did not run: its arguments ")
    why = {
        "1e999": "hold a number JSON cannot carry (1e999 does not fit a double)",
        "NaN": "hold a number JSON cannot carry (NaN is not a JSON number)",
        "deep": "are nested too deeply to parse",
    }
    assert why[next(k for k in why if k in arguments or k == "deep")] in result.result


def test_a_call_to_an_unknown_tool_is_an_error_result(tmp_path: Path, api: Api) -> None:
    turn = drive(tmp_path, api, [api.tool("launch_rockets", '{"count": 3}'), api.text("Sorry.")])
    assert turn.reason == "completed"
    (result,) = results(turn.records)
    assert result.is_error
    assert result.result == (
        "unknown tool 'launch_rockets'; the tools are: delegate, edit_file, grep, inspect_result, "
        "list_files, merge_child, process_kill, process_output, process_wait, query_result, "
        "read_file, read_result, recall, remember, run_command, search_result, update_plan, "
        "write_file"
    )
    assert "tool_dispatch" not in kinds(turn.records), "nothing was dispatched"


def test_a_tool_call_cut_by_max_tokens_is_an_error_result(tmp_path: Path, api: Api) -> None:
    cut = (
        openai_tool_call("write_file", '{"path": "notes.txt", "content": "unfini')
        if api.name == "openai"
        else anthropic_reply(
            [("tool:write_file", '{"path": "notes.txt", "content": "unfini')], "max_tokens"
        )
    )
    turn = drive(tmp_path, api, [cut, api.text("Shorter this time.")])
    assert turn.reason == "completed"
    (result,) = results(turn.records)
    assert result.is_error
    assert result.result.startswith("write_file did not run: its arguments are not valid JSON")
    assert not (turn.workspace / "notes.txt").exists()


def test_a_text_answer_cut_by_max_tokens_says_so(tmp_path: Path, api: Api) -> None:
    turn = drive(
        tmp_path, api, [api.cut_text("The fix is to change the divisor from len(values) - 1 to")]
    )
    assert turn.answer == ["The fix is to change the divisor from len(values) - 1 to"]
    usage = [
        r.event.actions.token_usage
        for r in turn.records
        if r.event.actions and r.event.actions.token_usage
    ]
    assert [u.stop_reason for u in usage] == ["max_tokens"]
    end = turn_end(turn.records)
    assert end.message is not None
    assert "cut off" in end.message


# ---- the key -----------------------------------------------------------------------------------


def test_an_invalid_api_key_fails_the_turn_with_a_clear_message(tmp_path: Path, api: Api) -> None:
    rejected = api.error(401, f"Incorrect API key provided: {api.key}.")
    turn = drive(tmp_path, api, [rejected])
    assert turn.reason == "failed"
    assert _shape(turn) == ["model_request", "error", "turn_ended"], "not retried"
    (err,) = errors(turn.records)
    assert (err.error_class, err.status, err.retryable) == ("auth", 401, False)
    assert err.message == (
        f"the API key was rejected by the server at {api.base(turn.server.url)} "
        "(401: Incorrect API key provided: ***.); "
        f"check {api.key_env}"
    )
    assert turn_end(turn.records).message == err.message


@pytest.mark.heavy
def test_an_invalid_api_key_through_the_cli(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    db = tmp_path / "bubu.db"
    with serve([OPENAI.error(401, f"Incorrect API key provided: {OPENAI_KEY}.")]) as server:
        url = f"{server.url}/v1"
        done = bubu(
            db,
            "run",
            "fix the bug",
            "-w",
            str(ws),
            "-m",
            "openai:gpt-fault",
            "--base-url",
            url,
            env={"OPENAI_API_KEY": OPENAI_KEY},
        )
    assert done.returncode == 1, done.stdout + done.stderr
    message = (
        f"the API key was rejected by the server at {url} "
        "(401: Incorrect API key provided: ***.); check OPENAI_API_KEY"
    )
    assert f"! auth: {message[:80]}" in done.stdout  # the error line is cut to its width
    assert f"● turn failed: {message}" in done.stdout
    assert OPENAI_KEY not in done.stdout + done.stderr
    assert server.headers[0]["authorization"] == f"Bearer {OPENAI_KEY}"
    assert db.read_bytes().find(OPENAI_KEY.encode()) == -1, "the key never reaches the log"


def test_closing_an_adapter_closes_the_client_it_made_and_not_one_given_in(
    tmp_path: Path, api: Api
) -> None:
    """The owner of a provider closes it when the run ends (the web UI's and the worker's runs
    do): its pooled sockets are closed then, not found later by the garbage collector, whose
    ResourceWarning would land in whatever ran next. A client given in belongs to the giver."""
    with serve([api.text("Done.")]) as server:
        made = api.adapter(server.url, None)
        given = httpx2.Client()
        lent = api.adapter(server.url, given)
        try:
            close_provider(made)
            close_provider(lent)
            assert made._client.is_closed()  # type: ignore[attr-defined]
            assert not given.is_closed
        finally:
            given.close()
