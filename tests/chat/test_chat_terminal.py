"""`bubu chat` as a person uses it: in a real terminal (tmux), typing and reading the screen,
with the scripted model; then the other commands see the same session in the log."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu.log.sqlite import SQLiteStore
from engine.cli import bubu, bubu_json, only_session
from engine.helpers import call, write_script

from .tmux import Pane, chat_env

ANSWER = (
    "Let me run the check. The plan is **simple**:\n\n```python\nprint('from a code block')\n```"
)

STREAMED = "Streaming alpha bravo charlie delta echo foxtrot golf hotel india juliet."


@pytest.fixture
def open_pane(tmp_path: Path) -> Iterator[list[Pane]]:
    panes: list[Pane] = []
    yield panes
    for p in panes:
        p.close()


def _pane(panes: list[Pane], tmp_path: Path, db: Path, *args: str, cwd: Path, **env: str) -> Pane:
    pane = Pane(tmp_path, db, *args, cwd=cwd, env={**chat_env(db.parent), **env})
    panes.append(pane)
    return pane


def _in_order(shown: str, *lines: str) -> None:
    """The screen has a line holding each of `lines`, in this order (other lines between)."""
    rows = shown.splitlines()
    at = 0
    for want in lines:
        found = next((i for i in range(at, len(rows)) if want in rows[i]), None)
        assert found is not None, f"{want!r} not on the screen after line {at}:\n{shown}"
        at = found + 1


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws.resolve()


@pytest.mark.heavy
def test_plain_bubu_on_a_terminal_opens_a_chat_and_ctrl_d_leaves(
    tmp_path: Path, open_pane: list[Pane]
) -> None:
    db, ws = tmp_path / "bubu.db", _workspace(tmp_path)
    script = write_script(tmp_path / "s.jsonl", [{"text": "unused"}])
    pane = _pane(open_pane, tmp_path, db, cwd=ws, BUBU_MODEL=f"scripted:{script}")  # plain bubu
    pane.wait(f"bubu chat · new session · scripted:{script} · {ws}")
    pane.wait_prompt(0)
    pane.type("/help")
    shown = pane.wait("leave (on an empty line)")
    for command in (
        "/help",
        "/status",
        "/cost",
        "/context",
        "/compact",
        "/plan",
        "/model",
        "/fork",
        "/rewind",
        "/stop",
        "/resume",
        "/dismiss",
        "/exit",
    ):
        assert f"\n  {command} " in shown, command
    pane.keys("C-d")
    assert pane.exit_status() == 0


@pytest.mark.slow
def test_slash_commands_complete_unknown_ones_are_listed_and_history_is_private(
    tmp_path: Path, open_pane: list[Pane]
) -> None:
    db, ws = tmp_path / "bubu.db", _workspace(tmp_path)
    script = write_script(tmp_path / "s.jsonl", [{"text": "unused"}])
    pane = _pane(open_pane, tmp_path, db, "chat", "-m", f"scripted:{script}", cwd=ws)
    pane.wait_prompt(0)
    pane.type("/help")
    pane.type("/frobnicate")
    pane.wait("unknown command /frobnicate; the commands are /help /status")
    pane.type("/sta", enter=False)
    pane.keys("Tab")
    pane.wait(lambda s: s.rstrip().endswith("› /status"))
    pane.keys("Enter")
    pane.wait("there is no session yet: send a message first")
    key = "sk-" + "a1B2c3D4" * 4
    pane.type(f"/model {key}")  # not a model spec: one line, and the key is kept out of history
    pane.wait("bubu: error:")
    pane.type("/exit")
    assert pane.exit_status() == 0
    history = db.parent / "chat_history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    kept = history.read_text()
    assert "+/help" in kept
    assert "+/status" in kept
    assert key not in kept
    assert not (db.exists() and bubu_json(db, "sessions", "--json")), "no message, no session"


def test_bubu_without_a_terminal_prints_the_help(tmp_path: Path) -> None:
    done = bubu(tmp_path / "bubu.db")
    assert done.returncode == 2
    assert "Usage: bubu" in done.stdout + done.stderr
    assert "chat" in done.stdout + done.stderr
    chat = bubu(tmp_path / "bubu.db", "chat", "-m", "scripted:/dev/null")
    assert chat.returncode == 1
    assert chat.stderr.strip() == (
        'bubu: error: bubu chat needs a terminal; in a script use `bubu run "TASK"`'
    )


@pytest.mark.slow
def test_a_chat_session_from_task_to_exit_is_the_log_bubu_run_continues(
    tmp_path: Path, open_pane: list[Pane]
) -> None:
    db, ws = tmp_path / "bubu.db", _workspace(tmp_path)
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {
                "text": ANSWER,
                "tool_calls": [call("run_command", command="echo approved-ran")],
                "delay_s": 0.3,
            },
            {"text": "The check printed `approved-ran`: all **good**."},
            {
                "text": STREAMED,
                "delay_s": 2.5,
                "tool_calls": [call("run_command", command="sleep 60")],
            },
            {"text": "The long check was stopped; nothing else changed."},
            {"text": "Continued by bubu run."},
        ],
    )
    model = f"scripted:{script}"
    pane = _pane(
        open_pane,
        tmp_path,
        db,
        "chat",
        "-m",
        model,
        "--sandbox",
        "off",
        "--allow",
        "sleep *",
        cwd=ws,
    )
    pane.wait_prompt(0)

    # A task: the answer rendered as Markdown, a tool card, an approval answered y.
    pane.type("run the check")
    shown = pane.wait("? allow it [y/n/a]")
    assert "⏺ run_command echo approved-ran" in shown
    assert "│ echo approved-ran" in shown
    assert "a = always allow `echo *`" in shown
    assert "The plan is simple:" in shown, "bold rendered, not shown as **"
    assert "print('from a code block')" in shown
    assert "```" not in shown
    pane.type("y")
    shown = pane.wait("● turn completed")
    _in_order(
        shown,
        f"bubu chat · new session · {model} · {ws}",
        "› run the check",  # the live region never erases a line above it
        "Let me run the check. The plan is simple:",
        "print('from a code block')",
        "⏺ run_command echo approved-ran",
        "? run this command:",
        "? allow it [y/n/a] y",
        "⎿ approved-ran",
        "The check printed approved-ran: all good.",
        "● turn completed",
    )
    session = only_session(db)

    # /status: the same as `bubu status`.
    pane.wait_prompt(1)
    prompts = pane.prompt_count()
    pane.type("/status")
    shown = pane.wait(f"{session}  completed  (1 turn,")
    assert "2 model calls" in shown

    # A long turn, stopped with Ctrl-C while its command runs; the status line was there.
    pane.wait_prompt(prompts)
    pane.type("now the long check")
    # The answer streams: its first words are on the screen before its last one.
    pane.wait(lambda shown: "Streaming alpha" in shown and "juliet." not in shown)
    shown = pane.wait("⏺ run_command sleep 60")
    assert STREAMED in shown
    pane.wait("◦ step")
    pane.keys("C-c")
    shown = pane.wait("● turn stopped")
    assert "stopped: /resume continues it" in pane.wait("/resume continues it")

    # A follow-up: the session stays.
    prompts = pane.prompt_count()
    pane.type("what happened?")
    pane.wait("The long check was stopped; nothing else changed.")
    pane.wait_prompt(prompts)
    pane.type("/exit")
    shown = pane.wait(f"session {session} · `bubu chat -c`")
    assert pane.exit_status() == 0

    # The other commands see the same session.
    (row,) = bubu_json(db, "sessions", "--json")
    assert row["id"] == session
    status = bubu_json(db, "status", session, "--json")
    assert (status["turns"], status["status"]) == (3, "completed")
    show = bubu(db, "show", session)
    for line in (
        "› run the check",
        "› now the long check",
        "› what happened?",
        "⏺ run_command echo approved-ran",
        "The long check was stopped",
    ):
        assert line in show.stdout, line
    with SQLiteStore(db) as store:
        decisions = [
            r.event.actions.permission_decision
            for r in store.read(session)
            if r.event.actions is not None and r.event.actions.permission_decision is not None
        ]
    assert [(d.decision, d.by) for d in decisions] == [("allow", "user")]
    _in_the_web_ui(db, session, ws)
    done = bubu(db, "run", "-c", "one more", "-m", model, "-w", str(ws))
    assert done.returncode == 0, done.stderr
    assert f"bubu · {session} · {model} · {ws}" in done.stdout
    assert "Continued by bubu run." in done.stdout
    assert [r["id"] for r in bubu_json(db, "sessions", "--json")] == [session]
    assert bubu_json(db, "verify", "--json")["ok"]


def _in_the_web_ui(db: Path, session: str, ws: Path) -> None:
    """The web UI lists the chat's session and shows its transcript."""
    from starlette.testclient import TestClient

    from bubu.web import create_app

    token = "chat-test-token-0123456789"
    with SQLiteStore(db) as store:
        app = create_app(store, token=token, recover=False, workspace=str(ws))
        with TestClient(
            app, base_url="http://127.0.0.1:8642", headers={"authorization": f"Bearer {token}"}
        ) as client:
            listed = client.get("/api/sessions").json()["sessions"]
            assert session in {row["id"] for row in listed}
            page = client.get(f"/api/sessions/{session}")
            assert page.status_code == 200
            assert "now the long check" in page.text


@pytest.mark.slow
def test_always_allows_the_pattern_for_the_rest_of_the_session(
    tmp_path: Path, open_pane: list[Pane]
) -> None:
    db, ws = tmp_path / "bubu.db", _workspace(tmp_path)
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [call("run_command", command="echo one")]},
            {"tool_calls": [call("run_command", command="echo two")]},
            {"text": "both ran"},
        ],
    )
    pane = _pane(
        open_pane, tmp_path, db, "chat", "-m", f"scripted:{script}", "--sandbox", "off", cwd=ws
    )
    pane.wait_prompt(0)
    pane.type("echo twice")
    pane.wait("? allow it [y/n/a]")
    pane.type("a")
    shown = pane.wait("● turn completed")
    assert "allowed from now on: echo *" in shown
    assert shown.count("? allow it") == 1, "the second echo was not asked about"
    assert "⎿ two" in shown
    pane.keys("C-d")
    assert pane.exit_status() == 0
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        asked = [
            r
            for r in store.read(info.id)
            if r.event.actions is not None and r.event.actions.permission_request is not None
        ]
    assert len(asked) == 1


@pytest.mark.slow
def test_a_crashed_session_shows_its_recovery_notice_and_dismisses_it(
    tmp_path: Path, open_pane: list[Pane]
) -> None:
    db, ws = tmp_path / "bubu.db", _workspace(tmp_path)
    (ws / "a.txt").write_text("alpha\n")
    script = write_script(
        tmp_path / "s.jsonl",
        [{"tool_calls": [call("read_file", path="a.txt")]}, {"text": "Recovered and done."}],
    )
    model = f"scripted:{script}"
    crashed = bubu(db, "run", "read it", "-w", str(ws), "-m", model, failpoint="mid_tool")
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr
    session = only_session(db)
    pane = _pane(open_pane, tmp_path, db, "chat", "-c", "-m", model, cwd=ws)
    shown = pane.wait("/resume recovers and continues it")
    assert f"bubu chat · {session} · {model} · {ws}" in shown
    pane.type("/resume")
    shown = pane.wait("Recovered and done.")
    assert "┌ unfinished task detected" in shown
    assert "└ /dismiss dismisses it" in shown
    pane.wait("● turn completed")
    pane.type("/dismiss")
    pane.wait(f"dismissed the recovery notice of {session}")
    pane.type("/exit")
    assert pane.exit_status() == 0
    recovery = bubu_json(db, "status", session, "--json")["recovery"]
    assert recovery["dismissed"] is True
    assert json.dumps(recovery)  # the notice is in the log, dismissed


def test_history_skips_what_looks_like_a_secret(tmp_path: Path) -> None:
    from bubu import secrets
    from bubu.cli.chathistory import ChatHistory, looks_secret

    os.environ["BUBU_TEST_CHAT_TOKEN"] = "hunter2-but-longer"
    try:
        secrets.reset()
        assert looks_secret("use hunter2-but-longer to log in")
    finally:
        del os.environ["BUBU_TEST_CHAT_TOKEN"]
        secrets.reset()
    assert looks_secret("export OPENAI_API_KEY=abcd1234efgh")
    assert looks_secret("the key is ghp_" + "x" * 36)
    assert looks_secret("AKIA" + "ABCDEFGHIJKLMNOP")
    assert not looks_secret("fix the failing test in tests/test_api.py")
    assert not looks_secret("set MAX_RETRIES=5 in the config")
    path = tmp_path / "h"
    path.write_text("")
    path.chmod(0o644)
    history = ChatHistory(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, "a wider file is narrowed"
    history.store_string("fix the bug")
    history.store_string("PGPASSWORD=s3cr3t-value psql")
    kept = path.read_text()
    assert "+fix the bug" in kept
    assert "s3cr3t" not in kept


@pytest.mark.slow
def test_closing_the_terminal_mid_turn_suspends_it_without_a_traceback(
    tmp_path: Path, open_pane: list[Pane]
) -> None:
    db, ws = tmp_path / "bubu.db", _workspace(tmp_path)
    script = write_script(
        tmp_path / "s.jsonl", [{"text": "Thinking-slowly about it all", "delay_s": 60}]
    )
    err = tmp_path / "stderr.txt"
    pane = Pane(
        tmp_path,
        db,
        "chat",
        "-m",
        f"scripted:{script}",
        cwd=ws,
        env=chat_env(db.parent),
        stderr=err,
    )
    open_pane.append(pane)
    pane.wait_prompt(0)
    pane.type("take your time")
    pane.wait("Thinking-slowly")  # the model call streams: the turn is running
    pane.close()  # the terminal goes away: SIGHUP
    session = only_session(db)

    def suspended() -> bool:
        return bool(bubu_json(db, "status", session, "--json")["status"] == "suspended")

    deadline = time.monotonic() + 60
    while not suspended():
        assert time.monotonic() < deadline, "the turn was never suspended"
        time.sleep(0.1)
    assert "Traceback" not in err.read_text()
    assert bubu_json(db, "verify", "--json")["ok"]
