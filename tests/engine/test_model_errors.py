"""Provider failures during a turn (the script's `error` key): each failed attempt is an error
event; retryable ones are retried, a non-retryable one ends the turn `failed` with a readable
message."""

from __future__ import annotations

from pathlib import Path

from bubu.engine.driver import RunConfig
from bubu.engine.session import new_session, start_turn
from bubu.events import Error, ModelRequestNote, Record, SystemNote, Text
from bubu.log.sqlite import SQLiteStore

from .helpers import call, kinds, make_host, scripted, turn_end, write_script


def _errors(records: list[Record]) -> list[Error]:
    return [c for r in records if isinstance(c := r.event.content, Error)]


def _attempts(records: list[Record]) -> list[int]:
    return [
        n.attempt
        for r in records
        if isinstance(c := r.event.content, SystemNote)
        and isinstance(n := c.note, ModelRequestNote)
    ]


def test_a_rate_limit_is_retried_after_its_retry_after(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"text": "reading", "tool_calls": [call("read_file", path="a.txt")]},
            {"text": "done", "error": {"status": 429, "message": "slow down", "retry_after": 0.01}},
        ],
    )
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    # backoff_s is large: only the Retry-After of the error keeps this test fast.
    host = make_host(sqlite_store, provider, config=RunConfig(backoff_s=30.0))

    assert start_turn(host, info, "t") == "completed"

    records = sqlite_store.read(info.id)
    (error,) = _errors(records)
    assert error.status == 429
    assert error.retryable
    assert "slow down" in error.message
    assert _attempts(records) == [1, 1, 2]
    tail = kinds(records)[-5:]
    assert tail == ["model_request", "error", "model_request", "text", "turn_ended"]
    assert turn_end(records).reason == "completed"
    assert len(provider.requests) == 3
    assert provider.requests[1] == provider.requests[2], "a retry asks exactly the same"


def test_a_server_error_is_retried_with_backoff(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    script = write_script(tmp_path / "s.jsonl", [{"text": "fine", "error": {"status": 503}}])
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    host = make_host(sqlite_store, provider, config=RunConfig(backoff_s=0.001))

    assert start_turn(host, info, "t") == "completed"

    records = sqlite_store.read(info.id)
    assert [(e.status, e.retryable) for e in _errors(records)] == [(503, True)]
    assert _attempts(records) == [1, 2]


def test_a_non_retryable_error_fails_the_turn(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    script = write_script(
        tmp_path / "s.jsonl",
        [{"text": "never", "error": {"status": 401, "message": "invalid api key"}}],
    )
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)

    assert start_turn(make_host(sqlite_store, provider), info, "t") == "failed"

    records = sqlite_store.read(info.id)
    (error,) = _errors(records)
    assert error.status == 401
    assert not error.retryable
    assert _attempts(records) == [1], "a non-retryable error is not retried"
    end = turn_end(records)
    assert end.reason == "failed"
    assert end.message is not None
    assert "401" in end.message
    assert "invalid api key" in end.message
    assert not any(r.event.role == "model" for r in records)
    assert not any(isinstance(r.event.content, Text) and r.event.role == "model" for r in records)
