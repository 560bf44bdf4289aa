"""Deny rules: a matching command or path is refused without asking, before the allow-list, in
the sandbox or not, under --yes; the model's result names the rule; the turn records the rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.engine.permissions import Policy, deny_rule
from bubu.engine.session import new_session, start_turn
from bubu.events import PermissionRequest, SystemNote, TurnStarted
from bubu.log.sqlite import SQLiteStore

from .helpers import call, make_host, outcomes, scripted, write_script


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("rm -rf build", "rm *"),
        ("ls && rm -rf build", "rm *"),
        ("/bin/rm -rf build", "rm *"),
        ("bash -c 'rm -rf build'", "rm *"),
        ("find . -name x | xargs rm", "rm *"),
        ("echo $(rm -rf build)", "rm *"),
        ("git push --force origin main", "git push *"),
    ],
)
def test_a_deny_rule_sees_every_simple_command_of_a_line(command: str, rule: str) -> None:
    assert deny_rule([rule], "run_command", {"command": command}, cwd="/w") == rule


@pytest.mark.parametrize(
    "command", ["ls -la", "echo rm", "git status", "grep -r rm src", "format.sh"]
)
def test_a_deny_rule_leaves_other_commands_alone(command: str) -> None:
    assert deny_rule(["rm *", "git push *"], "run_command", {"command": command}) is None


def test_a_path_rule_refuses_the_file_tools(tmp_path: Path) -> None:
    rules = ["path:.env", "path:secrets/*"]
    ws = str(tmp_path)
    assert deny_rule(rules, "read_file", {"path": ".env"}, cwd=ws) == "path:.env"
    assert deny_rule(rules, "read_file", {"path": "api/.env"}, cwd=ws) == "path:.env"
    assert deny_rule(rules, "write_file", {"path": "secrets/k"}, cwd=ws) == "path:secrets/*"
    assert deny_rule(rules, "edit_file", {"path": f"{ws}/secrets/k"}, cwd=ws) == "path:secrets/*"
    assert deny_rule(rules, "read_file", {"path": "README.md"}, cwd=ws) is None
    # A path rule is not a command rule.
    assert deny_rule(rules, "run_command", {"command": "cat .env"}, cwd=ws) is None


def test_a_denied_call_is_refused_unasked_even_under_yes_and_the_model_reads_the_rule(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    lines: list[dict[str, object]] = [
        {
            "tool_calls": [
                call("run_command", command="rm a.txt"),
                call("read_file", path="b.txt"),
                call("run_command", command="echo ok > ok.txt"),
            ]
        },
        {"text": "ok"},
    ]
    provider = scripted(write_script(tmp_path / "s.jsonl", lines))
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    asked: list[PermissionRequest] = []

    def asker(r: PermissionRequest) -> None:
        asked.append(r)

    # Allowed by pattern and by --yes: the deny rule still wins, and nobody is asked.
    policy = Policy(
        sandbox="off", yes=True, allow_commands=("rm *", "echo *"), deny=("rm *", "path:b.txt")
    )
    host = make_host(sqlite_store, provider, policy=policy, asker=asker)
    assert start_turn(host, info, "t") == "completed"
    records = sqlite_store.read(info.id)
    assert (ws / "a.txt").exists()
    assert (ws / "ok.txt").exists()
    assert asked == []
    results = {out.call_id: out for [(_, out)] in outcomes(records).values()}
    first, second, third = (results[c] for c in sorted(results))
    assert "denied by rule `rm *`" in first.result
    assert first.is_error
    assert "denied by rule `path:b.txt`" in second.result
    assert not third.is_error
    started = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
    ]
    assert started[0].deny == ["rm *", "path:b.txt"]
    # The model saw the refusal in its next request.
    shown = str(provider.requests[1].messages)
    assert "denied by rule `rm *`" in shown


def test_a_sandboxed_command_is_still_denied(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("run_command", command="rm a.txt")]},
        {"text": "ok"},
    ]
    provider = scripted(write_script(tmp_path / "s.jsonl", lines))
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    host = make_host(sqlite_store, provider, policy=Policy(deny=("rm *",)))
    assert start_turn(host, info, "t") == "completed"
    assert (ws / "a.txt").exists()
    [[(_, out)]] = outcomes(sqlite_store.read(info.id)).values()
    assert "denied by rule `rm *`" in out.result
