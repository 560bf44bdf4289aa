"""Hooks: the user's own programs, run at fixed points of a turn, that can block or change what
happens there.

A hook is a shell command configured in config.toml under the event it runs at, with a matcher.
It reads one JSON object on stdin and answers with its exit status and, optionally, one JSON
object on stdout, in the shapes Claude Code's hooks use (``hook_event_name``, ``tool_name``,
``tool_input``; exit 2 blocks with stderr as the reason; ``hookSpecificOutput`` with
``permissionDecision``, ``updatedInput``, ``additionalContext``; ``decision: "block"``,
``continue: false``), so that an existing hook script works here with at most its tool names
changed.

Hooks run outside the sandbox, as the user's own programs do, under the keeper every command
runs under (`bubu.tools.proctree`): nothing of a hook outlives the runner. A hook that does not
answer within its timeout is killed, and its `on_error` policy decides, as for a hook that fails.
This module runs one hook and reads its answer; `hookpoints` records the answers in the log.
"""

from __future__ import annotations

import json
import os
import re
import select
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Literal

from bubu import clock
from bubu.errors import ToolError
from bubu.events import HookDecision, HookEvent

EVENTS: tuple[HookEvent, ...] = (
    "PreToolUse",
    "PostToolUse",
    "UserPromptSubmit",
    "Stop",
    "SessionStart",
    "PreCompact",
    "Notification",
)
DEFAULT_TIMEOUT_S = 60.0
OUTPUT_CAP = 64 * 1024
"""Bytes of a hook's stdout and stderr that are read (the rest is ignored)."""
OnError = Literal["deny", "allow"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Hook:
    """One configured hook."""

    event: HookEvent
    command: str
    matcher: str = ""
    """A regular expression the tool name (or the source, trigger or notification type) must
    match in full; empty or ``*`` matches everything."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    on_error: OnError = "allow"
    """What a hook that fails, hangs or answers nonsense decides: deny (block) or allow."""
    workspace: str | None = None
    """The workspace whose config file set it (None: the user's own): it runs only while the
    user still trusts that file and the files its command names, as they are now."""

    def matches(self, subject: str | None) -> bool:
        """Whether the hook runs for `subject` (a tool name …; None: events without one)."""
        m = self.matcher.strip()
        if not m or m == "*" or subject is None:
            return True
        try:
            return re.fullmatch(m, subject) is not None
        except re.error:
            return m == subject


def from_config(
    raw: object, *, workspace: str | None = None, theirs: Sequence[object] = ()
) -> tuple[Hook, ...]:
    """The hooks of the `hooks` setting (as `bubu.settings` checked it); those among `theirs`
    (the tables of `workspace`'s config file) are marked as the workspace's."""
    if not isinstance(raw, list | tuple):
        return ()
    out: list[Hook] = []
    for h in raw:
        if not isinstance(h, Mapping):
            continue
        out.append(
            Hook(
                event=h["event"],
                command=str(h["command"]),
                matcher=str(h.get("matcher") or ""),
                timeout_s=float(h.get("timeout") or DEFAULT_TIMEOUT_S),
                on_error="deny" if h.get("on_error") == "deny" else "allow",
                workspace=workspace if h in theirs else None,
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ran:
    """How one hook run ended: its exit status and what it printed, or why it did not finish."""

    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    failure: str | None = None
    """The hook did not answer: it timed out, could not start, or the turn stopped."""
    duration_ms: int = 0


def run(
    hook: Hook,
    payload: Mapping[str, Any],
    *,
    cwd: str,
    env: Mapping[str, str],
    cancel: threading.Event | None = None,
) -> Ran:
    """Run `hook` with `payload` as JSON on stdin, under a keeper, cut at its timeout."""
    from bubu.tools import proctree

    started = clock.monotonic()
    data = json.dumps(payload, ensure_ascii=False, default=str).encode("utf-8")
    with (
        tempfile.TemporaryFile() as stdin,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        stdin.write(data + b"\n")
        stdin.flush()
        stdin.seek(0)
        argv = [_shell(), "-c", hook.command]
        try:
            tree = proctree.start(
                argv,
                cwd=cwd,
                env=env,
                output=out.fileno(),
                stdin=stdin.fileno(),
                errors=err.fileno(),
            )
        except ToolError as e:
            return Ran(exit_code=None, failure=f"it could not be started: {e}")
        try:
            failure = _wait(tree, hook.timeout_s, cancel)
        except BaseException:  # Ctrl-C while it runs: nothing of it stays behind
            tree.kill(0)
            raise
        ms = int((clock.monotonic() - started) * 1000)
        if failure is None and tree.error is not None:
            number, _, path = tree.error.partition(" ")
            failure = f"it could not be started: {os.strerror(int(number))} ({path})"
        code = tree.returncode if failure is None else None
        return Ran(
            exit_code=code, stdout=_read(out), stderr=_read(err), failure=failure, duration_ms=ms
        )


def _wait(tree: Any, timeout_s: float, cancel: threading.Event | None) -> str | None:
    """Wait for the hook's exit; kill its tree at the timeout or a stop (and say which)."""
    deadline = clock.monotonic() + timeout_s
    while tree.returncode is None and tree.error is None and not tree.ended:
        left = deadline - clock.monotonic()
        if left <= 0:
            tree.kill(1.0)
            return f"it timed out after {timeout_s:g} s and was killed"
        if cancel is not None and cancel.is_set():
            tree.kill(1.0)
            return "the turn was stopped while it ran"
        ready, _, _ = select.select([tree.status], [], [], min(0.05, left))
        if ready:
            tree.read_status()
    if tree.returncode is None:
        tree.kill(0)
        return "its keeper vanished before it ended"
    tree.finish()
    return None


def _read(f: IO[bytes]) -> str:
    f.seek(0)
    data: bytes = f.read(OUTPUT_CAP)
    return data.decode("utf-8", "replace")


def _shell() -> str:
    import shutil

    return shutil.which("bash") or "/bin/sh"


# ---- reading an answer (pure) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """What a hook decided, in Bubu's terms."""

    decision: HookDecision = "none"
    reason: str | None = None
    updated_input: dict[str, Any] | None = None
    context: str | None = None
    stop: bool = False
    failure: str | None = None


_BLOCKING: dict[HookEvent, HookDecision] = {"PreToolUse": "deny"}
"""What exit status 2 (and a failing hook under ``on_error = "deny"``) decides, by event;
"block" for every other."""


def answer(hook: Hook, ran: Ran) -> Answer:
    """Read a hook's exit status and output as Claude Code's hooks define them."""
    blocked = _BLOCKING.get(hook.event, "block")
    if ran.failure is not None or ran.exit_code not in (0, 2):
        why = ran.failure or f"it exited with status {ran.exit_code}"
        detail = _first_line(ran.stderr)
        why = f"{why}: {detail}" if detail and ran.failure is None else why
        return _failed(hook, why)
    if ran.exit_code == 2:
        reason = ran.stderr.strip() or f"the {hook.event} hook blocked it"
        return Answer(decision=blocked, reason=reason)
    text = ran.stdout.strip()
    if not text.startswith("{"):
        # Plain output: context for the model where Claude Code's hooks give it so.
        context = text if text and hook.event in ("UserPromptSubmit", "SessionStart") else None
        return Answer(context=context)
    try:
        out = json.loads(text)
    except ValueError:
        return _failed(hook, "its output is not valid JSON")
    if not isinstance(out, dict):
        return _failed(hook, "its output is not a JSON object")
    return _from_json(hook, out)


def _failed(hook: Hook, why: str) -> Answer:
    if hook.on_error == "deny":
        decision = _BLOCKING.get(hook.event, "block")
        return Answer(
            decision=decision, reason=f"the hook failed ({why}; on_error = deny)", failure=why
        )
    return Answer(failure=why)


def _from_json(hook: Hook, out: dict[str, Any]) -> Answer:
    specific = out.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    decision: HookDecision = "none"
    reason = _text(out.get("reason"))
    said = specific.get("permissionDecision")
    if hook.event == "PreToolUse" and said in ("allow", "deny", "ask"):
        decision = said
        reason = _text(specific.get("permissionDecisionReason")) or reason
    elif out.get("decision") == "block":
        decision = "deny" if hook.event == "PreToolUse" else "block"
    elif out.get("decision") == "approve" and hook.event == "PreToolUse":
        decision = "allow"  # the older spelling of permissionDecision = allow
    updated = specific.get("updatedInput")
    if not isinstance(updated, dict) or hook.event != "PreToolUse":
        updated = None
    context = _text(specific.get("additionalContext"))
    stop = out.get("continue") is False
    if stop:
        reason = _text(out.get("stopReason")) or reason or f"the {hook.event} hook ended the turn"
    return Answer(
        decision=decision, reason=reason, updated_input=updated, context=context, stop=stop
    )


def _text(v: object) -> str | None:
    return v if isinstance(v, str) and v.strip() else None


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else ""


def matching(hooks: Sequence[Hook], event: HookEvent, subject: str | None) -> list[Hook]:
    """The hooks that run at `event` for `subject`, in their configured order."""
    return [h for h in hooks if h.event == event and h.matches(subject)]


__all__ = ["EVENTS", "Answer", "Hook", "Ran", "answer", "from_config", "matching", "run"]
