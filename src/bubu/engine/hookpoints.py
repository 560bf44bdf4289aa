"""Where a run calls its hooks, and how their decisions enter the log.

Every hook run is a `HookRun` note, committed before its decision takes effect. A decision that
is already in the log stands: after a crash the hook is not run again (a call's decisions are in
its `CallState.hooks`, a step's in `TurnFold.step_hooks`). What a hook says for the model (a
reason, ``additionalContext``) reaches it in a tool result or as a short message of the host's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bubu import clock, ids
from bubu.engine import hooks
from bubu.engine.ports import Appender, Observer, RunState, Stops
from bubu.events import Event, HookDecision, HookEvent, HookRun, SystemNote, Text, make
from bubu.projections.turn import CallState
from bubu.tools.base import ToolResult

PROJECT_DIR_VAR = "BUBU_PROJECT_DIR"
"""The workspace, in every hook's environment (Claude Code's ``CLAUDE_PROJECT_DIR``)."""
SESSION_VAR = "BUBU_SESSION_ID"


@dataclass(frozen=True, slots=True, kw_only=True)
class PreTool:
    """What the PreToolUse hooks decided for one call (with its arguments, maybe replaced)."""

    call: CallState
    decision: HookDecision = "none"
    reason: str | None = None
    hook: str | None = None
    """The hook whose decision this is."""


UNTRUSTED = (
    "it was not run: the workspace's config file, or a file its command names, changed since "
    "you trusted it (a command may have rewritten it); `bubu trust` the workspace again once "
    "you have checked it"
)


def _still_trusted(workspace: str) -> bool:
    from bubu.settings import still_trusted

    return still_trusted(workspace)


def context_message(event: HookEvent, hook: str, text: str) -> str:
    """How text a hook adds for the model is shown to it."""
    return f"[{event} hook `{hook}`]\n{text}"


class HookPoints:
    """Runs the configured hooks of a runner at each point of a turn."""

    def __init__(self, *, state: RunState, log: Appender, stops: Stops, observer: Observer) -> None:
        self.state, self.log, self.stops, self.observer = state, log, stops, observer

    @property
    def configured(self) -> tuple[hooks.Hook, ...]:
        return self.state.config.hooks

    def payload(self, event: HookEvent, **fields: Any) -> dict[str, Any]:
        """The JSON a hook reads on stdin: the fields every event has, and `fields`."""
        t = self.state.turn
        mode = "plan" if t.plan else ("bypassPermissions" if t.yes else "default")
        return {
            "session_id": self.state.session.id,
            "transcript_path": None,
            "cwd": self.state.session.workspace,
            "hook_event_name": event,
            "permission_mode": mode,
            **fields,
        }

    def run_one(
        self, hook: hooks.Hook, payload: dict[str, Any], *, call_id: str | None = None
    ) -> HookRun:
        """Run one hook and read its answer (nothing is recorded yet)."""
        from bubu.secrets import command_env
        from bubu.tools.proctree import MARKER_VAR

        self.log.flush()  # nothing runs while events are staged: the log is ahead of the world
        ws = self.state.session.workspace
        env = command_env(())
        env[PROJECT_DIR_VAR] = ws
        env[SESSION_VAR] = self.state.session.id
        env[MARKER_VAR] = f"{self.state.session.id}/{self.state.run}/{ids.new_id('hook')}"
        self.observer.on_activity(f"hook {hook.event}: {hook.command}")
        if hook.workspace is not None and not _still_trusted(hook.workspace):
            ran = hooks.Ran(exit_code=None, failure=UNTRUSTED)
        else:
            ran = hooks.run(hook, payload, cwd=ws, env=env, cancel=self.stops.stop_event)
        self.observer.on_activity(None)
        self.stops.check_stop()  # a hook cut short by a stop decided nothing: nothing is recorded
        a = hooks.answer(hook, ran)
        return HookRun(
            event=hook.event,
            hook=hook.command,
            call_id=call_id,
            decision=a.decision,
            reason=a.reason,
            updated_input=a.updated_input,
            context=a.context,
            stop=a.stop,
            exit_code=ran.exit_code,
            failure=a.failure,
            duration_ms=ran.duration_ms,
        )

    # -- tool calls -------------------------------------------------------------------------------

    def pre_tool(self, call: CallState) -> PreTool:
        """Run the PreToolUse hooks of `call` (each decision committed, durably, before it takes
        effect): the first deny wins; ask outranks allow; a replaced input is what later hooks
        and the tool see."""
        decided = PreTool(call=call)
        # Decisions already committed stand, whatever the hooks configured now.
        runs: list[tuple[hooks.Hook | None, HookRun | None]] = [
            (None, rec) for (ev, _), rec in call.hooks.items() if ev == "PreToolUse"
        ]
        runs += [
            (h, None)
            for h in hooks.matching(self.configured, "PreToolUse", call.name)
            if ("PreToolUse", h.command) not in call.hooks
        ]
        for hook, committed in runs:
            rec = committed
            if rec is None:
                assert hook is not None
                payload = self.payload(
                    "PreToolUse",
                    tool_name=call.name,
                    tool_input=call.arguments,
                    tool_use_id=call.call_id,
                )
                rec = self.run_one(hook, payload, call_id=call.call_id)
                self.log.append([self.log.note(rec)], durable=True)
                call = self.state.turn.calls.get(call.call_id, call)  # the fold took its input
            if rec.decision == "deny" or rec.stop:  # `continue: false` runs nothing more
                return PreTool(call=call, decision="deny", reason=rec.reason, hook=rec.hook)
            if rec.decision == "ask" or (rec.decision == "allow" and decided.decision == "none"):
                decided = PreTool(
                    call=call, decision=rec.decision, reason=rec.reason, hook=rec.hook
                )
            else:
                decided = replace(decided, call=call)
        return decided

    def post_tool(self, call: CallState, result: ToolResult) -> ToolResult:
        """Run the PostToolUse hooks of a finished call; what they say for the model (a block's
        reason, additional context, and a PreToolUse hook's context) is added to its result."""
        call = self.state.turn.calls.get(call.call_id, call)  # with every decision folded in
        extra = [
            context_message("PreToolUse", rec.hook, rec.context)
            for (event, _), rec in call.hooks.items()
            if event == "PreToolUse" and rec.context
        ]
        for hook in hooks.matching(self.configured, "PostToolUse", call.name):
            rec = call.hooks.get(("PostToolUse", hook.command))
            if rec is None:
                response = {"output": result.output, "is_error": result.is_error}
                payload = self.payload(
                    "PostToolUse",
                    tool_name=call.name,
                    tool_input=call.arguments,
                    tool_response=response,
                    tool_use_id=call.call_id,
                )
                rec = self.run_one(hook, payload, call_id=call.call_id)
                self.log.append([self.log.note(rec)])
            if rec.decision == "block" and rec.reason:
                extra.append(context_message("PostToolUse", hook.command, rec.reason))
            if rec.context:
                extra.append(context_message("PostToolUse", hook.command, rec.context))
        if not extra:
            return result
        added = "\n\n" + "\n\n".join(extra)
        full = result.full + added.encode("utf-8") if result.full is not None else None
        return replace(result, output=result.output + added, full=full)

    # -- the turn ---------------------------------------------------------------------------------

    def halted(self, calls: Sequence[CallState]) -> HookRun | None:
        """A hook of these calls that asked to end the turn (``"continue": false``), if any."""
        for c in calls:
            st = self.state.turn.calls.get(c.call_id, c)
            for rec in st.hooks.values():
                if rec.stop:
                    return rec
        return None

    def stop(self) -> bool:
        """Run the Stop hooks as the model ends its turn; True when one continued the turn (its
        reason, committed with its decision, is the model's next message)."""
        t = self.state.turn
        for hook in hooks.matching(self.configured, "Stop", None):
            rec = t.step_hooks.get(("Stop", hook.command))
            if rec is not None:
                if rec.decision == "block" and not rec.stop:
                    return True  # committed with its message: the model has it already
                continue
            rec = self.run_one(hook, self.payload("Stop", stop_hook_active=t.stop_blocks > 0))
            events: list[Event] = [self.log.note(rec)]
            going_on = rec.decision == "block" and not rec.stop
            if going_on:
                text = context_message("Stop", hook.command, rec.reason or "continue")
                events.append(self.log.event("user", "host", Text(text=text)))
            self.log.append(events, durable=going_on)
            if going_on:
                return True
        return False

    def pre_compact(self, trigger: str) -> None:
        """Run the PreCompact hooks (they are told; they cannot stop a compaction)."""
        for hook in hooks.matching(self.configured, "PreCompact", trigger):
            payload = self.payload("PreCompact", trigger=trigger, custom_instructions="")
            self.log.append([self.log.note(self.run_one(hook, payload))])

    def notification(self, message: str, kind: str = "permission_prompt") -> None:
        """Run the Notification hooks (told that Bubu waits for a person)."""
        for hook in hooks.matching(self.configured, "Notification", kind):
            payload = self.payload("Notification", message=message, notification_type=kind)
            self.log.append([self.log.note(self.run_one(hook, payload))])

    def turn_start(self, prompt: str, *, source: str | None, turn: str) -> TurnStart:
        """The SessionStart hooks (`source`: "startup" or "resume"; None: not run) and the
        UserPromptSubmit hooks of a new turn's request. Their notes and context messages are for
        the turn's first append; a blocked request is committed alone and refused."""
        out = TurnStart()
        runs: list[tuple[hooks.Hook, dict[str, Any]]] = []
        if source is not None:
            runs += [
                (h, self.payload("SessionStart", source=source))
                for h in hooks.matching(self.configured, "SessionStart", source)
            ]
        runs += [
            (h, self.payload("UserPromptSubmit", prompt=prompt))
            for h in hooks.matching(self.configured, "UserPromptSubmit", None)
        ]
        for hook, payload in runs:
            rec = self.run_one(hook, payload)
            note = self._turn_event("system", "system", SystemNote(note=rec), turn, hidden=True)
            if rec.event == "UserPromptSubmit" and (rec.decision == "block" or rec.stop):
                alone = self._turn_event(
                    "system", "system", SystemNote(note=rec), None, hidden=True
                )
                out.blocked = (alone, rec.reason or "the UserPromptSubmit hook blocked it")
                return out
            out.events.append(note)
            if rec.context:
                text = context_message(rec.event, hook.command, rec.context)
                out.events.append(self._turn_event("user", "host", Text(text=text), turn))
        return out

    def _turn_event(
        self, role: Any, author: Any, content: Any, turn: str | None, *, hidden: bool = False
    ) -> Event:
        return make(
            session=self.state.session.id,
            turn=turn,
            role=role,
            author=author,
            ts=clock.now_ms(),
            content=content,
            visibility="hidden" if hidden else "visible",
        )


@dataclass(slots=True)
class TurnStart:
    """What the hooks of a turn's start said: events for its first append, or a refusal."""

    events: list[Event] = field(default_factory=list)
    blocked: tuple[Event, str] | None = None


def blocked_message(reason: str) -> str:
    """What the user is told when a UserPromptSubmit hook refuses the request."""
    return f"the request was not sent: a UserPromptSubmit hook blocked it: {reason}"


__all__ = ["HookPoints", "PreTool", "TurnStart", "blocked_message"]
