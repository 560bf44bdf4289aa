"""Bubu against real model servers: llama-cpp-python's OpenAI-compatible server with SmolLM2-135M,
and LiteLLM's proxy in front of it for the Anthropic Messages endpoint.

A 135M model is weak, so these tests assert what does not depend on its wits: the run ends in a
clear state (completed, or failed with a message), its events and token usage are in the log,
`bubu verify` passes, a SIGKILL during a model call or a tool call is recovered, and the window
Bubu works with is the one the server serves.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bubu.events import Error, ModelRequestNote, Record, SystemNote, TurnEnded, WindowLearned
from bubu.log.sqlite import SQLiteStore
from bubu.providers import windows
from engine.cli import bubu_cmd, bubu_env, bubu_json, only_session
from engine.helpers import call, write_script

from .conftest import MODEL, N_CTX, Server

pytestmark = [pytest.mark.real_server, pytest.mark.slow]

TASK = "Reply with one short sentence that says hello."


def bubu(
    db: Path,
    *args: str,
    failpoint: str | None = None,
    timeout: float = 120,
    server: Server | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `bubu` to its end, with what `server` needs in the environment (its key)."""
    env = {**bubu_env(db.parent, failpoint), **(server.env if server is not None else {})}
    return subprocess.run(
        bubu_cmd(db, *args),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _records(db: Path, session: str) -> list[Record]:
    with SQLiteStore(db) as store:
        return store.read(session)


def _ends(records: list[Record]) -> list[TurnEnded]:
    return [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnEnded)
    ]


def _digests(records: list[Record]) -> list[str]:
    return [
        c.note.request_digest
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, ModelRequestNote)
    ]


def _assert_clear_end(
    db: Path, session: str, rc: int, stderr: str, *, counted: bool = False
) -> list[Record]:
    """The turn ended once, completed or failed with a message, as the exit status says; the
    model's answers and their token usage are in the log (the server's counts when it sends
    them: llama-cpp-python's server sends none in a stream, LiteLLM counts them); the hash
    chain verifies."""
    records = _records(db, session)
    ends = _ends(records)
    assert len(ends) == 1, stderr
    (end,) = ends
    assert end.reason in ("completed", "failed"), stderr
    assert rc == (0 if end.reason == "completed" else 1), stderr
    if end.reason == "failed":
        assert end.message, "a failed turn says why"
    usage = [a.token_usage for r in records if (a := r.event.actions) and a.token_usage]
    errors = [c.message for r in records if isinstance(c := r.event.content, Error)]
    assert usage, f"no model response was recorded: {end.message}; {errors}"
    assert all((u.estimated_input_tokens or 0) > 0 for u in usage), usage
    if counted:
        # The server counted the call's tokens; Bubu recorded its figures.
        assert all(u.input_tokens > 0 for u in usage), usage
        assert all(u.output_tokens > 0 for u in usage), usage
    verify = bubu(db, "verify", session)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    return records


def _run(
    db: Path, ws: Path, *args: str, failpoint: str | None = None, server: Server | None = None
) -> subprocess.CompletedProcess[str]:
    return bubu(
        db,
        "run",
        *args,
        "-w",
        str(ws),
        "--jsonl",
        "--max-steps",
        "3",
        failpoint=failpoint,
        timeout=240,
        server=server,
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    (w / "notes.txt").write_text("hello from the workspace\n")
    return w


def test_a_short_task_against_the_openai_compatible_server(
    llama_server: Server, tmp_path: Path, ws: Path
) -> None:
    db = tmp_path / "bubu.db"
    done = _run(db, ws, TASK, "-m", f"openai:{MODEL}", "--base-url", llama_server.base_url)
    _assert_clear_end(db, only_session(db), done.returncode, done.stderr)


def test_a_short_task_through_litellm_s_anthropic_endpoint(
    litellm_proxy: Server, tmp_path: Path, ws: Path
) -> None:
    db = tmp_path / "bubu.db"
    # `--retry-for` bounds the wait when the server keeps failing: the turn ends either way.
    done = _run(
        db,
        ws,
        TASK,
        "-m",
        f"anthropic:{MODEL}",
        "--retry-for",
        "60s",
        "--base-url",
        litellm_proxy.base_url,
        server=litellm_proxy,
    )
    _assert_clear_end(db, only_session(db), done.returncode, done.stderr, counted=True)


def test_a_sigkill_during_a_model_call_is_recovered(
    llama_server: Server, tmp_path: Path, ws: Path
) -> None:
    db = tmp_path / "bubu.db"
    model = ("-m", f"openai:{MODEL}", "--base-url", llama_server.base_url)
    died = _run(db, ws, TASK, *model, failpoint="mid_model_call")
    assert died.returncode == -9, died.stderr  # killed while the server was streaming
    sid = only_session(db)
    lost = _digests(_records(db, sid))
    assert len(lost) == 1
    back = bubu(db, "recover", sid, "--jsonl", timeout=240)
    records = _assert_clear_end(db, sid, back.returncode, back.stderr)
    # The call lost in the crash was issued again, byte for byte.
    assert _digests(records)[:2] == [lost[0], lost[0]]


def test_a_sigkill_during_a_tool_call_is_recovered_and_the_server_continues(
    llama_server: Server, tmp_path: Path, ws: Path
) -> None:
    # llama-cpp-python's server does not stream tool calls (without tool_choice it drops the
    # tools; a streamed "auto" fails), so the call comes from a scripted first step, and the
    # recovered turn continues against the real server with that call in its history (which
    # it refuses with a 500 when the call's message has `content: null`). Not through LiteLLM:
    # its /v1/messages leaves `content` out of such a message, which llama-cpp-python's chat
    # template cannot render (an empty stream). `--retry-for` bounds the wait for a server
    # that keeps failing, so the turn ends either way.
    db = tmp_path / "bubu.db"
    script = write_script(
        tmp_path / "first.jsonl",
        [{"tool_calls": [call("run_command", command="sleep 30; echo finished > out.txt")]}],
    )
    died = _run(
        db, ws, "run the slow command", "-m", f"scripted:{script}", "--yes", failpoint="mid_tool"
    )
    assert died.returncode == -9, died.stderr
    sid = only_session(db)
    back = bubu(
        db,
        "recover",
        sid,
        "--jsonl",
        "-m",
        f"openai:{MODEL}",
        "--retry-for",
        "60s",
        "--base-url",
        llama_server.base_url,
        timeout=240,
    )
    records = _records(db, sid)
    notices = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote)
        and type(c.note).__name__ == "RecoveryNotice"
    ]
    assert len(notices) == 1
    assert notices[0].pending_review  # type: ignore[union-attr]
    assert not (ws / "out.txt").exists()  # the command died with its runner: nothing re-ran it
    records = _assert_clear_end(db, sid, back.returncode, back.stderr)
    # The recovered turn went on against the server, the interrupted call in its history: the
    # server answered it (SmolLM2 may answer nothing here, which is the model's failure, not a
    # refusal of the request).
    asked = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote)
        and isinstance(c.note, ModelRequestNote)
        and c.note.model == f"openai:{MODEL}"
    ]
    assert asked, "the recovered turn asked the server"
    errors = [c for r in records if isinstance(c := r.event.content, Error)]
    assert all(e.error_class == "empty_response" for e in errors), errors
    usage = [a.token_usage for r in records if (a := r.event.actions) and a.token_usage]
    served = [u for u in usage if u.model == f"openai:{MODEL}"]
    assert served or errors, "an answer, or the model's empty one, is in the log"
    assert all(u.served_model == MODEL for u in served), served


def test_bubu_context_reports_the_window_the_server_serves(
    llama_server: Server, tmp_path: Path, ws: Path
) -> None:
    # llama-cpp-python's server states its window nowhere Bubu can ask (no /props, no n_ctx in
    # /v1/models): only its overflow error says it. A task longer than the window makes the
    # server refuse the request; Bubu learns the window from that, finds nothing older to
    # compact (the task itself is too long), and ends the turn saying so.
    db = tmp_path / "bubu.db"
    colours = ("red", "green", "blue", "grey")
    inventory = "\n".join(
        f"{i:04d}: item {i} is a {colours[i % 4]} widget on shelf {i % 37}, bin {i % 11}."
        for i in range(300)
    )
    task = f"The inventory follows.\n{inventory}\n{TASK}"
    model = ("-m", f"openai:{MODEL}", "--base-url", llama_server.base_url)
    done = _run(db, ws, task, *model, "--retry-for", "60s")
    sid = only_session(db)
    records = _records(db, sid)
    (end,) = _ends(records)
    assert (end.reason, done.returncode) == ("failed", 1), done.stderr
    assert "compacting did not make the request fit" in (end.message or "")
    learned = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, WindowLearned)
    ]
    assert [(n.tokens, n.source) for n in learned] == [(N_CTX, windows.LEARNED)]
    errors = [c for r in records if isinstance(c := r.event.content, Error)]
    assert errors, "the server's refusal is in the log"
    assert all(e.error_class == "context_length" for e in errors), errors
    assert f"maximum context length is {N_CTX} tokens" in errors[0].message
    ctx = bubu_json(db, "context", sid, "--json")
    assert (ctx["window"], ctx["window_source"]) == (N_CTX, windows.LEARNED)
    verify = bubu(db, "verify", sid)
    assert verify.returncode == 0, verify.stdout + verify.stderr
