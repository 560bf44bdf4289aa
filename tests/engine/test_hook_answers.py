"""How a hook's exit status and output are read: Claude Code's rules, in Bubu's decisions."""

from __future__ import annotations

import json

import pytest

from bubu.engine.hooks import Answer, Hook, Ran, answer, matching
from bubu.events import HookEvent


def _read(
    event: HookEvent, code: int | None, out: object = "", err: str = "", **hook: object
) -> Answer:
    stdout = out if isinstance(out, str) else json.dumps(out)
    h = Hook(event=event, command="x", **hook)  # type: ignore[arg-type]
    return answer(h, Ran(exit_code=code, stdout=stdout, stderr=err))


def test_exit_2_blocks_with_stderr_as_the_reason() -> None:
    assert _read("PreToolUse", 2, err="no rm\n") == Answer(decision="deny", reason="no rm")
    assert _read("Stop", 2, err="run the tests") == Answer(decision="block", reason="run the tests")


def test_permission_decisions_and_their_older_spellings() -> None:
    said = {
        "hookSpecificOutput": {"permissionDecision": "ask", "permissionDecisionReason": "sure?"}
    }
    assert _read("PreToolUse", 0, said) == Answer(decision="ask", reason="sure?")
    assert _read("PreToolUse", 0, {"decision": "approve"}).decision == "allow"
    assert _read("PreToolUse", 0, {"decision": "block", "reason": "r"}) == Answer(
        decision="deny", reason="r"
    )


def test_updated_input_counts_only_before_a_tool() -> None:
    out = {"hookSpecificOutput": {"permissionDecision": "allow", "updatedInput": {"a": 1}}}
    assert _read("PreToolUse", 0, out).updated_input == {"a": 1}
    assert _read("PostToolUse", 0, out).updated_input is None


def test_plain_output_is_context_only_where_claude_code_makes_it_so() -> None:
    assert _read("UserPromptSubmit", 0, "branch main\n").context == "branch main"
    assert _read("SessionStart", 0, "branch main").context == "branch main"
    assert _read("PreToolUse", 0, "chatter").context is None
    assert _read("PreToolUse", 0, "[1]", on_error="deny") == Answer()  # output, not an answer


def test_continue_false_stops_with_its_reason() -> None:
    got = _read("PostToolUse", 0, {"continue": False, "stopReason": "build broke"})
    assert got.stop
    assert got.reason == "build broke"


@pytest.mark.parametrize(
    ("ran", "why"),
    [
        (Ran(exit_code=1, stderr="boom\nmore"), "it exited with status 1: boom"),
        (Ran(exit_code=0, stdout="{not json"), "its output is not valid JSON"),
        (Ran(exit_code=None, failure="it timed out after 1 s and was killed"), "it timed out"),
    ],
)
def test_a_failing_hook_decides_by_its_on_error_policy(ran: Ran, why: str) -> None:
    allow = answer(Hook(event="PreToolUse", command="x"), ran)
    deny = answer(Hook(event="PreToolUse", command="x", on_error="deny"), ran)
    assert allow.decision == "none"
    assert allow.failure is not None
    assert allow.failure.startswith(why)
    assert deny.decision == "deny"
    assert "on_error = deny" in (deny.reason or "")


def test_matchers_are_regular_expressions_on_the_whole_name() -> None:
    hooks = (
        Hook(event="PreToolUse", command="a", matcher="write_file|edit_file"),
        Hook(event="PreToolUse", command="b", matcher="*"),
        Hook(event="PreToolUse", command="c", matcher="run"),
        Hook(event="Stop", command="d"),
    )
    assert [h.command for h in matching(hooks, "PreToolUse", "edit_file")] == ["a", "b"]
    assert [h.command for h in matching(hooks, "PreToolUse", "run_command")] == ["b"]
    assert [h.command for h in matching(hooks, "Stop", None)] == ["d"]
