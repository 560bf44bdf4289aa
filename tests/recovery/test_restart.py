"""Restarts beyond the matrix: a kill during recovery itself, a crash loop that must end `blocked`,
the recovery notice in `status --json` and its dismissal, and turns recovery must leave alone."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from bubu.events import NoticeDismissed, Record, RecoveryNotice, SystemNote, kind_of

from .harness import (
    Scenario,
    counted,
    counter_lines,
    last_json_document,
    lay_out,
    outcomes,
    read_log,
    wait_for_file,
)
from .proc import bubu, bubu_cmd, bubu_env, bubu_json, only_session

MIXED = Scenario(
    name="mixed",
    files={"a.txt": "alpha\n", "b.txt": "beta\n"},
    lines=[
        # The edit comes first: mid_tool waits (briefly) for the first call, so it is usually
        # applied.
        {
            "text": "all at once",
            "tool_calls": [
                {
                    "name": "edit_file",
                    "arguments": {"path": "a.txt", "old": "alpha", "new": "alpha beta"},
                },
                {"name": "read_file", "arguments": {"path": "b.txt"}},
                {"name": "run_command", "arguments": {"command": counted("c1")}},
            ],
        },
        {"text": "done"},
    ],
)

READ = Scenario(
    name="read",
    files={"a.txt": "alpha\n"},
    lines=[
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
        {"text": "done"},
    ],
)


def _prefix(records: list[Record]) -> list[tuple[int, str]]:
    return [(r.seq, r.hash) for r in records]


def _crashed(
    root: Path, scenario: Scenario, failpoint: str = "mid_tool"
) -> tuple[Path, Path, Path, str]:
    p = lay_out(root, scenario)
    run = bubu(p.db, *p.run_args(scenario), failpoint=failpoint)
    assert run.returncode == -9, run.stdout + run.stderr
    return p.db, p.ws, p.counter, only_session(p.db)


@dataclass(frozen=True, slots=True)
class KilledRecovery:
    """A run killed at mid_tool, its recovery killed at mid_recovery, then a clean restart."""

    db: Path
    ws: Path
    counter: Path
    session: str
    logs: tuple[list[Record], list[Record], list[Record]]
    rc: int
    output: str


@pytest.fixture(scope="module")
def killed_recovery(tmp_path_factory: pytest.TempPathFactory) -> KilledRecovery:
    """Run the three processes once for the tests below."""
    db, ws, counter, session = _crashed(tmp_path_factory.mktemp("mid_recovery"), MIXED)
    first = read_log(db)
    again = bubu(db, "recover", "--json", failpoint="mid_recovery")
    assert again.returncode == -9, again.stdout + again.stderr
    second = read_log(db)
    done = bubu(db, "recover", "--json")
    return KilledRecovery(
        db=db,
        ws=ws,
        counter=counter,
        session=session,
        logs=(first, second, read_log(db)),
        rc=done.returncode,
        output=done.stdout + done.stderr,
    )


@pytest.mark.heavy
def test_a_kill_during_recovery_recovers_cleanly_next_time(killed_recovery: KilledRecovery) -> None:
    k = killed_recovery
    first, second, final = k.logs
    assert k.rc == 0, k.output
    assert _prefix(second[: len(first)]) == _prefix(first)
    assert _prefix(final[: len(second)]) == _prefix(second)
    assert bubu(k.db, "verify").returncode == 0
    assert (k.ws / "a.txt").read_text() == "alpha beta\n", "the edit is applied exactly once"
    assert counter_lines(k.counter).count("c1") <= 1
    assert all(len(v) == 1 for v in outcomes(final).values())
    assert bubu_json(k.db, "status", k.session, "--json")["status"] == "completed"


def test_the_notice_after_a_killed_recovery_still_names_what_awaits_review(
    killed_recovery: KilledRecovery,
) -> None:
    rec = bubu_json(killed_recovery.db, "status", killed_recovery.session, "--json")["recovery"]
    assert any("c1" in item for item in rec["pending_review"]), rec
    assert "edit_file a.txt" in rec["verified_applied"] + rec["silent_retries"]


WRITE = Scenario(
    name="write",
    files={"a.txt": "alpha\n"},
    lines=[
        {
            "tool_calls": [
                {
                    "name": "edit_file",
                    "arguments": {"path": "a.txt", "old": "alpha", "new": "omega"},
                }
            ]
        },
        {"text": "done"},
    ],
)


@pytest.mark.heavy
def test_recovery_removes_the_temporary_file_of_a_killed_write(tmp_path: Path) -> None:
    db, ws, _, _ = _crashed(tmp_path, WRITE, failpoint="after_dispatch")
    # What a kill in the middle of atomic_write leaves: its half-written temporary file
    # (named as atomic_write names it). The matrix meets this only by chance, under load.
    fd, stray = tempfile.mkstemp(dir=ws, prefix=".a.txt.", suffix=".tmp")
    os.write(fd, b"ome")
    os.close(fd)

    assert bubu(db, "recover").returncode == 0
    assert (ws / "a.txt").read_text() == "omega\n"
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt"], f"{Path(stray).name} was left behind"


@pytest.mark.slow
def test_a_second_crash_at_the_same_dispatch_is_blocked_not_looped(tmp_path: Path) -> None:
    db, _, _, session = _crashed(tmp_path, READ)

    looped = bubu(db, "recover", "--json", failpoint="mid_tool")
    assert looped.returncode == -9, "the re-run of the read crashed again"

    reason = _recovered_as_blocked(db, session)
    assert "crash loop" in reason


def _recovered_as_blocked(db: Path, session: str) -> str:
    """Recover: it must end `blocked`, stay so, and not be retried by itself; the reason."""
    blocked = bubu(db, "recover", "--json")
    assert blocked.returncode == 5, blocked.stdout + blocked.stderr
    (result,) = last_json_document(blocked.stdout)
    assert (result["outcome"], result["plan"]) == ("blocked", "blocked")
    status = bubu_json(db, "status", session, "--json")
    assert status["status"] == "blocked"
    assert status["recovery"]["status"] == "blocked"
    assert bubu(db, "verify").returncode == 0

    log = read_log(db)
    quiet = bubu(db, "recover", "--json")
    assert quiet.returncode == 0
    assert last_json_document(quiet.stdout) == []
    assert _prefix(read_log(db)) == _prefix(log), "a blocked session is not retried by itself"
    return str(status["recovery"]["reason"])


@pytest.mark.slow
def test_deaths_during_model_calls_back_to_back_end_blocked_not_looped(tmp_path: Path) -> None:
    # A model call has no side effect, so a death during one is retried, but not forever: the
    # run dies at the call, then two recoveries die at it again, and the third stops.
    db, _, _, session = _crashed(tmp_path, READ, failpoint="mid_model_call")
    for _ in range(2):
        again = bubu(db, "recover", "--json", failpoint="mid_model_call")
        assert again.returncode == -9, again.stdout + again.stderr
    assert _recovered_as_blocked(db, session) == (
        "crash loop: the process died during a model call 3 times in a row, with no answer "
        "committed in between"
    )


@pytest.mark.slow
def test_a_death_during_a_model_call_after_progress_starts_the_count_again(
    tmp_path: Path,
) -> None:
    db, _, _, session = _crashed(tmp_path, READ, failpoint="mid_model_call")
    again = bubu(db, "recover", "--json", failpoint="mid_model_call")
    assert again.returncode == -9, again.stdout + again.stderr
    # This recovery gets the answer (one tool call) committed, then dies at the next model call:
    # the third death during a model call, but not the third in a row.
    progressed = bubu(db, "recover", "--json", failpoint="mid_model_call@2")
    assert progressed.returncode == -9, progressed.stdout + progressed.stderr
    done = bubu(db, "recover", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    status = bubu_json(db, "status", session, "--json")
    assert status["status"] == "completed"
    assert status["recovery"]["status"] == "ready"
    notices = [
        c.note
        for r in read_log(db)
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, RecoveryNotice)
    ]
    assert [n.dropped_model_calls for n in notices] == [1, 1, 1]


@pytest.mark.slow
def test_status_carries_the_notice_until_dismissed(tmp_path: Path) -> None:
    db, _, _, session = _crashed(tmp_path, MIXED)
    assert bubu(db, "recover").returncode == 0

    before = bubu_json(db, "status", session, "--json")
    rec = before["recovery"]
    assert {
        "status",
        "silent_retries",
        "verified_applied",
        "pending_review",
        "reason",
        "dismissed",
    } <= set(rec)
    assert rec["status"] == "ready"
    assert rec["reason"] is None
    assert rec["dismissed"] is False
    # The edit is applied unless the kill beat it (the plan proves which from the file's hash).
    assert sorted(rec["silent_retries"] + rec["verified_applied"]) == [
        "edit_file a.txt",
        "read_file b.txt",
    ]
    assert "read_file b.txt" in rec["silent_retries"]
    assert len(rec["pending_review"]) == 1
    assert "c1" in rec["pending_review"][0]
    plain = bubu(db, "status", session).stdout
    assert "awaiting your review" in plain
    show_before = bubu_json(db, "show", session, "--json")
    log = read_log(db)

    dismissed = bubu(db, "dismiss", session)
    assert dismissed.returncode == 0, dismissed.stderr

    after = bubu_json(db, "status", session, "--json")
    assert after["recovery"] == {**rec, "dismissed": True}
    assert {**after, "recovery": None, "events": 0} == {**before, "recovery": None, "events": 0}
    assert after["events"] == before["events"] + 1
    added = read_log(db)[len(log) :]
    assert [kind_of(r.event) for r in added] == ["notice_dismissed"]
    note = added[0].event.content
    assert isinstance(note, SystemNote)
    assert note.note == NoticeDismissed(notice_seq=rec["seq"])
    show_after = bubu_json(db, "show", session, "--json")
    assert show_after["items"][:-1] == show_before["items"]
    assert "awaiting your review" not in bubu(db, "status", session).stdout

    twice = bubu(db, "dismiss", session)
    assert twice.returncode == 0
    assert "no recovery notice" in twice.stdout
    assert len(read_log(db)) == len(log) + 1


GATE = "echo $$ > pid.txt; while [ ! -e go ]; do sleep 0.02; done"

GATED = Scenario(
    name="gated",
    files={"a.txt": "alpha\n"},
    lines=[
        {"tool_calls": [{"name": "run_command", "arguments": {"command": counted("c1")}}]},
        {"tool_calls": [{"name": "run_command", "arguments": {"command": GATE}}]},
        {"text": "done"},
    ],
)


@pytest.mark.heavy
def test_dismissing_during_the_continuation_changes_nothing(tmp_path: Path) -> None:
    # Twin sessions crash the same way; one notice is dismissed while its continuation runs.
    kinds: dict[str, list[str]] = {}
    for twin in ("kept", "dismissed"):
        db, ws, _, session = _crashed(tmp_path / twin, GATED)
        proc = subprocess.Popen(
            bubu_cmd(db, "recover"),
            env=bubu_env(db.parent),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for_file(ws / "pid.txt")
            if twin == "dismissed":
                done = bubu(db, "dismiss", session)
                assert done.returncode == 0, done.stderr
        finally:
            (ws / "go").touch()  # releases the gated command whatever happened
            out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, out + err
        log = read_log(db)
        labels = [kind_of(r.event) for r in log]
        if twin == "dismissed":
            dismissed = labels.index("notice_dismissed")
            assert labels.index("recovery_notice") < dismissed < labels.index("turn_ended")
        kinds[twin] = [k for k in labels if k != "notice_dismissed"]
        assert bubu_json(db, "status", session, "--json")["status"] == "completed"
    assert kinds["dismissed"] == kinds["kept"]


SLOW = Scenario(
    name="slow",
    files={"a.txt": "alpha\n"},
    lines=[
        {
            "tool_calls": [
                {"name": "run_command", "arguments": {"command": "echo $$ > pid.txt; sleep 60"}}
            ]
        },
        {"text": "done"},
    ],
)

LONG = Scenario(
    name="long",
    files={"a.txt": "alpha\n"},
    lines=[{"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}] * 3
    + [{"text": "done"}],
)


@pytest.mark.slow
def test_stopped_and_suspended_turns_are_never_continued(tmp_path: Path) -> None:
    stopped = lay_out(tmp_path / "stopped", LONG)
    done = bubu(stopped.db, *stopped.run_args(LONG), "--max-steps", "1")
    assert done.returncode == 3, done.stdout + done.stderr

    # A suspended turn, in the same database: SIGTERM while its command runs.
    suspended = lay_out(tmp_path / "suspended", SLOW)
    proc = subprocess.Popen(
        bubu_cmd(stopped.db, *suspended.run_args(SLOW)),
        env=bubu_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_file(suspended.ws / "pid.txt")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 4

    sessions = {s["status"]: s["id"] for s in bubu_json(stopped.db, "sessions", "--json")}
    assert set(sessions) == {"stopped", "suspended"}
    logs = {
        state: bubu(stopped.db, "log", sid, "--jsonl").stdout for state, sid in sessions.items()
    }

    assert bubu_json(stopped.db, "recover", "--json") == []
    for state, sid in sessions.items():
        (one,) = bubu_json(stopped.db, "recover", sid, "--json")
        assert (one["outcome"], one["status"]) == ("nothing", state)
    # Starting any other run recovers crashed sessions first; these are not crashed.
    other = lay_out(tmp_path / "other", READ)
    assert bubu(stopped.db, *other.run_args(READ)).returncode == 0
    for state, sid in sessions.items():
        assert bubu(stopped.db, "log", sid, "--jsonl").stdout == logs[state], (
            f"the {state} turn was touched"
        )
