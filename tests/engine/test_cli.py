"""The agent CLI as real subprocesses: `bubu demo`, then `show`, `status`, `log` and `verify`
agreeing on its session; snapshots of the `--json` key sets; exit codes of `bubu run`; SIGTERM and
SIGINT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bubu.demo import FIX_NEW, FIX_OLD, TASK
from bubu.log.sqlite import SQLiteStore

from .cli import bubu, bubu_cmd, bubu_env, bubu_json, only_session
from .helpers import call, process_alive, wait_for, write_script

SNAPSHOT = Path(__file__).parent / "snapshots" / "cli_json_keys.json"
"""The key sets of `show --json` and `status --json`; BUBU_UPDATE_SNAPSHOTS=1 rewrites it."""


@dataclass(frozen=True, slots=True)
class Demo:
    db: Path
    session: str
    workspace: Path


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """One `bubu demo` run (with its SIGKILL and recovery) shared by the agreement tests."""
    root = tmp_path_factory.mktemp("demo")
    db = root / "bubu.db"
    done = bubu(db, "demo", "--dir", str(root / "project"))
    assert done.returncode == 0, done.stdout + done.stderr
    return Demo(db=db, session=only_session(db), workspace=root / "project")


@pytest.mark.heavy
def test_the_demo_fixes_the_project(demo: Demo) -> None:
    tests = subprocess.run(
        [sys.executable, "-m", "unittest", "-q"],
        cwd=demo.workspace,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tests.returncode == 0, tests.stderr
    fixed = (demo.workspace / "stats.py").read_text()
    assert FIX_NEW in fixed
    assert FIX_OLD not in fixed


def test_show_status_log_and_verify_agree(demo: Demo) -> None:
    show = bubu_json(demo.db, "show", demo.session, "--json")
    status = bubu_json(demo.db, "status", demo.session, "--json")
    verify = bubu_json(demo.db, "verify", demo.session, "--json")
    plain_log = bubu(demo.db, "log", demo.session).stdout.splitlines()
    lines = [
        json.loads(x) for x in bubu(demo.db, "log", demo.session, "--jsonl").stdout.splitlines()
    ]

    (report,) = verify["sessions"]
    assert verify["ok"]
    assert report["ok"]
    n = report["high_water"]
    assert n == status["events"] == show["session"]["events"] == len(lines) == len(plain_log)
    assert [x["seq"] for x in lines] == list(range(1, n + 1))
    assert lines[-1]["hash"] == report["digest"]
    assert [ln.split()[1] for ln in plain_log] == [x["hash"][:12] for x in lines]

    events = [x["event"] for x in lines]
    calls = [
        e["content"]["call_id"]
        for e in events
        if e.get("content", {}).get("kind") == "function_call"
    ]
    cards = [i for i in show["items"] if i["kind"] == "tool"]
    assert [c["call_id"] for c in cards] == calls
    answered = [
        e["content"]["call_id"]
        for e in events
        if e.get("content", {}).get("kind") == "function_response"
    ]
    assert sorted(answered) == sorted(calls), "every call has exactly one outcome"
    usages = [e["actions"]["token_usage"] for e in events if "token_usage" in e.get("actions", {})]
    assert status["usage"] == show["usage"]
    assert status["usage"]["model_calls"] == len(usages)
    assert status["usage"]["input_tokens"] == sum(u["input_tokens"] for u in usages)
    assert show["items"][0] == {**show["items"][0], "kind": "user", "text": TASK}

    assert status["status"] == "completed"
    assert status["turns"] == 1
    rec = status["recovery"]
    assert rec["status"] == "ready"
    assert not rec["dismissed"]
    assert rec["verified_applied"] == ["edit_file stats.py"]
    assert any("check_style.py" in p for p in rec["pending_review"])
    interrupted = [c for c in cards if c["status"] == "interrupted"]
    assert [c["name"] for c in interrupted] == ["run_command"]


def test_status_counts_its_turns_in_words(demo: Demo) -> None:
    head = bubu(demo.db, "status", demo.session).stdout.splitlines()[0]
    events = bubu_json(demo.db, "status", demo.session, "--json")["events"]
    assert head == f"{demo.session}  completed  (1 turn, {events} events)"


def _keys(obj: dict[str, Any]) -> list[str]:
    return sorted(obj)


def test_json_key_sets_match_the_snapshot(demo: Demo) -> None:
    show = bubu_json(demo.db, "show", demo.session, "--json")
    status = bubu_json(demo.db, "status", demo.session, "--json")
    items: dict[str, list[str]] = {}
    for item in show["items"]:
        items.setdefault(item["kind"], _keys(item))
        assert _keys(item) == items[item["kind"]], f"items of kind {item['kind']} differ in keys"
    got = {
        "show": {
            "top": _keys(show),
            "session": _keys(show["session"]),
            "usage": _keys(show["usage"]),
            "items": items,
        },
        "status": {
            "top": _keys(status),
            "usage": _keys(status["usage"]),
            "recovery": _keys(status["recovery"]),
        },
    }
    if os.environ.get("BUBU_UPDATE_SNAPSHOTS"):
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert got == json.loads(SNAPSHOT.read_text())
    assert {
        "status",
        "silent_retries",
        "verified_applied",
        "pending_review",
        "reason",
        "dismissed",
    } <= set(status["recovery"])


# ---- exit codes ---------------------------------------------------------------------------------

SLOW = "echo $$ > pid.txt; sleep 60; echo late > late.txt"


def _project(tmp_path: Path, lines: list[dict[str, object]]) -> tuple[Path, Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    return tmp_path / "bubu.db", ws, write_script(tmp_path / "s.jsonl", lines)


def _run(db: Path, ws: Path, script: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return bubu(db, "run", "the task", "-w", str(ws), "-m", f"scripted:{script}", *extra)


@pytest.mark.parametrize(
    ("lines", "extra", "code", "state"),
    [
        pytest.param(
            [{"tool_calls": [call("read_file", path="a.txt")]}, {"text": "ok"}],
            (),
            0,
            "completed",
            id="completed",
        ),
        pytest.param(
            [{"text": "x", "error": {"status": 401, "message": "bad key"}}],
            (),
            1,
            "failed",
            id="failed",
        ),
        pytest.param(
            [{"tool_calls": [call("read_file", path="a.txt")]}] * 3,
            ("--max-steps", "1"),
            3,
            "stopped",
            id="stopped",
        ),
    ],
)
@pytest.mark.heavy
def test_exit_status_says_how_the_turn_ended(
    tmp_path: Path, lines: list[dict[str, object]], extra: tuple[str, ...], code: int, state: str
) -> None:
    db, ws, script = _project(tmp_path, lines)
    done = _run(db, ws, script, *extra)
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    status = bubu_json(db, "status", only_session(db), "--json")
    assert status["status"] == state


def test_jsonl_prints_one_event_per_line(tmp_path: Path) -> None:
    db, ws, script = _project(
        tmp_path, [{"tool_calls": [call("read_file", path="a.txt")]}, {"text": "ok"}]
    )
    done = _run(db, ws, script, "--jsonl")
    assert done.returncode == 0
    seqs = [json.loads(line)["seq"] for line in done.stdout.splitlines()]
    assert seqs == list(range(1, len(seqs) + 1))
    with SQLiteStore(db) as store:
        assert len(seqs) == store.sessions()[0].high_water


def _start_slow(tmp_path: Path) -> tuple[Path, Path, subprocess.Popen[str]]:
    db, ws, script = _project(
        tmp_path,
        [{"tool_calls": [call("run_command", command=SLOW)]}, {"text": "after the command"}],
    )
    proc = subprocess.Popen(
        bubu_cmd(
            db,
            "run",
            "slow",
            "-w",
            str(ws),
            "-m",
            f"scripted:{script}",
            "--allow",
            SLOW,
            "--sandbox",
            "off",
        ),
        env=bubu_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    pid_file = ws / "pid.txt"
    try:
        wait_for(
            lambda: pid_file.exists() and pid_file.read_text().strip().isdigit(),
            "the command to start",
        )
    except AssertionError:
        proc.kill()
        raise
    return db, ws, proc


@pytest.mark.heavy
def test_sigterm_suspends_and_resume_finishes(tmp_path: Path) -> None:
    db, ws, proc = _start_slow(tmp_path)
    command_pid = int((ws / "pid.txt").read_text())
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 4, out + err
    assert not process_alive(command_pid), "the command's group was killed on shutdown"
    session = only_session(db)
    status = bubu_json(db, "status", session, "--json")
    assert status["status"] == "suspended"
    assert bubu_json(db, "verify", session, "--json")["ok"]

    resumed = bubu(db, "resume", session)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert bubu_json(db, "status", session, "--json")["status"] == "completed"
    show = bubu_json(db, "show", session, "--json")
    texts = [i["text"] for i in show["items"] if i["kind"] == "assistant"]
    assert texts == ["after the command"]
    (card,) = [i for i in show["items"] if i["kind"] == "tool"]
    assert card["is_error"]
    assert not (ws / "late.txt").exists()


@pytest.mark.heavy
def test_sigint_stops(tmp_path: Path) -> None:
    db, ws, proc = _start_slow(tmp_path)
    command_pid = int((ws / "pid.txt").read_text())
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, out + err
    assert "Traceback" not in err
    assert not process_alive(command_pid)
    session = only_session(db)
    assert bubu_json(db, "status", session, "--json")["status"] == "stopped"
    # A stopped turn is the user's to resume; recovery leaves it alone.
    assert bubu_json(db, "recover", "--json") == []
    assert bubu_json(db, "status", session, "--json")["status"] == "stopped"
