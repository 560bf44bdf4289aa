"""A hook's decision is durable: `bubu run` is SIGKILLed between a PreToolUse hook's committed
decision and the tool's run; after recovery the decision stands (the tool runs with the
arguments the hook gave it) and the hook is not run again — it counts its runs in a file.

The hook is a Claude Code hook script ported as docs/extending.md shows: only its tool name
changed (``Bash`` → ``run_command``); the JSON it reads and writes is the same.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from bubu.events import HookRun, SystemNote

from .harness import read_log
from .proc import bubu, only_session

# A Claude Code PreToolUse hook (its documented shape) that forces `--no-color` onto `ls`, with
# the one change a port needs: the tool is `run_command` here, `Bash` in Claude Code.
PORTED = r"""#!/usr/bin/env python3
import json
import os
import sys

data = json.load(sys.stdin)
with open(os.environ["HOOK_COUNTER"], "a") as f:
    f.write(data["hook_event_name"] + " " + data["tool_use_id"] + "\n")
if data["tool_name"] != "run_command":  # Claude Code: "Bash"
    sys.exit(0)
command = data["tool_input"]["command"]
if command.startswith("echo "):
    json.dump({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": "echo is safe; tagged",
            "updatedInput": {"command": command + " tagged-by-hook"},
        }
    }, sys.stdout)
    sys.exit(0)
print("only echo is allowed", file=sys.stderr)
sys.exit(2)
"""


def _lay_out(root: Path) -> tuple[Path, Path, Path, list[str]]:
    ws = root / "ws"
    ws.mkdir()
    counter = root / "hook-runs.txt"
    hook = root / "only_echo.py"
    hook.write_text(PORTED)
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    (root / "config.toml").write_text(
        "[[hooks.PreToolUse]]\n"
        'matcher = "run_command"\n'
        f'command = "HOOK_COUNTER={counter} {hook}"\n'
        "timeout = 30\n"
        'on_error = "deny"\n'
    )
    script = root / "script.jsonl"
    lines = [
        {
            "tool_calls": [
                {"name": "run_command", "arguments": {"command": "echo hi > out.txt"}},
                {"name": "run_command", "arguments": {"command": "touch bad.txt"}},
            ]
        },
        {"text": "done"},
    ]
    script.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["run", "do it", "-w", str(ws), "-m", f"scripted:{script}", "--sandbox", "off"]
    return root / "bubu.db", ws, counter, args


@pytest.mark.heavy
def test_a_committed_hook_decision_stands_after_a_kill_and_the_hook_is_not_run_again(
    tmp_path: Path,
) -> None:
    db, ws, counter, args = _lay_out(tmp_path)
    killed = bubu(db, *args, failpoint="before_dispatch")
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert counter.read_text().count("PreToolUse") == 2  # both calls decided, then the kill
    assert not (ws / "out.txt").exists()  # the tool had not run
    decided = [
        c.note
        for r in read_log(db)
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, HookRun)
    ]
    assert [d.decision for d in decided] == ["allow", "deny"]

    done = bubu(db, "recover", only_session(db))
    assert done.returncode == 0, done.stdout + done.stderr
    assert counter.read_text().count("PreToolUse") == 2  # not run again
    # The committed decisions stand: the rewritten command ran, the denied one did not.
    assert (ws / "out.txt").read_text() == "hi tagged-by-hook\n"
    assert not (ws / "bad.txt").exists()
    runs = [
        c.note
        for r in read_log(db)
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, HookRun)
    ]
    assert len(runs) == 2
    assert bubu(db, "verify").returncode == 0
