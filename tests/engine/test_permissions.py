"""Permissions in a running turn: commands ask unless allow-listed or `--yes`, paths outside the
workspace ask, every request and decision is an event, and nobody answering means no."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bubu.engine.permissions import Answer, Policy
from bubu.engine.session import new_session, start_turn
from bubu.events import PermissionDecision, PermissionRequest, Record, SystemNote, TurnStarted
from bubu.log.sqlite import SQLiteStore

from .helpers import call, calls, dispatches, make_host, outcomes, scripted, write_script

COMMAND = "echo ran > marker.txt"


def _run(
    tmp_path: Path,
    store: SQLiteStore,
    ws: Path,
    tool_call: dict[str, object],
    *,
    policy: Policy | None = None,
    answer: Answer | None = None,
) -> tuple[list[Record], list[PermissionRequest]]:
    script = write_script(tmp_path / "s.jsonl", [{"tool_calls": [tool_call]}, {"text": "ok"}])
    asked: list[PermissionRequest] = []

    def asker(request: PermissionRequest) -> Answer | None:
        asked.append(request)
        return answer

    provider = scripted(script)
    info = new_session(store, task="t", workspace=ws, model=provider.spec)
    # Outside the sandbox, where commands ask (a sandboxed command needs no approval).
    host = make_host(
        store, provider, policy=replace(policy or Policy(), sandbox="off"), asker=asker
    )
    assert start_turn(host, info, "t") == "completed"
    return store.read(info.id), asked


def _requests(records: list[Record]) -> list[PermissionRequest]:
    return [
        r.event.actions.permission_request
        for r in records
        if r.event.actions is not None and r.event.actions.permission_request is not None
    ]


def _decisions(records: list[Record]) -> list[PermissionDecision]:
    return [
        r.event.actions.permission_decision
        for r in records
        if r.event.actions is not None and r.event.actions.permission_decision is not None
    ]


def _only_outcome(records: list[Record]) -> tuple[bool, str]:
    ((_, out),) = next(iter(outcomes(records).values()))
    return out.is_error, out.result


def test_a_command_nobody_can_approve_is_denied(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    records, asked = _run(tmp_path, sqlite_store, ws, call("run_command", command=COMMAND))

    (request,) = _requests(records)
    (decision,) = _decisions(records)
    assert [a.request_id for a in asked] == [request.request_id], "the asker was asked once"
    assert request.tool == "run_command"
    assert COMMAND in request.summary
    assert decision.request_id == request.request_id
    assert (decision.decision, decision.by) == ("deny", "nobody")
    is_error, text = _only_outcome(records)
    assert is_error
    assert text.startswith("permission denied")
    assert "nobody" in text
    assert dispatches(records) == {}, "a denied call is never dispatched"
    assert not (ws / "marker.txt").exists()
    req_seq = next(r.seq for r in records if r.event.actions and r.event.actions.permission_request)
    dec_seq = next(
        r.seq for r in records if r.event.actions and r.event.actions.permission_decision
    )
    assert req_seq < dec_seq


def test_yes_allows_by_flag(tmp_path: Path, sqlite_store: SQLiteStore, ws: Path) -> None:
    records, asked = _run(
        tmp_path, sqlite_store, ws, call("run_command", command=COMMAND), policy=Policy(yes=True)
    )
    assert asked == []
    assert len(_requests(records)) == 1
    (decision,) = _decisions(records)
    assert (decision.decision, decision.by) == ("allow", "flag")
    assert (ws / "marker.txt").read_text() == "ran\n"
    assert _only_outcome(records)[0] is False
    started = next(
        r.event.content.note
        for r in records
        if isinstance(r.event.content, SystemNote) and isinstance(r.event.content.note, TurnStarted)
    )
    assert started.yes, "the policy is recorded so a recovery runs under it"


def test_an_allow_list_pattern_needs_no_request(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    records, asked = _run(
        tmp_path,
        sqlite_store,
        ws,
        call("run_command", command=COMMAND),
        policy=Policy(allow_commands=("echo *",)),
    )
    assert asked == []
    assert _requests(records) == []
    assert _decisions(records) == []
    assert (ws / "marker.txt").read_text() == "ran\n"
    assert list(dispatches(records)) == [c.call_id for _, c in calls(records)]


def test_an_allow_list_that_does_not_match_still_asks(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    records, _ = _run(
        tmp_path,
        sqlite_store,
        ws,
        call("run_command", command=COMMAND),
        policy=Policy(allow_commands=("ls *",)),
    )
    assert [d.decision for d in _decisions(records)] == ["deny"]
    assert not (ws / "marker.txt").exists()


@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_a_person_answers(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path, answer: Answer
) -> None:
    records, asked = _run(
        tmp_path, sqlite_store, ws, call("run_command", command=COMMAND), answer=answer
    )
    assert len(asked) == 1
    assert asked[0].tool == "run_command"
    (decision,) = _decisions(records)
    assert (decision.decision, decision.by) == (answer, "user")
    assert (ws / "marker.txt").exists() == (answer == "allow")
    is_error, text = _only_outcome(records)
    assert is_error == (answer == "deny")
    if answer == "deny":
        assert text.startswith("permission denied")
        assert "nobody" not in text


def test_reads_inside_the_workspace_do_not_ask(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    records, asked = _run(tmp_path, sqlite_store, ws, call("read_file", path="a.txt"))
    assert asked == []
    assert _requests(records) == []
    assert _only_outcome(records) == (False, "     1\talpha")


@pytest.mark.parametrize(("answer", "allowed"), [(None, False), ("allow", True)])
def test_a_path_outside_the_workspace_asks(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path, answer: Answer | None, allowed: bool
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    records, asked = _run(
        tmp_path, sqlite_store, ws, call("read_file", path=str(outside)), answer=answer
    )
    assert len(asked) == 1
    assert asked[0].tool == "read_file"
    (decision,) = _decisions(records)
    assert decision.decision == ("allow" if allowed else "deny")
    is_error, text = _only_outcome(records)
    assert ("secret" in text) == allowed
    assert is_error != allowed


@pytest.mark.parametrize(("answer", "written"), [(None, False), ("allow", True)])
def test_a_write_outside_the_workspace_asks_a_person_under_yes(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path, answer: Answer | None, written: bool
) -> None:
    outside = tmp_path / "elsewhere" / "notes.txt"
    outside.parent.mkdir()
    records, asked = _run(
        tmp_path,
        sqlite_store,
        ws,
        call("write_file", path=str(outside), content="x\n"),
        policy=Policy(yes=True),
        answer=answer,
    )
    assert len(asked) == 1, "--yes does not approve a write outside the workspace"
    assert asked[0].protected
    (decision,) = _decisions(records)
    assert (decision.decision, decision.by) == (
        "allow" if written else "deny",
        "user" if written else "nobody",
    )
    assert outside.exists() == written


def test_a_read_outside_the_workspace_is_still_approved_by_yes(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    records, asked = _run(
        tmp_path, sqlite_store, ws, call("read_file", path=str(outside)), policy=Policy(yes=True)
    )
    assert asked == []
    assert "secret" in _only_outcome(records)[1]
