"""Hooks in a running turn: real hook programs, run under the keeper, whose decisions are events.

A PreToolUse hook can deny a call (the model is told why), rewrite its arguments (the tool runs
with the new ones), ask, or allow; PostToolUse adds context to the result; Stop continues the
turn; UserPromptSubmit and SessionStart add context or refuse the request; a hook that hangs is
cut at its timeout and its `on_error` policy decides.
"""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from bubu.engine.hooks import Hook
from bubu.engine.permissions import Policy
from bubu.engine.session import new_session, start_turn
from bubu.errors import HookBlocked
from bubu.events import HookRun, Record, SystemNote, Text, TurnEnded
from bubu.log.sqlite import SQLiteStore

from .helpers import FAST, call, make_host, outcomes, scripted, write_script

NO_RM = r"""#!/usr/bin/env python3
import json, sys
data = json.load(sys.stdin)
if data["tool_name"] == "run_command" and data["tool_input"]["command"].split()[0] == "rm":
    print("rm is not allowed here; move files to trash/ instead", file=sys.stderr)
    sys.exit(2)
"""

REWRITE = r"""#!/usr/bin/env python3
import json, sys
data = json.load(sys.stdin)
cmd = data["tool_input"]["command"]
print(json.dumps({"hookSpecificOutput": {
    "hookEventName": "PreToolUse", "permissionDecision": "allow",
    "permissionDecisionReason": "quieted",
    "updatedInput": {"command": cmd.replace("hello", "rewritten")}}}))
"""


def _script(dir: Path, name: str, text: str) -> str:
    path = dir / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _hook_runs(records: list[Record]) -> list[HookRun]:
    return [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, HookRun)
    ]


def _turn(
    tmp_path: Path,
    store: SQLiteStore,
    ws: Path,
    lines: list[dict[str, object]],
    hooks: tuple[Hook, ...],
    *,
    policy: Policy | None = None,
) -> list[Record]:
    provider = scripted(write_script(tmp_path / "s.jsonl", lines))
    info = new_session(store, task="t", workspace=ws, model=provider.spec)
    host = make_host(
        store,
        provider,
        policy=policy or Policy(sandbox="off", yes=True),
        config=replace(FAST, hooks=hooks),
    )
    assert start_turn(host, info, "t") == "completed"
    return store.read(info.id)


def test_a_hook_that_denies_rm_blocks_it_and_the_model_reads_why(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    hook = Hook(
        event="PreToolUse", matcher="run_command", command=_script(tmp_path, "no-rm", NO_RM)
    )
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("run_command", command="rm a.txt")]},
        {"text": "ok"},
    ]
    records = _turn(tmp_path, sqlite_store, ws, lines, (hook,))
    assert (ws / "a.txt").exists()
    ((_, out),) = next(iter(outcomes(records).values()))
    assert out.is_error
    assert "denied it: rm is not allowed here" in out.result
    (run,) = _hook_runs(records)
    assert (run.event, run.decision, run.exit_code) == ("PreToolUse", "deny", 2)
    assert run.call_id == out.call_id


def test_a_hook_that_rewrites_an_argument_runs_the_tool_with_it(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    hook = Hook(event="PreToolUse", matcher="run_.*", command=_script(tmp_path, "rw", REWRITE))
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("run_command", command="echo hello > out.txt")]},
        {"text": "ok"},
    ]
    # No --yes and no sandbox: the command would ask; the hook's allow approves it.
    records = _turn(tmp_path, sqlite_store, ws, lines, (hook,), policy=Policy(sandbox="off"))
    assert (ws / "out.txt").read_text() == "rewritten\n"
    (run,) = _hook_runs(records)
    assert run.decision == "allow"
    assert run.updated_input == {"command": "echo rewritten > out.txt"}
    ((_, out),) = next(iter(outcomes(records).values()))
    assert not out.is_error


def test_a_hook_that_hangs_is_cut_at_its_timeout_and_on_error_decides(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    pid_file = tmp_path / "hang.pid"
    hang = f"echo $$ > {pid_file}; exec sleep 600"
    hooks = (Hook(event="PreToolUse", command=hang, timeout_s=0.5, on_error="deny"),)
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("run_command", command="echo hi > hi.txt")]},
        {"text": "ok"},
    ]
    records = _turn(tmp_path, sqlite_store, ws, lines, hooks)
    assert not (ws / "hi.txt").exists()
    (run,) = _hook_runs(records)
    assert run.decision == "deny"
    assert run.failure is not None
    assert "timed out after 0.5 s" in run.failure
    ((_, out),) = next(iter(outcomes(records).values()))
    assert "on_error = deny" in out.result
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def test_a_failing_hook_with_on_error_allow_lets_the_call_run(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    hooks = (Hook(event="PreToolUse", command="echo broken >&2; exit 1", on_error="allow"),)
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("run_command", command="echo hi > hi.txt")]},
        {"text": "ok"},
    ]
    records = _turn(tmp_path, sqlite_store, ws, lines, hooks)
    assert (ws / "hi.txt").exists()
    (run,) = _hook_runs(records)
    assert run.decision == "none"
    assert run.failure == "it exited with status 1: broken"


def test_an_ask_from_a_hook_asks_a_person_even_under_yes(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    ask = json.dumps(
        {
            "hookSpecificOutput": {
                "permissionDecision": "ask",
                "permissionDecisionReason": "are you sure?",
            }
        }
    )
    hooks = (Hook(event="PreToolUse", command=f"echo '{ask}'"),)
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("read_file", path="a.txt")]},
        {"text": "ok"},
    ]
    records = _turn(tmp_path, sqlite_store, ws, lines, hooks)
    ((_, out),) = next(iter(outcomes(records).values()))
    assert out.is_error
    assert "nobody was there to approve it" in out.result
    assert "are you sure?" in out.result


def test_post_tool_use_context_reaches_the_model_in_the_result(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    say = json.dumps(
        {
            "hookSpecificOutput": {
                "hookEventName": "PostToolUse",
                "additionalContext": "a.txt is generated",
            }
        }
    )
    hooks = (Hook(event="PostToolUse", matcher="read_file", command=f"echo '{say}'"),)
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("read_file", path="a.txt")]},
        {"text": "ok"},
    ]
    records = _turn(tmp_path, sqlite_store, ws, lines, hooks)
    ((_, out),) = next(iter(outcomes(records).values()))
    assert "alpha" in out.result
    assert "a.txt is generated" in out.result


def test_pre_tool_use_context_reaches_the_model_with_the_result(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    say = json.dumps(
        {
            "hookSpecificOutput": {
                "permissionDecision": "allow",
                "additionalContext": "b.txt is vendored",
            }
        }
    )
    hooks = (Hook(event="PreToolUse", command=f"echo '{say}'"),)
    lines: list[dict[str, object]] = [{"tool_calls": [call("read_file", path="b.txt")]}]
    records = _turn(tmp_path, sqlite_store, ws, [*lines, {"text": "ok"}], hooks)
    ((_, out),) = next(iter(outcomes(records).values()))
    assert "beta" in out.result
    assert "b.txt is vendored" in out.result


def test_a_stop_hook_continues_the_turn_once(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    # Claude Code's pattern: block the stop unless stop_hook_active says it already did.
    script = _script(
        tmp_path,
        "stop",
        r"""#!/usr/bin/env python3
import json, sys
data = json.load(sys.stdin)
if not data["stop_hook_active"]:
    print(json.dumps({"decision": "block", "reason": "run the tests before you stop"}))
""",
    )
    hooks = (Hook(event="Stop", command=script),)
    records = _turn(tmp_path, sqlite_store, ws, [{"text": "done"}, {"text": "tests pass"}], hooks)
    runs = _hook_runs(records)
    assert [r.decision for r in runs] == ["block", "none"]
    texts = [c.text for r in records if isinstance(c := r.event.content, Text)]
    assert any("run the tests before you stop" in t for t in texts)
    assert texts[-1] == "tests pass"


def test_user_prompt_submit_adds_context_or_refuses_the_request(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    provider = scripted(write_script(tmp_path / "s.jsonl", [{"text": "ok"}]))
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    adds = (
        Hook(event="SessionStart", command="echo 'the branch is main'"),
        Hook(event="UserPromptSubmit", command="echo 'today is Tuesday'"),
    )
    host = make_host(sqlite_store, provider, config=replace(FAST, hooks=adds))
    assert start_turn(host, info, "what day is it") == "completed"
    seen = provider.requests[0].messages
    shown = json.dumps([str(m) for m in seen])
    assert "today is Tuesday" in shown
    assert "the branch is main" in shown
    refuse = (Hook(event="UserPromptSubmit", command="echo 'no secrets in prompts' >&2; exit 2"),)
    host = make_host(sqlite_store, provider, config=replace(FAST, hooks=refuse))
    before = sqlite_store.head(info.id).high_water
    with pytest.raises(HookBlocked, match="no secrets in prompts"):
        start_turn(host, info, "the password is hunter2")
    after = sqlite_store.read(info.id, after=before)
    assert [type(r.event.content.note).__name__ for r in after] == ["HookRun"]  # type: ignore[union-attr]
    assert not any("hunter2" in str(r.event) for r in after)


def test_continue_false_ends_the_turn_resumably_with_the_hooks_reason(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    halt = json.dumps({"continue": False, "stopReason": "the build is broken; fix it first"})
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("read_file", path="a.txt")]},
        {"text": "never asked"},
    ]
    provider = scripted(write_script(tmp_path / "s.jsonl", lines))
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    hooks = (Hook(event="PostToolUse", command=f"echo '{halt}'"),)
    host = make_host(sqlite_store, provider, config=replace(FAST, hooks=hooks))
    assert start_turn(host, info, "t") == "stopped"
    assert len(provider.requests) == 1
    ended = [
        c.note
        for r in sqlite_store.read(info.id)
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnEnded)
    ]
    assert ended[-1].message is not None
    assert "the build is broken; fix it first" in ended[-1].message
