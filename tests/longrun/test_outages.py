"""Provider outages, end to end: `bubu run` (a real process, the real OpenAI and Anthropic SDKs)
against a local model server that refuses with 503 + `Retry-After` for a while.

A turn rides the outage out with default settings; with a short `--retry-for` it ends with the
transient cause and `bubu resume` completes it once the server is back; a rejected key fails at
once; `bubu status --json` shows the wait while it lasts; a fallback model takes over from a
primary that keeps failing; a stop interrupts a wait at once.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bubu.cli import cli
from bubu.cli.readviews import status_dict
from bubu.errors import ConfigError
from bubu.events import Error, ModelRequestNote, ModelSwitch, Record, SystemNote, TurnEnded
from bubu.log.sqlite import SQLiteStore
from bubu.projections.transcript import transcript
from faults.helpers import bubu, error_line, finish, only_session, read, start_bubu, wait_for

from .outage import OutageServer, serve_outages

OPENAI_KEY = "sk-outage-openai-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-outage-0123456789abcdef"


@pytest.fixture
def server() -> Iterator[OutageServer]:
    with serve_outages() as srv:
        yield srv


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    return w


def _model_args(server: OutageServer, api: str) -> list[str]:
    if api == "openai":
        return ["-m", "openai:gpt-outage", "--base-url", server.openai()]
    return ["-m", "anthropic:claude-outage", "--base-url", server.url]


ENV = {"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}


def _errors(records: list[Record]) -> list[Error]:
    return [c for r in records if isinstance(c := r.event.content, Error)]


def _notes(records: list[Record], kind: type) -> list[Any]:
    return [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, kind)
    ]


def _end(records: list[Record]) -> TurnEnded:
    end = _notes(records, TurnEnded)[-1]
    assert isinstance(end, TurnEnded)
    return end


@pytest.mark.parametrize("api", ["openai", pytest.param("anthropic", marks=pytest.mark.slow)])
def test_a_short_outage_is_ridden_out_with_default_settings(
    tmp_path: Path, ws: Path, server: OutageServer, api: str
) -> None:
    server.outage(3.0, retry_after="1")
    db = tmp_path / "bubu.db"
    done = bubu(db, "run", "say done", "-w", str(ws), *_model_args(server, api), env=ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "● turn completed" in done.stdout
    records = read(db)
    errors = _errors(records)
    assert len(errors) == server.refused() >= 2, "every refused attempt is an event"
    assert all(e.status == 503 and e.retryable for e in errors)
    assert all(e.retry_in_ms == 1000 for e in errors), "Retry-After: 1 is obeyed"
    attempts = [n.attempt for n in _notes(records, ModelRequestNote)]
    assert attempts == list(range(1, len(errors) + 2))
    assert _end(records).reason == "completed"


@pytest.mark.slow
def test_a_short_retry_horizon_gives_up_resumably_and_resume_completes(
    tmp_path: Path, ws: Path, server: OutageServer
) -> None:
    server.outage(600.0, retry_after="1")
    db = tmp_path / "bubu.db"
    args = ["run", "say done", "-w", str(ws), *_model_args(server, "openai"), "--retry-for", "5s"]
    started = time.monotonic()
    done = bubu(db, *args, env=ENV)
    took = time.monotonic() - started
    assert done.returncode == 75, done.stdout + done.stderr
    assert took < 30, "the horizon bounds the wait"
    session = only_session(db)
    end = _end(read(db))
    assert (end.reason, end.cause) == ("failed", "provider_unavailable")
    assert end.message is not None
    assert end.message.startswith("gave up waiting for the provider after ")
    assert "(the retry horizon is 5s, --retry-for)" in end.message
    assert f"`bubu resume {session}` continues the turn" in end.message
    assert "503: The service is temporarily unavailable." in end.message

    status = json.loads(bubu(db, "status", session, "--json").stdout)
    assert (status["status"], status["cause"], status["waiting"]) == (
        "failed",
        "provider_unavailable",
        None,
    )
    assert status["turn"]["retry_for_s"] == 5

    server.recover()
    again = bubu(db, "resume", session, "--base-url", server.openai(), env=ENV)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Done." in again.stdout
    records = read(db)
    assert _end(records).reason == "completed"
    assert _notes(records, TurnEnded)[0].cause == "provider_unavailable", "the log keeps both"


@pytest.mark.heavy
def test_a_hard_failure_is_not_resumable(tmp_path: Path, ws: Path, server: OutageServer) -> None:
    server.outage(600.0, status=401, retry_after=None)
    server.message = f"Incorrect API key provided: {OPENAI_KEY}."
    db = tmp_path / "bubu.db"
    started = time.monotonic()
    done = bubu(db, "run", "say done", "-w", str(ws), *_model_args(server, "openai"), env=ENV)
    assert time.monotonic() - started < 20
    assert done.returncode == 1, done.stdout + done.stderr
    assert server.refused() == 1, "a rejected key is not retried"
    end = _end(read(db))
    assert (end.reason, end.cause) == ("failed", None)
    assert end.message is not None
    assert "(401: Incorrect API key provided: ***.)" in end.message, "the provider's message"
    assert OPENAI_KEY not in done.stdout + done.stderr
    refused = bubu(db, "resume", only_session(db), env=ENV)
    assert refused.returncode != 0
    assert "no stopped or suspended turn to resume (its last turn ended failed)" in error_line(
        refused.stderr
    )


def _status(db: Path, session: str) -> dict[str, Any]:
    done = bubu(db, "status", session, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _waiting_now(db: Path, session: str) -> dict[str, Any] | None:
    """The `waiting` object as `bubu status --json` builds it, read in this process (polling
    through a new process each time would take seconds per look)."""
    with SQLiteStore(db) as store:
        w = status_dict(store, store.session(session))["waiting"]
    assert w is None or isinstance(w, dict)
    return w


@pytest.mark.slow
def test_status_shows_the_wait_while_the_server_refuses(
    tmp_path: Path, ws: Path, server: OutageServer
) -> None:
    server.outage(600.0, retry_after="2")
    db = tmp_path / "bubu.db"
    proc = start_bubu(
        db, "run", "say done", "-w", str(ws), *_model_args(server, "anthropic"), env=ENV
    )
    try:
        wait_for(lambda: server.refused() >= 2 and db.exists(), "two refused attempts")
        session = only_session(db)

        def waiting() -> bool:
            w = _waiting_now(db, session)
            return w is not None and not w["in_flight"] and w["next_in_s"] >= 1.0

        wait_for(waiting, "a wait with a second or more to go")
        seen = _status(db, session)  # the real command, while the server refuses
        w = seen["waiting"]
        assert w is not None, seen
        assert seen["status"] == "running"
        assert w["attempt"] == w["failed_attempts"] + 1 >= 2
        assert 0 <= w["next_in_s"] <= 2.0
        assert w["next_at_ms"] > w["since_ms"]
        assert (w["status"], w["error_class"], w["model"]) == (
            503,
            "server_error",
            "anthropic:claude-outage",
        )
        assert "The service is temporarily unavailable." in w["error"]
        text = bubu(db, "status", session).stdout
        assert "  waiting for the provider: attempt " in text
        assert ", since " in text
        # Ctrl-C ends the wait at once: the turn ends stopped and can be resumed.
        asked = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code, out, _ = finish(proc, timeout=20)
        assert time.monotonic() - asked < 5
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 3, out
    assert _end(read(db)).reason == "stopped"
    assert _waiting_now(db, session) is None


@pytest.mark.heavy
def test_bubu_stop_interrupts_a_wait(tmp_path: Path, ws: Path, server: OutageServer) -> None:
    server.outage(600.0, retry_after="60")
    db = tmp_path / "bubu.db"
    proc = start_bubu(db, "run", "say done", "-w", str(ws), *_model_args(server, "openai"), env=ENV)
    try:
        wait_for(lambda: server.refused() >= 1 and db.exists(), "a refused attempt")
        session = only_session(db)
        wait_for(lambda: _waiting_now(db, session) is not None, "the wait")
        asked = time.monotonic()
        stopped = bubu(db, "stop", session)
        assert stopped.returncode == 0, stopped.stderr
        code, _, _ = finish(proc, timeout=20)
        assert time.monotonic() - asked < 10, "the 60 s wait was cut short"
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 3
    assert server.refused() == 1


@pytest.mark.slow
def test_a_fallback_model_takes_over_from_a_failing_primary(
    tmp_path: Path, ws: Path, server: OutageServer
) -> None:
    server.down_models = frozenset({"gpt-outage"})
    server.retry_after = "0"
    db = tmp_path / "bubu.db"
    env = {**ENV, "ANTHROPIC_BASE_URL": server.url}
    done = bubu(
        db,
        "run",
        "say done",
        "-w",
        str(ws),
        *_model_args(server, "openai"),
        "--fallback-model",
        "anthropic:claude-outage",
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "⇄ switched from openai:gpt-outage to anthropic:claude-outage after 3 failed" in (
        done.stdout
    )
    records = read(db)
    (switch,) = _notes(records, ModelSwitch)
    assert (switch.from_model, switch.to_model, switch.failures) == (
        "openai:gpt-outage",
        "anthropic:claude-outage",
        3,
    )
    models = [n.model for n in _notes(records, ModelRequestNote)]
    assert models == ["openai:gpt-outage"] * 3 + ["anthropic:claude-outage"]
    assert [h.path for h in server.hits][-1] == "/v1/messages"
    shown = bubu(db, "show", only_session(db))
    assert "switched from openai:gpt-outage to anthropic:claude-outage" in shown.stdout
    items = transcript(records).items
    assert any("switched from openai:gpt-outage" in getattr(i, "text", "") for i in items)
    with SQLiteStore(db) as store:
        turn: Any = status_dict(store, store.session(only_session(db)))["turn"]
    assert turn["fallback_models"] == ["anthropic:claude-outage"]
    assert turn["model"] == "anthropic:claude-outage"


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--retry-for", "0", "--retry-for must be a duration above zero"),
        ("--retry-for", "nan", "--retry-for must be a duration above zero"),
        ("--retry-for", "soon", "--retry-for must be a duration (e.g. 90s, 10m, 6h, 1d"),
        ("--max-time", "-5m", "--max-time must be a duration"),
        ("--max-steps", "0", "--max-steps must be a whole number above zero, not '0'"),
        ("--max-steps", "-3", "--max-steps must be a whole number above zero"),
        ("--max-tokens", "nan", "--max-tokens must be a whole number above zero"),
        ("--fallback-model", "gpt-4o", "--fallback-model must be provider:model"),
    ],
)
def test_bad_values_are_refused_before_anything_is_written(
    tmp_path: Path, ws: Path, flag: str, value: str, message: str
) -> None:
    db = tmp_path / "bubu.db"
    args = ["--db", str(db), "run", "x", "-w", str(ws), "-m", "scripted:/dev/null", flag, value]
    result = CliRunner().invoke(cli, args)
    assert isinstance(result.exception, ConfigError), result.output
    assert message in str(result.exception)
    assert "\n" not in str(result.exception)
    if db.exists():
        with SQLiteStore(db) as store:
            assert store.sessions() == [], "nothing was written"


def test_a_bad_value_is_one_line_and_exit_status_2(tmp_path: Path, ws: Path) -> None:
    db = tmp_path / "bubu.db"
    done = bubu(db, "run", "x", "-w", str(ws), "-m", "openai:gpt-x", "--max-steps", "0", env=ENV)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == ("bubu: error: --max-steps must be a whole number above zero, not '0'\n")


# It waits out the outage on the clock, not on the CPU: safe beside other tests.
@pytest.mark.heavy
def test_a_45_second_outage_is_ridden_out_with_default_settings(
    tmp_path: Path, ws: Path, server: OutageServer
) -> None:
    server.outage(45.0, retry_after="5")
    db = tmp_path / "bubu.db"
    done = bubu(
        db, "run", "say done", "-w", str(ws), *_model_args(server, "openai"), env=ENV, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    records = read(db)
    assert _end(records).reason == "completed"
    assert len(_errors(records)) == server.refused() >= 8
    assert server.answered() == 1
