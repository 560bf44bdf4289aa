"""The tool calls of a model response: permission, dispatch, running them, their outcomes.

A call crosses two durable boundaries (DESIGN §4): its dispatch is committed (and synced when it
may change something) before the tool starts; its outcome is committed before the model can see
it. Tools run in the runner's worker threads, so that a stop is noticed at once. What the calls
read of the run is `ToolState`; they are handed the rest (the log's appender, the stop, the blob
reader, the hooks) and import no driver.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias, assert_never

from bubu import clock, failpoints, ids, images
from bubu.context.offload import offload_result
from bubu.context.quota import StoredWhole, bounded, over_quota
from bubu.engine import choices
from bubu.engine.hookpoints import HookPoints
from bubu.engine.keep import kept_before
from bubu.engine.lanes import Admitted, Lanes
from bubu.engine.loops import repeat_note, warning
from bubu.engine.memory import workspace_memory
from bubu.engine.permissions import Answer, Asker, Policy
from bubu.engine.ports import Appender, BlobReader, Observer, RunState, Stops
from bubu.errors import StorageError, ToolError
from bubu.events import (
    Actions,
    Event,
    FunctionResponse,
    PermissionDecision,
    PermissionRequest,
    SandboxMode,
    ToolDispatch,
    WorkspaceSnapshot,
)
from bubu.log import codec, redact
from bubu.projections.longrun import format_duration
from bubu.projections.memory import Note
from bubu.projections.turn import CallState, TurnFold, result_digest
from bubu.providers.base import arguments_error
from bubu.snapshot.take import snapshots_enabled, snapshotter
from bubu.toolfacts import facts_of
from bubu.tools import background, sandbox
from bubu.tools.base import Children, Tool, ToolContext, ToolResult, WriteIntent
from bubu.tools.patch import offered
from bubu.tools.places import store_files
from bubu.tools.protected import protected_write, write_reason

Ready: TypeAlias = tuple[CallState, Tool, ToolContext, WriteIntent | None]
"""A call ready to start: its tool, its context and, for a provable write, its intent."""


class ToolState(RunState, Protocol):
    """The run's state and what else the tool calls read of the runner as it is now (a chat may
    widen the policy between two calls)."""

    stored: StoredWhole
    """Bytes of results the session's log stores whole, for the quota."""
    policy: Policy

    @property
    def children(self) -> Children | None:
        """Sub-agents (`bubu.engine.children`)."""


def plan_refusal(tool: str) -> str:
    """What the model is told when it calls a tool that may change something while it plans."""
    return (
        f"{tool} did not run: this turn is in plan mode, where only tools that read may run and "
        "nothing is written or executed; nothing was changed. Finish the plan (update_plan) and "
        "end your answer with it; once the user approves it, the session acts on it"
    )


def deny_refusal(tool: str, rule: str) -> str:
    """What the model is told when a deny rule refuses a call."""
    return (
        f"{tool} did not run: denied by rule `{rule}` (a deny rule of the user's settings, "
        "never asked about); nothing was changed. Do not try to get around it; find another "
        "way, or tell the user what you needed"
    )


CONFINED_TOOLS = frozenset({"delegate", "process_kill"})
"""Bubu's own side-effecting tools that change nothing outside a read-only turn's bounds (a
sub-agent runs read-only too; a kill stops what this session started)."""

WORKSPACE_WRITERS = frozenset({"merge_child"})
"""Tools other than the provable writes that change the workspace's files (a sub-agent's branch
applied to it): refused in a read-only turn like the file tools."""


def read_only_refusal(tool: str) -> str:
    """What the model is told when a write tool is called in a read-only turn."""
    return (
        f"{tool} did not run: this turn runs with --sandbox read-only, so no file may be written "
        "or edited; nothing was changed. Describe the change instead, or ask the user to run "
        "with --sandbox workspace-write"
    )


def recorded_box(t: TurnFold) -> sandbox.Options | None:
    """The sandbox options the turn `t` recorded, or None when it recorded no sandbox (an older
    Bubu, an imported log: the host's options apply)."""
    if t.sandbox is None:
        return None
    return sandbox.recorded_options(
        t.allow_sockets, t.ssh_agent, t.max_procs, t.max_memory, t.max_file_size
    )


class ToolCalls:
    """Runs the runner's tool calls."""

    def __init__(
        self,
        *,
        state: ToolState,
        log: Appender,
        stops: Stops,
        blobs: BlobReader,
        hook_points: HookPoints,
        observer: Observer,
        pool: cf.ThreadPoolExecutor,
        tools: dict[str, Tool],
        asker: Asker,
    ) -> None:
        self.state, self.log, self.stops, self.blobs = state, log, stops, blobs
        self.hook_points, self.observer, self.pool = hook_points, observer, pool
        self.tools, self.asker = tools, asker
        self._confined: (
            tuple[tuple[SandboxMode, bool, sandbox.Options], sandbox.Sandbox | None] | None
        ) = None
        self._snapped_turn: str | None = None
        """The turn whose workspace was snapshotted before its first call that may change it."""

    def snapshot(self) -> WorkspaceSnapshot | None:
        """A snapshot of the workspace now (None when snapshots are off); never raises."""
        if not snapshots_enabled():
            return None
        return snapshotter(self.state.store, self.state.session.workspace).take()

    def _before(self, tools: Sequence[Tool]) -> WorkspaceSnapshot | None:
        """The snapshot to record with the turn's first dispatch that may change the workspace."""
        turn = self.state.turn.turn
        if turn == self._snapped_turn or all(t.effect == "read_only" for t in tools):
            return None
        self._snapped_turn = turn
        return self.snapshot()

    @property
    def effective_policy(self) -> Policy:
        """The host's policy widened by the one recorded when the turn started."""
        p, t = self.state.policy, self.state.turn
        return Policy(
            yes=p.yes or t.yes,
            allow_commands=tuple(dict.fromkeys([*p.allow_commands, *t.allow_commands])),
            sandbox=self.sandbox_mode[0],
            network=self.sandbox_mode[1],
            sandboxed=self.confinement() is not None,
            pass_env=tuple(dict.fromkeys([*p.pass_env, *t.pass_env])),
            box=self.sandbox_options,
            allow_write=tuple(dict.fromkeys([*p.allow_write, *t.allow_write])),
            web_domains=p.web_domains,
            deny=tuple(dict.fromkeys([*p.deny, *t.deny])),
        )

    @property
    def sandbox_mode(self) -> tuple[SandboxMode, bool]:
        """The sandbox mode and network flag of the turn: recorded with it, else the host's."""
        t, p = self.state.turn, self.state.policy
        return sandbox.turn_mode(t.sandbox, t.network, p.sandbox, p.network)

    @property
    def sandbox_options(self) -> sandbox.Options:
        """The sockets, SSH agent and limits of the turn's commands: recorded with it, where the
        host's may only tighten them."""
        return sandbox.turn_options(recorded_box(self.state.turn), self.state.policy.box)

    def confinement(self) -> sandbox.Sandbox | None:
        """The sandbox of the turn's commands (looked up once per mode: it searches PATH)."""
        mode, network = self.sandbox_mode
        key = (mode, network, self.sandbox_options)
        if self._confined is None or self._confined[0] != key:
            self._confined = (key, sandbox.confinement(mode, network, options=key[2]))
        return self._confined[1]

    def context_for(self, call: CallState, *, outside_allowed: bool = False) -> ToolContext:
        """The context a tool call runs in."""
        from pathlib import Path

        lr = self.state.longrun
        left = None
        if lr.time_limit_s is not None:
            left = max(0.0, lr.time_limit_s - lr.running_ms(clock.now_ms()) / 1000)
        return ToolContext(
            workspace=Path(self.state.session.workspace),
            timeout_s=self.state.config.tool_timeout_s,
            time_left_s=left,
            time_limit=format_duration(lr.time_limit_s) if lr.time_limit_s is not None else "",
            cancel=self.stops.stop_event,
            stopped_by=self.stops.stopped_by,
            outside_allowed=outside_allowed,
            allow_write=self.effective_policy.allow_write,
            own_files=store_files(self.state.store.url),
            blob=self.blobs.read_blob,
            sandbox=self._shared(self.confinement()),
            pass_env=self.effective_policy.pass_env,
            marker=f"{self.state.session.id}/{self.state.run}/{call.call_id}",
            memory=self.read_memory,
            images=images.accepts_images(self.state.provider),
            children=self.state.children,
            call_id=call.call_id,
            network=self.sandbox_mode[1],
            web_domains=self.state.policy.web_domains,
            processes=background.processes(self.state.session.id),
        )

    def _shared(self, box: sandbox.Sandbox | None) -> sandbox.Sandbox | None:
        """The sandbox in the session's shared network namespace, once its background
        processes made one (so a command reaches a server started in the background)."""
        procs = background.known(self.state.session.id)
        return box if procs is None else procs.confine(box)

    def read_memory(self) -> dict[str, Note]:
        """The live notes of this session's workspace (every session of it in the store)."""
        return workspace_memory(self.state.store, self.state.session.workspace)

    def outcome(
        self,
        call: CallState,
        result: ToolResult,
        started: float | None,
        snapshot: WorkspaceSnapshot | None = None,
    ) -> Event:
        return self._offloaded(call, result, started, snapshot, offload=False)[0]

    def _offloaded(
        self,
        call: CallState,
        result: ToolResult,
        started: float | None,
        snapshot: WorkspaceSnapshot | None = None,
        *,
        offload: bool = True,
    ) -> tuple[Event, bytes | None]:
        """The outcome event; a large result is offloaded (placeholder inline, bytes as a blob)."""
        duration = None if started is None else int((clock.monotonic() - started) * 1000)
        again = warning(self.state.turn.calls.values(), call) if result.is_error else None
        if again is not None:
            result = ToolResult(
                output=f"{result.output}\n[{again}]",
                is_error=True,
                full=result.full,
                status=result.status,
            )
        text = codec.sanitize_text(result.output)
        data = result.full if result.full is not None else text.encode("utf-8")
        status = result.status
        if result.full is None and status is not None and text.endswith("\n" + status):
            # An offloaded result is the output alone; how it ended stays in the placeholder.
            data = text[: -len(status) - 1].encode("utf-8")
        # Before the placeholder's excerpt cuts a line (and a secret in it) short.
        data = redact.data(data)
        # A page of an offloaded result is never offloaded again.
        offload = offload and choices.may_offload(call.name)
        placed = (
            offload_result(call.name, data, self.state.config.context, dropped=result.dropped)
            if offload
            else None
        )
        blob = None
        if placed is not None:
            text, blob = placed
            if status is not None:
                text += f"\n{status}"  # the output is the blob; how it ended, here
        if not result.is_error:
            seen = repeat_note(self.state.turn.last_same(call), result_digest(text))
            if seen is not None:
                text += seen
        refs, _ = images.refs(result.images)
        event = self.log.event(
            "tool",
            "tool",
            FunctionResponse(
                call_id=call.call_id,
                name=call.name,
                result=text,
                is_error=result.is_error,
                duration_ms=duration,
                blob=blob,
                images=refs,
                snapshot=snapshot,
            ),
            invocation=call.invocation,
            status="failed" if result.is_error else "completed",
        )
        return event, (data if blob is not None else None)

    def _within_quota(
        self, done: Sequence[tuple[CallState, ToolResult, float | None]]
    ) -> list[tuple[CallState, ToolResult, float | None]]:
        """Each result that would take the session past its quota of bytes stored whole, kept as
        its head and tail with a note instead (a page of a stored result is never cut)."""
        policy = self.state.config.context
        used = self.state.stored.total
        out = []
        for call, r, started in done:
            data = r.full if r.full is not None else codec.sanitize_text(r.output).encode("utf-8")
            size = len(data)
            if not choices.may_offload(call.name) or not over_quota(
                policy.store_quota, used, size, inline_over=policy.offload_bytes
            ):
                used += size if size > policy.offload_bytes else 0
                out.append((call, r, started))
                continue
            assert policy.store_quota is not None  # over_quota says so
            # Redacted before the cut, which could leave half a secret the scrubber cannot see.
            text, dropped = bounded(
                call.name,
                redact.data(data),
                keep=policy.bounded_keep,
                quota=policy.store_quota,
                used=used,
            )
            kept = ToolResult(
                output=text, is_error=r.is_error, images=r.images, dropped=r.dropped + dropped
            )
            out.append((call, kept, started))
        return out

    def commit_outcomes(
        self, done: Sequence[tuple[CallState, ToolResult, float | None]], *, stage: bool = False
    ) -> bool:
        """Commit outcomes with their offloaded blobs in one transaction; if storing the blobs
        fails, commit the results inline instead — never a reference to bytes that are not there.
        With `stage`, outcomes without blobs are staged for the next append instead (True).
        A call that may have changed the workspace carries the snapshot taken after it."""
        done = [(c, self.hook_points.post_tool(c, r), t) for c, r, t in done]
        done = self._within_quota(done)
        changing = [self._may_change(c) for c, _, _ in done]
        after = self.snapshot() if any(changing) else None
        snaps = [after if ch else None for ch in changing]
        pairs = [self._offloaded(c, r, t, s) for (c, r, t), s in zip(done, snaps, strict=True)]
        blobs = [b for _, b in pairs if b is not None] + [
            d for _, r, _ in done for _, d in r.images
        ]
        if stage and not blobs:
            self.log.stage([e for e, _ in pairs], after="after_outcome")
            return True
        form: choices.OutcomeForm | None = "offloaded"
        while form is not None:
            try:
                match form:
                    case "offloaded":
                        self.log.append([e for e, _ in pairs], blobs=blobs)
                    case "inline":
                        inline = [
                            ToolResult(
                                output=r.full.decode("utf-8", "replace"), is_error=r.is_error
                            )
                            if r.full
                            else ToolResult(output=r.output, is_error=r.is_error)  # no images
                            for _, r, _ in done
                        ]
                        self.log.append(
                            [
                                self.outcome(c, r, t, s)
                                for (c, _, t), r, s in zip(done, inline, snaps, strict=True)
                            ]
                        )
                    case "cut":
                        # Not even that fits (a full disk): keep the run going with what the tool
                        # kept for the model, saying what was lost, rather than losing the outcome.
                        cut = [
                            ToolResult(
                                output=r.output + choices.cut_note(len(r.full or b"")),
                                is_error=r.is_error,
                            )
                            for _, r, _ in done
                        ]
                        self.log.append(
                            [
                                self.outcome(c, r, t, s)
                                for (c, _, t), r, s in zip(done, cut, snaps, strict=True)
                            ]
                        )
                    case _:
                        assert_never(form)
                return False
            except StorageError:
                form = choices.next_form(form) if blobs else None
                if form is None:
                    raise
        return False

    def _may_change(self, call: CallState) -> bool:
        tool = self.tools.get(call.name)
        return tool is not None and tool.effect != "read_only"

    def run(self, calls: Sequence[CallState]) -> None:
        ready: list[Ready] = []
        early: list[Event] = []
        # Calls on a file that an earlier call of this response writes wait for it (lanes.py).
        lanes = Lanes.of(calls, self.tools, self.context_for)
        for call in calls:
            if lanes.must_wait(call):
                admitted = self._prepare(call, early, with_intent=False)
                if admitted is not None:
                    lanes.queue(admitted[:3])
                continue
            prepared = self._prepare(call, early)
            if prepared is not None:
                ready.append(prepared)
                lanes.started(call)
        if early:
            self.log.append(early)
        if not ready:
            return
        before = self._before([t for _, t, _, _ in ready])
        first = next((n for n, (_, t, _, _) in enumerate(ready) if t.effect != "read_only"), -1)
        dispatches = [
            self.log.event(
                "system",
                "system",
                actions=Actions(
                    tool_dispatch=self._dispatch_fact(c, t, i, before if n == first else None)
                ),
                invocation=c.invocation,
            )
            for n, (c, t, _, i) in enumerate(ready)
        ]
        failpoints.hit("before_dispatch")
        self.log.append(
            dispatches,
            durable=any(t.effect != "read_only" for _, t, _, _ in ready),
            blobs=kept_before(i for *_, i in ready),
        )
        failpoints.hit("after_dispatch")
        self.execute(ready, lanes, last_of_step=True)

    def execute(
        self,
        ready: Sequence[Ready],
        lanes: Lanes | None = None,
        *,
        last_of_step: bool = False,
    ) -> None:
        """Run dispatched calls concurrently and commit each outcome as it arrives; a call
        waiting in `lanes` for one that finished is then prepared, dispatched and started."""
        futures: dict[cf.Future[ToolResult], tuple[CallState, float]] = {}

        def submit(
            call: CallState, tool: Tool, ctx: ToolContext, intent: WriteIntent | None
        ) -> cf.Future[ToolResult]:
            self.observer.on_activity(f"{tool.name}")
            fut = self.pool.submit(_run_tool, tool, call.arguments, ctx, intent)
            futures[fut] = (call, clock.monotonic())
            return fut

        for item in ready:
            submit(*item)
        first = next(iter(futures))
        # Let the first call get going, so that a crash here leaves it genuinely mid-way.
        cf.wait([first], timeout=0.3)
        failpoints.hit("mid_tool")
        pending = set(futures)
        while pending:
            done, pending = cf.wait(pending, timeout=0.1, return_when=cf.FIRST_COMPLETED)
            if not done:
                continue  # a stop cancels the tools through ctx.cancel; wait for their outcomes
            failpoints.hit("after_tool")
            # The step's last outcomes are committed with the next request's note.
            last = last_of_step and not pending and not any(lanes.waiting.values() if lanes else ())
            if not self.commit_outcomes(
                [(futures[f][0], f.result(), futures[f][1]) for f in done], stage=last
            ):
                failpoints.hit("after_outcome")
            if lanes is None or self.stops.stop_reason is not None:
                continue  # a stopped turn dispatches nothing more; its waiting calls are "not run"
            for f in done:
                following = self._next_in_lane(lanes.after(futures[f][0]))
                if following is not None:
                    pending.add(submit(*following))
        self.observer.on_activity(None)
        self.stops.check_stop()

    def _next_in_lane(self, waiting: deque[Admitted]) -> Ready | None:
        """Prepare and dispatch the next waiting call on a file, now that the one before it has
        its outcome: its intent is computed from the file as that call left it."""
        early: list[Event] = []
        while waiting:
            call, tool, ctx = waiting.popleft()
            intent = None
            if tool.effect == "provable_write":
                try:
                    intent = tool.prepare(call.arguments, ctx)
                except ToolError as e:
                    early.append(self.outcome(call, ToolResult(output=str(e), is_error=True), None))
                    continue
            if early:
                self.log.append(early)
            fact = self._dispatch_fact(call, tool, intent, self._before([tool]))
            dispatch = self.log.event(
                "system", "system", actions=Actions(tool_dispatch=fact), invocation=call.invocation
            )
            failpoints.hit("before_dispatch")
            self.log.append(
                [dispatch], durable=tool.effect != "read_only", blobs=kept_before([intent])
            )
            failpoints.hit("after_dispatch")
            return call, tool, ctx, intent
        if early:
            self.log.append(early)
        return None

    def _dispatch_fact(
        self,
        call: CallState,
        tool: Tool,
        intent: WriteIntent | None,
        snapshot: WorkspaceSnapshot | None = None,
    ) -> ToolDispatch:
        return ToolDispatch(
            call_id=call.call_id,
            tool=tool.name,
            effect=tool.effect,
            args_digest=codec.args_digest(call.arguments),
            path=None if intent is None else intent.path,
            before_sha256=None if intent is None else intent.before_sha256,
            after_sha256=None if intent is None else intent.after_sha256,
            snapshot=snapshot,
        )

    def _prepare(
        self, call: CallState, early: list[Event], *, with_intent: bool = True
    ) -> Ready | None:
        """Resolve the tool, ask permission, compute a write's intent; or queue an error outcome."""
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(offered(self.tools)))
            early.append(
                self.outcome(
                    call,
                    ToolResult(
                        output=f"unknown tool {call.name!r}; the tools are: {known}", is_error=True
                    ),
                    None,
                )
            )
            return None
        if call.raw_arguments is not None:
            early.append(
                self.outcome(
                    call,
                    ToolResult(
                        output=f"{call.name} did not run: its arguments "
                        f"{arguments_error(call.raw_arguments)}; send them as one JSON object. "
                        f"They were: {call.raw_arguments[:300]}",
                        is_error=True,
                    ),
                    None,
                )
            )
            return None
        if self.state.turn.plan and tool.effect != "read_only":
            # Plan mode refuses, unasked, whatever the model calls that may change something.
            early.append(
                self.outcome(call, ToolResult(output=plan_refusal(call.name), is_error=True), None)
            )
            return None
        if self._denied(call, early):
            return None
        asked = call.arguments
        pre = self.hook_points.pre_tool(call)
        call = pre.call
        if pre.decision == "deny":
            why = pre.reason or "no reason given"
            early.append(
                self.outcome(
                    call,
                    ToolResult(
                        output=f"{call.name} did not run: the PreToolUse hook `{pre.hook}` "
                        f"denied it: {why}",
                        is_error=True,
                    ),
                    None,
                )
            )
            return None
        if call.arguments != asked and self._denied(call, early):  # the hook changed them
            return None
        if self.sandbox_mode[0] == "read-only" and (
            tool.effect == "provable_write" or tool.name in WORKSPACE_WRITERS
        ):
            # Read-only means read-only: the file tools refuse as the sandbox does, unasked.
            early.append(
                self.outcome(
                    call, ToolResult(output=read_only_refusal(call.name), is_error=True), None
                )
            )
            return None
        ctx = self.context_for(call)
        try:
            reason = tool.permission(call.arguments, ctx)
        except ToolError as e:
            early.append(self.outcome(call, ToolResult(output=str(e), is_error=True), None))
            return None
        guarded = protected_write(tool, call.arguments, ctx)
        if guarded is not None:
            reason = f"{guarded}; only a person can approve it (--yes does not)"
        if pre.decision == "allow" and guarded is None and reason is not None:
            # The hook approved it, as a person would (a protected write still asks one).
            reason, ctx = None, self.context_for(call, outside_allowed=True)
        elif pre.decision == "ask" and reason is None:
            reason = f"the PreToolUse hook `{pre.hook}` asks: {pre.reason or 'confirm this call'}"
        if reason is not None:
            answer = self._permission(
                call,
                tool,
                reason,
                early,
                protected=guarded is not None,
                hook_asks=pre.decision == "ask",
                person=self._unconfined_in_read_only(tool),
            )
            if answer != "allow":
                return None
            ctx = self.context_for(call, outside_allowed=True)
        intent = None
        if tool.effect == "provable_write" and with_intent:
            try:
                intent = tool.prepare(call.arguments, ctx)
            except ToolError as e:
                early.append(self.outcome(call, ToolResult(output=str(e), is_error=True), None))
                return None
            late = None if intent is None or guarded else write_reason(ctx, intent.path)
            if late is not None:  # the target changed into a protected one since the check
                early.append(
                    self.outcome(
                        call, ToolResult(output=f"{late}; nothing was written", is_error=True), None
                    )
                )
                return None
        return call, tool, ctx, intent

    def _unconfined_in_read_only(self, tool: Tool) -> bool:
        """Whether `tool` may change something that no sandbox confines (an MCP server's or a
        plugin's tool) in a read-only turn: --yes then does not approve it, a person must."""
        return (
            self.sandbox_mode[0] == "read-only"
            and tool.effect == "side_effecting"
            and facts_of(tool.name).command is None
            and tool.name not in CONFINED_TOOLS
        )

    def _denied(self, call: CallState, early: list[Event]) -> bool:
        """Refuse `call`, unasked, when a deny rule matches it (its result names the rule)."""
        rule = self.effective_policy.denied_by(
            call.name, call.arguments, cwd=self.state.session.workspace
        )
        if rule is None:
            return False
        result = ToolResult(output=deny_refusal(call.name, rule), is_error=True)
        early.append(self.outcome(call, result, None))
        return True

    def _permission(
        self,
        call: CallState,
        tool: Tool,
        reason: str,
        early: list[Event],
        *,
        protected: bool = False,
        hook_asks: bool = False,
        person: bool = False,
    ) -> Answer:
        allowed = False
        if person:
            reason = (
                f"{reason} (this turn is read-only, and --yes does not approve a tool that no "
                "sandbox confines)"
            )
        if call.decision is None and not hook_asks:
            command = facts_of(tool.name).command_of(call.arguments)
            if isinstance(command, str):
                verdict = self.effective_policy.check_command(
                    command, cwd=self.state.session.workspace
                )
                allowed = verdict.allowed
                reason = verdict.why or reason
        settled = choices.permission(
            call.decision,
            protected=protected,
            allowed_by_policy=allowed,
            yes=self.effective_policy.yes and not hook_asks and not person,
        )
        match settled:
            case choices.Settled(record=False):
                decision = settled.answer
            case choices.Settled() | choices.Ask():
                decision, by = self._ask(call, tool, reason, early, settled, protected=protected)
                if by == "nobody":
                    reason = f"nobody was there to approve it: {reason}"
            case _:
                assert_never(settled)
        if decision != "allow":
            early.append(
                self.outcome(
                    call, ToolResult(output=f"permission denied: {reason}", is_error=True), None
                )
            )
        return decision

    def _ask(
        self,
        call: CallState,
        tool: Tool,
        reason: str,
        early: list[Event],
        settled: choices.Permission,
        *,
        protected: bool,
    ) -> tuple[Answer, choices.By]:
        """Write the request durably, get the answer (the flag's, or the person's) and write it."""
        request = PermissionRequest(
            request_id=ids.new_id("perm"),
            call_id=call.call_id,
            tool=tool.name,
            summary=_summary(tool.name, call.arguments),
            reason=reason,
            protected=protected,
        )
        if early:
            self.log.append(early)
            early.clear()
        self.log.append(
            [
                self.log.event(
                    "system",
                    "agent",
                    actions=Actions(permission_request=request),
                    invocation=call.invocation,
                )
            ],
            durable=True,
        )
        answer: Answer
        by: choices.By
        if isinstance(settled, choices.Settled) and settled.by is not None:
            answer, by = settled.answer, settled.by
        else:
            self.hook_points.notification(f"Bubu needs your permission: {request.summary}")
            self.observer.on_activity("waiting for permission")
            answer, by = choices.answered(self.asker(request))
        self.stops.check_stop()
        dec = PermissionDecision(
            request_id=request.request_id, call_id=call.call_id, decision=answer, by=by
        )
        self.log.append(
            [
                self.log.event(
                    "system",
                    "user" if by == "user" else "host",
                    actions=Actions(permission_decision=dec),
                    invocation=call.invocation,
                )
            ],
            durable=True,
        )
        return answer, by


def _summary(tool: str, args: dict[str, object]) -> str:
    return facts_of(tool).call_summary(tool, args)


def _run_tool(
    tool: Tool, args: dict[str, Any], ctx: ToolContext, intent: WriteIntent | None
) -> ToolResult:
    try:
        return tool.run(args, ctx, intent)
    except ToolError as e:
        return ToolResult(output=str(e), is_error=True)
    except Exception as e:  # a tool bug is a result the model sees, never a crash of the run
        return ToolResult(
            output=f"{tool.name} failed unexpectedly: {type(e).__name__}: {e}", is_error=True
        )


__all__ = ["Ready", "ToolCalls", "ToolState"]
