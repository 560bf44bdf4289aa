"""No secret reaches the log: a real `bubu run` with keys in its environment, a scripted model
that tries to show them, and every way the log leaves the machine (log, export, blobs, the file)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bubu.log import codec
from bubu.log.sqlite import SQLiteStore
from bubu.log.transfer import export_lines
from engine.cli import bubu_cmd, bubu_env, only_session
from engine.helpers import call, write_script

KEY = "sk-test-Zq81mW0pLx3vTe5uRk7y"
TOKEN = 'svc/tok"en\\Q4r8T2w6'  # a slash, a quote and a backslash: escaped in any JSON
SECRETS = {"OPENAI_API_KEY": KEY, "MY_SERVICE_TOKEN": TOKEN}


def run(
    db: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`bubu ARGS…` with the secrets in its environment."""
    return subprocess.run(
        bubu_cmd(db, *args),
        env={**bubu_env(db.parent), **SECRETS, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def assert_no_secret(db: Path, sid: str, *, cli: bool = True) -> str:
    """Neither value is in `bubu log --jsonl`, `bubu export`, any blob or the database files;
    the log verifies. Returns the JSONL log. (`cli=False`: the same, read in-process.)"""
    if cli:
        log = run(db, "log", sid, "--jsonl")
        assert log.returncode == 0, log.stderr
        export = run(db, "export", sid)
        assert export.returncode == 0, export.stderr
        verify = run(db, "verify", sid)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert verify.stdout.startswith("ok"), verify.stdout
        log_text, export_text = log.stdout, export.stdout
    else:
        with SQLiteStore(db) as store:
            assert store.verify(sid).ok
            log_text = "".join(
                f'{{"event":{codec.encode(r.event).decode()}}}\n' for r in store.read(sid)
            )
            export_text = b"\n".join(export_lines(store, store.session(sid))).decode()
    with sqlite3.connect(db) as conn:
        blobs = [bytes(r[0]) for r in conn.execute("SELECT data FROM blobs")]
    files = [f.read_bytes() for f in db.parent.glob(db.name + "*")]
    forms = [KEY, TOKEN, json.dumps(TOKEN)[1:-1], "svc/tok", "Q4r8T2w6"]
    for where, text in [("log", log_text), ("export", export_text)]:
        for form in forms:
            assert form not in text, (where, form)
    for data in blobs + files:
        for form in forms:
            assert form.encode() not in data
    return log_text


@pytest.mark.heavy
def test_commands_do_not_see_keys_and_nothing_they_print_is_logged(tmp_path: Path) -> None:
    """`env | grep -i key`, `echo $OPENAI_API_KEY`, a key read from a file in a large (offloaded)
    output, and a model that writes the key into its text, thinking and a command."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "config.json").write_text(json.dumps({"api_key": KEY, "token": TOKEN}) + "\n")
    script = write_script(
        tmp_path / "model.jsonl",
        [
            {
                "tool_calls": [
                    call(
                        "run_command",
                        command='env | grep -i -e key -e token; echo "[$OPENAI_API_KEY]"',
                    )
                ]
            },
            {
                "tool_calls": [
                    call("run_command", command='yes "$(cat config.json)" | head -n 3000')
                ]
            },
            {
                "thinking": f"the key is {KEY}",
                "text": f"found {KEY} and {TOKEN}",
                "tool_calls": [call("run_command", command=f"echo {KEY} | wc -c")],
            },
            {"text": "done"},
        ],
    )
    done = run(
        tmp_path / "b.db",
        "run",
        "look for keys",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
    )
    assert done.returncode == 0, done.stderr
    db = tmp_path / "b.db"
    sid = only_session(db)
    log = assert_no_secret(db, sid)
    results = [
        json.loads(line)["event"]["content"]["result"]
        for line in log.splitlines()
        if '"function_response"' in line
    ]
    # The command saw neither variable: no name in `env`, an empty expansion.
    assert "OPENAI_API_KEY" not in results[0]
    assert "MY_SERVICE_TOKEN" not in results[0]
    assert "[]" in results[0]
    # The file's copy of the key, 3000 times over, was redacted in the placeholder and the blob.
    assert "[redacted:OPENAI_API_KEY]" in results[1]
    assert "[redacted:MY_SERVICE_TOKEN]" in results[1]
    with sqlite3.connect(db) as conn:
        (blob,) = [bytes(r[0]) for r in conn.execute("SELECT data FROM blobs")]
    assert blob.count(b"[redacted:OPENAI_API_KEY]") == 3000
    # The model's own copy never reached the command: it ran what the log holds.
    assert log.count("[redacted:OPENAI_API_KEY]") >= 6
    assert "echo [redacted:OPENAI_API_KEY] | wc -c" in log


@pytest.mark.slow
def test_env_passes_a_secret_on_and_the_log_still_hides_it(tmp_path: Path) -> None:
    """With --env MY_SERVICE_TOKEN the command sees the value (and only that one); the log shows
    `[redacted:MY_SERVICE_TOKEN]`, and the turn records the name, never the value."""
    ws = tmp_path / "ws"
    ws.mkdir()
    check = (
        'test "$MY_SERVICE_TOKEN" = "$(cat expected)" && echo SEEN; echo "[$OPENAI_API_KEY]"; '
        'python3 -c \'import json, os; print(json.dumps({"t": os.environ["MY_SERVICE_TOKEN"]}))\''
    )
    (ws / "expected").write_text(TOKEN)
    script = write_script(
        tmp_path / "model.jsonl",
        [
            {"tool_calls": [call("run_command", command=check)]},
            {"tool_calls": [call("run_command", command='yes "$MY_SERVICE_TOKEN" | head -n 4000')]},
            {"text": "done"},
        ],
    )
    db = tmp_path / "b.db"
    done = run(
        db,
        "run",
        "use the token",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        "--env",
        "MY_SERVICE_TOKEN",
    )
    assert done.returncode == 0, done.stderr
    sid = only_session(db)
    log = assert_no_secret(db, sid)
    events = [json.loads(line)["event"] for line in log.splitlines()]
    results = [
        e["content"]["result"]
        for e in events
        if e.get("content", {}).get("kind") == "function_response"
    ]
    assert "SEEN" in results[0]
    assert "[]" in results[0]  # the key was not passed on
    assert '{"t": "[redacted:MY_SERVICE_TOKEN]"}' in results[0]  # found JSON-escaped
    assert results[1].count("[redacted:MY_SERVICE_TOKEN]") >= 10  # offloaded, redacted
    (started,) = [
        e["content"]["note"]
        for e in events
        if e.get("content", {}).get("note", {}).get("note") == "turn_started"
    ]
    assert started["pass_env"] == ["MY_SERVICE_TOKEN"]


def test_env_refuses_a_name_that_is_not_set_or_not_a_name(tmp_path: Path) -> None:
    """--env takes names of variables that are set; anything else is a one-line error that
    creates no session."""
    db = tmp_path / "b.db"
    for bad, says in [
        ("NOT_SET_ANYWHERE_TOKEN", "is not set"),
        ("A=b", "only the name"),
        ("1X", "not an environment variable name"),
    ]:
        done = run(db, "run", "x", "-m", "scripted:/dev/null", "--env", bad)
        assert done.returncode == 2, done.stderr
        assert says in done.stderr
        assert "Traceback" not in done.stderr
    if db.exists():
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)


def test_help_lists_env() -> None:
    """`bubu run --help` documents --env."""
    out = subprocess.run(
        [sys.executable, "-m", "bubu", "run", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--env NAME" in out


@pytest.mark.heavy
def test_a_recovered_turn_passes_on_the_names_it_was_started_with(tmp_path: Path) -> None:
    """A run started with --env dies (SIGKILL before its second model call); `bubu recover`
    without --env gives the continued turn's command the same variable."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "expected").write_text(TOKEN)
    check = 'test "$MY_SERVICE_TOKEN" = "$(cat expected)" && echo SEEN; echo "[$OPENAI_API_KEY]"'
    script = write_script(
        tmp_path / "model.jsonl",
        [
            {"tool_calls": [call("run_command", command="echo first")]},
            {"tool_calls": [call("run_command", command=check)]},
            {"text": "done"},
        ],
    )
    db = tmp_path / "b.db"
    died = run(
        db,
        "run",
        "use it",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        "--env",
        "MY_SERVICE_TOKEN",
        env={"BUBU_FAILPOINT": "before_model_call@2"},
    )
    assert died.returncode == -9, died.stderr
    sid = only_session(db)
    done = run(db, "recover", sid, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    log = assert_no_secret(db, sid, cli=False)
    results = [
        json.loads(line)["event"]["content"]["result"]
        for line in log.splitlines()
        if '"function_response"' in line
    ]
    assert "SEEN" in results[-1]
    assert "[]" in results[-1]


@pytest.mark.slow
def test_a_remembered_note_holding_a_key_keeps_only_its_redaction(tmp_path: Path) -> None:
    db, ws = tmp_path / "bubu.db", tmp_path / "ws"
    ws.mkdir()
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [call("remember", key="deploy", text=f"the deploy key is {KEY}")]},
            {"text": "kept"},
        ],
    )
    done = run(db, "run", "remember the key", "-w", str(ws), "-m", f"scripted:{script}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert_no_secret(db, only_session(db))
    shown = run(db, "memory", "show", "deploy", "-w", str(ws))
    assert shown.returncode == 0, shown.stderr
    assert KEY not in shown.stdout
    assert "[redacted:OPENAI_API_KEY]" in shown.stdout
