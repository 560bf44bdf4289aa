"""The driver: does what `decide` says, and appends what happened.

Every step is an append through the session's lease. A model response is appended in one
transaction; a tool call crosses two durable boundaries (DESIGN §4): the dispatch is committed and
synced before the tool starts, the outcome is committed before the model can see it. Model calls
and tools run in worker threads so that a stop (Ctrl-C, SIGTERM, a lost lease) is noticed at once.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import os
import random
import socket
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import msgspec

from bubu import clock, failpoints, ids, pricing
from bubu.context.offload import offload_result
from bubu.context.policy import ContextPolicy
from bubu.engine.attempts import End, Knobs, after_failure, wanted_model
from bubu.engine.backoff import WAIT_CAP_S
from bubu.engine.callids import unique_call_id
from bubu.engine.compactor import Compactor
from bubu.engine.decide import CallModel, EndTurn, Idle, NeedsRecovery, RunTools, decide
from bubu.engine.instructions import Instructions
from bubu.engine.lanes import Admitted, Lanes
from bubu.engine.memory import workspace_memory
from bubu.engine.permissions import Answer, Asker, Policy, nobody
from bubu.engine.prompt import system_prompt
from bubu.errors import AppendConflict, BubuError, LeaseLost, ProviderError, StorageError, ToolError
from bubu.events import (
    Actions,
    Content,
    EndCause,
    Event,
    FunctionCall,
    FunctionResponse,
    Info,
    PermissionDecision,
    PermissionRequest,
    Record,
    Role,
    RunStarted,
    SandboxMode,
    StepLimit,
    SystemNote,
    Text,
    Thinking,
    TokenUsage,
    ToolDispatch,
    TurnEnded,
    TurnEndReason,
    make,
)
from bubu.events import ModelRequest as ModelRequestNote
from bubu.log import codec, redact
from bubu.log.store import Lease, SessionInfo, Store
from bubu.projections.context import ContextFold
from bubu.projections.longrun import LongRunFold
from bubu.projections.memory import Note
from bubu.projections.turn import CallState, TurnFold
from bubu.providers.base import (
    Delta,
    ModelRequest,
    ModelResponse,
    Provider,
    TextPart,
    ThinkingPart,
    ToolSpec,
)
from bubu.tools import sandbox
from bubu.tools.base import Tool, ToolContext, ToolResult, WriteIntent
from bubu.tools.protected import protected_reason, protected_write, relative

StopReason = Literal["stopped", "suspended", "lease_lost"]
STOP_POLL_S = 0.5
"""How often a running turn looks for a stop request from another process."""
_STOPPED_BY: dict[StopReason, str] = {
    "stopped": "stopped by the user",
    "suspended": "stopped by an orderly shutdown of Bubu (SIGTERM)",
    "lease_lost": "stopped because another runner took this session over",
}


class Observer(Protocol):
    """What a host (CLI, web UI) sees of a running turn."""

    def on_delta(self, delta: Delta) -> None:
        """A streamed fragment of model text or thinking (not yet committed)."""

    def on_records(self, records: Sequence[Record]) -> None:
        """Records just committed, in seq order."""

    def on_activity(self, text: str | None) -> None:
        """What is running now (a tool, the model), or None when idle."""


class NullObserver:
    """An observer that ignores everything."""

    def on_delta(self, delta: Delta) -> None:
        """Ignore."""

    def on_records(self, records: Sequence[Record]) -> None:
        """Ignore."""

    def on_activity(self, text: str | None) -> None:
        """Ignore."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """Knobs of a run."""

    max_steps: int | None = None
    max_cost: float | None = None
    tool_timeout_s: float = 600.0
    model_attempts: int | None = None
    """A cap on the attempts of one model call (None: only the retry horizon bounds them)."""
    backoff_s: float = 1.0
    backoff_max_s: float = WAIT_CAP_S
    retry_for_s: float | None = None
    """How long transient provider failures are waited out (None: the turn's, else the default)."""
    fallback_models: tuple[str, ...] = ()
    token_limit: int | None = None
    time_limit_s: float | None = None
    lease_ttl_s: float = 30.0
    max_tokens: int = 8192
    context_window: int | None = None
    context: ContextPolicy = field(default_factory=ContextPolicy)
    project_instructions: bool = True
    """Whether the turns this host starts give the model the workspace's AGENTS.md files."""


class _Stop(Exception):
    pass


def owner_id() -> str:
    """This process's identity as a lease owner: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{ids.new_id('own')[-6:]}"


def sanitize(value: Any) -> Any:
    """Replace lone surrogates in every string of a JSON value (provider text is not trusted)."""
    if isinstance(value, str):
        return codec.sanitize_text(value)
    if isinstance(value, dict):
        return {codec.sanitize_text(str(k)): sanitize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize(v) for v in value]
    return value


@dataclass(eq=False)
class Runner:
    """Drives the open turn of one session while holding its lease."""

    store: Store
    session: SessionInfo
    provider: Provider
    tools: dict[str, Tool]
    lease: Lease
    policy: Policy = field(default_factory=Policy)
    asker: Asker = nobody
    observer: Observer = field(default_factory=NullObserver)
    config: RunConfig = field(default_factory=RunConfig)
    prompt: str | None = None
    """A custom system prompt; else the one recorded with the turn; else Bubu's own."""
    fallbacks: dict[str, Provider] = field(default_factory=dict)
    """Providers for the turn's fallback models, by spec (others are resolved when needed)."""

    def __post_init__(self) -> None:
        self.turn = TurnFold()
        self.longrun = LongRunFold()
        self.instructions = Instructions()
        self._primary = self.provider
        self._blobs: set[str] = set()
        self._call_ids: set[str] = set()  # every call id of the session (they must be unique)
        self.context = ContextFold(policy=self.config.context, blobs=self.store.blob)
        self.compactor = Compactor(policy=self.config.context)
        self.high_water = 0
        self.run: str | None = None
        self._stop: StopReason | None = None
        self._stop_event = threading.Event()
        self._pool = cf.ThreadPoolExecutor(max_workers=8, thread_name_prefix="bubu-tool")
        self._heartbeat: threading.Thread | None = None
        self.tool_specs = tuple(
            ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
            for t in sorted(self.tools.values(), key=lambda t: t.name)
        )
        self._catch_up()

    @property
    def system(self) -> str:
        """The system prompt: stable for the session, part of the cacheable prefix."""
        if self.prompt is not None:
            base = self.prompt
        elif self.turn.system_prompt is not None:
            base = self.turn.system_prompt
        else:
            base = system_prompt(self.session.workspace)
        return self.instructions.system(base)

    @property
    def effective_policy(self) -> Policy:
        """The host's policy widened by the one recorded when the turn started."""
        return Policy(
            yes=self.policy.yes or self.turn.yes,
            allow_commands=tuple(
                dict.fromkeys([*self.policy.allow_commands, *self.turn.allow_commands])
            ),
            sandbox=self.sandbox_mode[0],
            network=self.sandbox_mode[1],
            sandboxed=sandbox.confinement(*self.sandbox_mode) is not None,
            pass_env=tuple(dict.fromkeys([*self.policy.pass_env, *self.turn.pass_env])),
        )

    @property
    def sandbox_mode(self) -> tuple[SandboxMode, bool]:
        """The sandbox mode and network flag of the turn: recorded with it, else the host's."""
        t, p = self.turn, self.policy
        return sandbox.turn_mode(t.sandbox, t.network, p.sandbox, p.network)

    # -- plumbing ---------------------------------------------------------------------------------

    def _catch_up(self) -> list[Record]:
        records = self.store.read(self.session.id, after=self.high_water)
        for r in records:
            self.turn.apply(r)
            self.longrun.apply(r)
            self.instructions.apply(r)
            self.context.apply(r)
            self.compactor.apply(self, r)
            blob = getattr(r.event.content, "blob", None)
            if blob is not None:
                self._blobs.add(blob.sha256)
            if isinstance(r.event.content, FunctionCall):
                self._call_ids.add(r.event.content.call_id)
        if records:
            self.high_water = records[-1].seq
        return records

    def append(
        self, events: Sequence[Event], *, durable: bool = False, blobs: Sequence[bytes] = ()
    ) -> None:
        """Append through the lease, fold what was committed and tell the observer.

        Other processes may append only notice dismissals to a running session; such an append
        makes ours conflict, so we fold it in and retry. Anything else is a real conflict.
        """
        while True:
            try:
                self.store.append(
                    self.session.id,
                    events,
                    expect=self.high_water,
                    durable=durable,
                    lease=self.lease,
                    blobs=blobs,
                )
            except AppendConflict:
                foreign = self._catch_up()
                self.observer.on_records(foreign)
                if not foreign or not all(_benign(r) for r in foreign):
                    raise
                continue
            self.observer.on_records(self._catch_up())
            return

    def event(
        self,
        role: Role,
        author: Literal["user", "host", "agent", "tool", "system"],
        content: Content | None = None,
        actions: Actions | None = None,
        *,
        invocation: str | None = None,
        visibility: Literal["visible", "hidden"] = "visible",
        status: Literal["completed", "failed", "aborted", "cancelled"] | None = None,
    ) -> Event:
        """A new event in the current turn and run."""
        return make(
            session=self.session.id,
            turn=self.turn.turn,
            run=self.run,
            invocation=invocation,
            role=role,
            author=author,
            ts=clock.now_ms(),
            content=content,
            actions=actions,
            visibility=visibility,
            status=status,
        )

    def note(self, note: Any) -> Event:
        """A hidden system note."""
        return self.event("system", "system", SystemNote(note=note), visibility="hidden")

    def request_stop(self, reason: StopReason) -> None:
        """Ask the run to stop at once (Ctrl-C: stopped; SIGTERM: suspended). Safe from signal handlers."""
        if self._stop is None:
            self._stop = reason
        self._stop_event.set()

    def _stopped_by(self) -> str:
        """Who stopped this run, in the words a cut-off tool result uses."""
        return _STOPPED_BY[self._stop or "stopped"]

    def _check_stop(self) -> None:
        if self._stop is not None:
            raise _Stop

    def _wait(self, fut: cf.Future[Any]) -> Any:
        while True:
            try:
                return fut.result(timeout=0.1)
            except cf.TimeoutError:
                self._check_stop()

    def _sleep(self, seconds: float) -> None:
        if self._stop_event.wait(seconds):
            self._check_stop()

    def _beat(self) -> None:
        """Renew the lease every third of its time; between renewals, look for a stop request
        from another process (`bubu stop`, a web UI that does not run this turn)."""
        period = self.config.lease_ttl_s / 3
        due = time.monotonic() + period
        while not self._stop_event.wait(min(STOP_POLL_S, period)):
            try:
                if time.monotonic() >= due:
                    self.lease = self.store.renew_lease(self.lease, self.config.lease_ttl_s)
                    due = time.monotonic() + period
                now = self.store.current_lease(self.session.id)
                if now is not None and now.epoch == self.lease.epoch and now.stop_requested:
                    self.request_stop("stopped")
                    return
            except LeaseLost:
                self.request_stop("lease_lost")
                return
            except BubuError:
                continue

    # -- the loop ---------------------------------------------------------------------------------

    def start_run(
        self, cause: Literal["new", "resume", "recovery"], *, prefix: Sequence[Event] = ()
    ) -> None:
        """Open a new run of the turn (after `prefix`, e.g. the user's request and turn start)."""
        self.run = ids.run_id()
        started = self.note(
            RunStarted(
                cause=cause,
                pid=os.getpid(),
                host=socket.gethostname(),
                owner=self.lease.owner,
                epoch=self.lease.epoch,
                proc_start=_start_of(os.getpid()),
            )
        )
        events = [*prefix, started]
        # The prefix may open the turn: stamp every event with the turn and run it belongs to.
        turn = next((e.turn for e in events if e.turn), self.turn.turn)
        events = [self._stamp(e, turn) for e in events]
        self.append(events, durable=True)
        mode, network = self.sandbox_mode
        if mode != "off" and sandbox.confinement(mode, network) is None:
            # The log says why this run's commands ask although the turn wants a sandbox.
            why = sandbox.unavailable()
            self.append([self.note(Info(text=f"no sandbox for commands: {why}; each one asks"))])

    def _stamp(self, e: Event, turn: str | None) -> Event:
        return make(
            id=e.id, session=e.session, turn=turn, run=self.run, invocation=e.invocation, role=e.role,
            author=e.author, ts=e.ts, content=e.content, actions=e.actions, visibility=e.visibility,
            status=e.status,
        )  # fmt: skip

    def drive(
        self, before: Callable[[], None] | None = None, *, continue_turn: bool = True
    ) -> TurnEndReason | None:
        """Run the open turn until it ends (or the run stops); returns how the turn ended.

        `before` runs first, under the same lease heartbeat and stop handling (recovery applies
        its plan there); with `continue_turn` false the run ends after it.
        """
        self._heartbeat = threading.Thread(target=self._beat, name="bubu-lease", daemon=True)
        self._heartbeat.start()
        _ACTIVE.add(self)
        try:
            while True:
                try:
                    if before is not None:
                        todo, before = before, None
                        todo()
                        if not continue_turn:
                            return None
                    self._check_stop()
                    step = decide(self.turn, limit=self.longrun.limit_hit(clock.now_ms()))
                    match step:
                        case Idle():
                            return self.turn.end_reason
                        case CallModel():
                            self._call_model()
                        case RunTools(calls=calls):
                            self._run_tools(calls)
                            self.instructions.after_tools(self, calls)
                        case EndTurn(reason=reason, message=message, step_limit=limit, cause=cause):
                            notes = [self.note(StepLimit(steps=limit))] if limit else []
                            self.end_turn(reason, message, extra=notes, cause=cause)
                        case NeedsRecovery():
                            raise BubuError(
                                f"session {self.session.id} has tool calls interrupted by a crash; "
                                "run `bubu recover` first"
                            )
                except _Stop:
                    stop = self._stop
                    if stop == "lease_lost" or stop is None:
                        return None
                    if not self.turn.open:
                        return self.turn.end_reason  # the stop came after the turn had ended
                    self._finish_stopped(stop)
                    return stop
        except LeaseLost:
            return None
        finally:
            _ACTIVE.discard(self)
            self._stop_event.set()
            self._pool.shutdown(wait=False, cancel_futures=True)

    def end_turn(
        self,
        reason: TurnEndReason,
        message: str | None = None,
        *,
        extra: Sequence[Event] = (),
        cause: EndCause | None = None,
    ) -> None:
        """Append the turn's end (fully synced), unless it has ended already: a turn ends once.

        The append expects our high water, so the open turn we fold here is the log's own.
        """
        if not self.turn.open:
            return
        failpoints.hit("before_turn_end")
        end = TurnEnded(reason=reason, message=message, cause=cause)
        self.append([*extra, self.note(end)], durable=True)
        failpoints.hit("after_turn_end")

    def _finish_stopped(self, reason: Literal["stopped", "suspended"]) -> None:
        # Calls dispatched in this run whose outcome is missing were cancelled: say so.
        events = []
        for c in self.turn.dangling:
            events.append(
                self._outcome(
                    c,
                    ToolResult(output=f"{self._stopped_by()} before it finished", is_error=True),
                    None,
                )
            )
        for c in self.turn.undispatched:
            events.append(
                self._outcome(
                    c, ToolResult(output=f"not run: the turn was {reason}", is_error=True), None
                )
            )
        msg = "stopped by the user" if reason == "stopped" else "suspended by an orderly shutdown"
        self.end_turn(reason, msg, extra=events)

    # -- model calls ------------------------------------------------------------------------------

    def build_request(self) -> ModelRequest:
        """The next model request, projected from the log."""
        return ModelRequest(
            system=self.system,
            tools=self.tool_specs,
            messages=self.context.messages(),
            max_tokens=self.config.max_tokens,
            ordinal=self.turn.model_responses,
        )

    def request_digest(self, request: ModelRequest) -> tuple[str, int]:
        """The digest naming the exact request, and its estimated tokens (bytes / 4).

        The digest is sha-256 over the canonical header (model, system prompt, tools, limits)
        followed by the per-message digests of `ContextFold.fingerprint`, so it is O(new events)
        to compute yet changes with any byte of the request.
        """
        header = _request_encoder.encode(
            {"model": self.provider.spec, "system": request.system, "tools": request.tools,
             "max_tokens": request.max_tokens, "ordinal": request.ordinal, "purpose": request.purpose}
        )  # fmt: skip
        messages, size = self.context.fingerprint()
        digest = codec.sha256_hex(header + bytes.fromhex(messages))
        return digest, (len(header) + size) // 4

    def digest_at(self, seq: int) -> str:
        """The chain digest of this session's prefix 1..seq."""
        rows = self.store.read(self.session.id, after=seq - 1, upto=seq)
        return rows[0].hash if rows else codec.GENESIS.hex()

    def _call_model(self) -> None:
        """One attempt of the next model call; a transient failure plans (and waits out) the next
        attempt, which the loop makes after `decide` has looked at the limits again."""
        self._select_model()
        request = self.build_request()
        digest, estimate = self.request_digest(request)
        # Compact until the request fits (a second pass helps when the kept tail was too big).
        for _ in range(3):
            if not self.compactor.over_budget(self, estimate):
                break
            before = self.context.checkpoint.watermark if self.context.checkpoint else 0
            self.compactor.compact(self)
            request = self.build_request()
            digest, estimate = self.request_digest(request)
            after = self.context.checkpoint.watermark if self.context.checkpoint else 0
            if after == before:
                break  # nothing more could be folded (or the summary failed: raw history)
        checkpoint = self.context.checkpoint.key if self.context.checkpoint is not None else None
        attempt = self.longrun.streak + 1
        self.append(
            [self.note(ModelRequestNote(model=self.provider.spec, request_digest=digest, checkpoint=checkpoint,
                                        estimated_tokens=estimate, attempt=attempt))]
        )  # fmt: skip
        failpoints.hit("before_model_call")
        self.observer.on_activity("thinking")
        try:
            response = self._wait(self._pool.submit(self._complete, request))
        except ProviderError as e:
            self._failed_attempt(e, attempt)
            return
        self._commit_response(response, estimate)

    def _select_model(self) -> None:
        """Use the provider of the model the log says the turn is on (a fallback, or the primary)."""
        want = wanted_model(self.longrun, self._primary.spec)
        if want is None:
            self.provider = self._primary
        elif want != self.provider.spec:
            if want not in self.fallbacks:
                from bubu.providers import resolve

                self.fallbacks[want] = resolve(want)
            self.provider = self.fallbacks[want]

    def _failed_attempt(self, e: ProviderError, attempt: int) -> None:
        """Record a failed attempt; end the turn, or wait (interruptibly) before the next one."""
        c = self.config
        then = after_failure(
            e, attempt=attempt, fold=self.longrun, primary=self._primary.spec,
            knobs=Knobs(retry_for_s=c.retry_for_s, base_s=c.backoff_s, cap_s=c.backoff_max_s,
                        max_attempts=c.model_attempts),
            current=self.provider.spec, now_ms=clock.now_ms(), session=self.session.id,
            rand=random.random,
        )  # fmt: skip
        events = [self.event("system", "system", then.error)]
        if isinstance(then, End):
            self.append(events)
            self.end_turn("failed", then.message, cause=then.cause)
            return
        if then.switch is not None:
            events.append(self.note(then.switch))
        self.append(events)
        self.observer.on_activity(f"retrying in {then.delay_s:.1f}s ({e.error_class})")
        self._sleep(then.delay_s)

    def _complete(self, request: ModelRequest) -> ModelResponse:
        fired = False

        def on_delta(d: Delta) -> None:
            nonlocal fired
            if not fired:
                fired = True
                failpoints.hit("mid_model_call")
            if self._stop is not None:
                raise _Stop
            self.observer.on_delta(d)

        response = self.provider.complete(request, on_delta)
        if not fired:
            failpoints.hit("mid_model_call")
        return response

    def _commit_response(self, response: ModelResponse, estimate: int) -> None:
        inv = ids.invocation_id()
        contents: list[Content] = []
        for p in response.parts:
            if isinstance(p, TextPart):
                contents.append(Text(text=codec.sanitize_text(p.text)))
            elif isinstance(p, ThinkingPart):
                contents.append(
                    Thinking(
                        text=codec.sanitize_text(p.text), signature=p.signature, redacted=p.redacted
                    )
                )
            else:
                cid = unique_call_id(p.call_id, self._call_ids)
                self._call_ids.add(cid)
                contents.append(FunctionCall(
                    call_id=cid, provider_id=None if cid == p.call_id else p.call_id, name=codec.sanitize_text(p.name), arguments=sanitize(p.arguments),
                    raw_arguments=None if p.raw_arguments is None else codec.sanitize_text(p.raw_arguments)))  # fmt: skip
        if not contents:
            contents.append(Text(text=""))
        u = response.usage
        usage = TokenUsage(
            model=self.provider.spec, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens, cache_write_tokens=u.cache_write_tokens,
            estimated_input_tokens=estimate, stop_reason=response.stop_reason,
            cost_usd=pricing.call_cost(
                self.provider.spec, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                cache_read_tokens=u.cache_read_tokens, cache_write_tokens=u.cache_write_tokens,
                official=getattr(self.provider, "official", True)),
        )  # fmt: skip
        events = [self.event("model", "agent", c, invocation=inv) for c in contents[:-1]]
        events.append(self.event("model", "agent", contents[-1], Actions(token_usage=usage, end_invocation=True),
                                 invocation=inv, status="completed"))  # fmt: skip
        self.append(events)
        failpoints.hit("after_model_response")

    # -- tools ------------------------------------------------------------------------------------

    def context_for(self, call: CallState, *, outside_allowed: bool = False) -> ToolContext:
        """The context a tool call runs in."""
        from pathlib import Path

        return ToolContext(
            workspace=Path(self.session.workspace),
            timeout_s=self.config.tool_timeout_s,
            cancel=self._stop_event,
            stopped_by=self._stopped_by,
            outside_allowed=outside_allowed,
            blob=self.read_blob,
            sandbox=sandbox.confinement(*self.sandbox_mode),
            pass_env=self.effective_policy.pass_env,
            marker=f"{self.session.id}/{self.run}/{call.call_id}",
            memory=self.read_memory,
        )

    def read_memory(self) -> dict[str, Note]:
        """The live notes of this session's workspace (every session of it in the store)."""
        return workspace_memory(self.store, self.session.workspace)

    def read_blob(self, handle: str) -> bytes | None:
        """The bytes of one of this session's offloaded results, by sha-256 or a unique prefix."""
        handle = handle.strip().lower()
        matches = [sha for sha in self._blobs if sha.startswith(handle)]
        if len(matches) > 1:
            raise ToolError(f"the handle {handle} matches {len(matches)} results; give more of it")
        return self.store.blob(matches[0]) if matches else None

    def _outcome(self, call: CallState, result: ToolResult, started: float | None) -> Event:
        return self._offloaded(call, result, started, offload=False)[0]

    def _offloaded(
        self, call: CallState, result: ToolResult, started: float | None, *, offload: bool = True
    ) -> tuple[Event, bytes | None]:
        """The outcome event; a large result is offloaded (placeholder inline, bytes as a blob)."""
        duration = None if started is None else int((clock.monotonic() - started) * 1000)
        text = codec.sanitize_text(result.output)
        data = result.full if result.full is not None else text.encode("utf-8")
        # Before the placeholder's excerpt cuts a line (and a secret in it) short.
        data = redact.data(data)
        # A page of an offloaded result is never offloaded again.
        offload = offload and call.name not in ("read_result", "search_result")
        placed = offload_result(call.name, data, self.config.context) if offload else None
        blob = None
        if placed is not None:
            text, blob = placed
        event = self.event(
            "tool", "tool",
            FunctionResponse(call_id=call.call_id, name=call.name, result=text, is_error=result.is_error,
                             duration_ms=duration, blob=blob),
            invocation=call.invocation, status="failed" if result.is_error else "completed",
        )  # fmt: skip
        return event, (data if blob is not None else None)

    def commit_outcomes(self, done: Sequence[tuple[CallState, ToolResult, float | None]]) -> None:
        """Commit outcomes with their offloaded blobs in one transaction; if storing the blobs
        fails, commit the results inline instead — never a reference to bytes that are not there."""
        pairs = [self._offloaded(c, r, t) for c, r, t in done]
        blobs = [b for _, b in pairs if b is not None]
        try:
            self.append([e for e, _ in pairs], blobs=blobs)
        except StorageError:
            if not blobs:
                raise
            inline = [
                ToolResult(output=r.full.decode("utf-8", "replace"), is_error=r.is_error)
                if r.full
                else r
                for _, r, _ in done
            ]
            try:
                self.append(
                    [self._outcome(c, r, t) for (c, _, t), r in zip(done, inline, strict=True)]
                )
            except StorageError:
                # Not even that fits (a full disk): keep the run going with what the tool kept for
                # the model, saying what was lost, rather than losing the outcome altogether.
                cut = [
                    ToolResult(
                        output=f"{r.output}\n[the complete output ({len(r.full or b''):,} bytes) "
                        "could not be stored: the disk is full]",
                        is_error=r.is_error,
                    )
                    for _, r, _ in done
                ]
                self.append(
                    [self._outcome(c, r, t) for (c, _, t), r in zip(done, cut, strict=True)]
                )

    def _run_tools(self, calls: Sequence[CallState]) -> None:
        ready: list[tuple[CallState, Tool, ToolContext, WriteIntent | None]] = []
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
            self.append(early)
        if not ready:
            return
        dispatches = [
            self.event("system", "system", actions=Actions(tool_dispatch=self._dispatch_fact(c, t, i)),
                       invocation=c.invocation)
            for c, t, _, i in ready
        ]  # fmt: skip
        failpoints.hit("before_dispatch")
        self.append(dispatches, durable=any(t.effect != "read_only" for _, t, _, _ in ready))
        failpoints.hit("after_dispatch")
        self.execute(ready, lanes)

    def execute(
        self,
        ready: Sequence[tuple[CallState, Tool, ToolContext, WriteIntent | None]],
        lanes: Lanes | None = None,
    ) -> None:
        """Run dispatched calls concurrently and commit each outcome as it arrives; a call
        waiting in `lanes` for one that finished is then prepared, dispatched and started."""
        futures: dict[cf.Future[ToolResult], tuple[CallState, float]] = {}

        def submit(
            call: CallState, tool: Tool, ctx: ToolContext, intent: WriteIntent | None
        ) -> cf.Future[ToolResult]:
            self.observer.on_activity(f"{tool.name}")
            fut = self._pool.submit(_run_tool, tool, call.arguments, ctx, intent)
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
            self.commit_outcomes([(futures[f][0], f.result(), futures[f][1]) for f in done])
            failpoints.hit("after_outcome")
            if lanes is None or self._stop is not None:
                continue  # a stopped turn dispatches nothing more; its waiting calls are "not run"
            for f in done:
                following = self._next_in_lane(lanes.after(futures[f][0]))
                if following is not None:
                    pending.add(submit(*following))
        self.observer.on_activity(None)
        self._check_stop()

    def _next_in_lane(
        self, waiting: deque[Admitted]
    ) -> tuple[CallState, Tool, ToolContext, WriteIntent | None] | None:
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
                    early.append(
                        self._outcome(call, ToolResult(output=str(e), is_error=True), None)
                    )
                    continue
            if early:
                self.append(early)
            dispatch = self.event("system", "system", actions=Actions(tool_dispatch=self._dispatch_fact(call, tool, intent)),
                                  invocation=call.invocation)  # fmt: skip
            failpoints.hit("before_dispatch")
            self.append([dispatch], durable=tool.effect != "read_only")
            failpoints.hit("after_dispatch")
            return call, tool, ctx, intent
        if early:
            self.append(early)
        return None

    def _dispatch_fact(
        self, call: CallState, tool: Tool, intent: WriteIntent | None
    ) -> ToolDispatch:
        return ToolDispatch(
            call_id=call.call_id, tool=tool.name, effect=tool.effect,
            args_digest=codec.args_digest(call.arguments),
            path=None if intent is None else intent.path,
            before_sha256=None if intent is None else intent.before_sha256,
            after_sha256=None if intent is None else intent.after_sha256,
        )  # fmt: skip

    def _prepare(
        self, call: CallState, early: list[Event], *, with_intent: bool = True
    ) -> tuple[CallState, Tool, ToolContext, WriteIntent | None] | None:
        """Resolve the tool, ask permission, compute a write's intent; or queue an error outcome."""
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools))
            early.append(
                self._outcome(
                    call,
                    ToolResult(
                        output=f"unknown tool {call.name!r}; the tools are: {known}", is_error=True
                    ),
                    None,
                )
            )
            return None
        if call.raw_arguments is not None:
            early.append(self._outcome(call, ToolResult(
                output=f"the arguments were not valid JSON, so {call.name} did not run: {call.raw_arguments[:500]}",
                is_error=True), None))  # fmt: skip
            return None
        ctx = self.context_for(call)
        try:
            reason = tool.permission(call.arguments, ctx)
        except ToolError as e:
            early.append(self._outcome(call, ToolResult(output=str(e), is_error=True), None))
            return None
        guarded = protected_write(tool, call.arguments, ctx)
        if guarded is not None:
            reason = f"{guarded}; only a person can approve it (--yes does not)"
        if reason is not None:
            answer = self._permission(call, tool, reason, early, protected=guarded is not None)
            if answer != "allow":
                return None
            ctx = self.context_for(call, outside_allowed=True)
        intent = None
        if tool.effect == "provable_write" and with_intent:
            try:
                intent = tool.prepare(call.arguments, ctx)
            except ToolError as e:
                early.append(self._outcome(call, ToolResult(output=str(e), is_error=True), None))
                return None
            late = (
                None if intent is None or guarded else protected_reason(relative(ctx, intent.path))
            )
            if late is not None:  # the target changed into a protected one since the check
                early.append(self._outcome(call, ToolResult(output=f"{late}; nothing was written", is_error=True), None))  # fmt: skip
                return None
        return call, tool, ctx, intent

    def _permission(
        self,
        call: CallState,
        tool: Tool,
        reason: str,
        early: list[Event],
        *,
        protected: bool = False,
    ) -> Answer:
        decision: Answer
        answer: Answer
        if call.decision is not None:  # decided before a crash: never ask twice, never assume
            decision = call.decision.decision
            if protected and call.decision.by != "user":
                decision = "deny"  # approved by a flag, before the target became protected
        else:
            command = call.arguments.get("command") if tool.name == "run_command" else None
            if isinstance(command, str):
                verdict = self.effective_policy.check_command(command, cwd=self.session.workspace)
                if verdict.allowed:
                    return "allow"
                reason = verdict.why or reason
            request = PermissionRequest(
                request_id=ids.new_id("perm"), call_id=call.call_id, tool=tool.name,
                summary=_summary(tool.name, call.arguments), reason=reason, protected=protected,
            )  # fmt: skip
            if early:
                self.append(early)
                early.clear()
            self.append([self.event("system", "agent", actions=Actions(permission_request=request), invocation=call.invocation)],
                        durable=True)  # fmt: skip
            by: Literal["user", "flag", "nobody"]
            if self.effective_policy.yes and not protected:
                answer, by = "allow", "flag"
            else:
                self.observer.on_activity("waiting for permission")
                got = self.asker(request)
                answer, by = (got, "user") if got is not None else ("deny", "nobody")
            self._check_stop()
            dec = PermissionDecision(
                request_id=request.request_id, call_id=call.call_id, decision=answer, by=by
            )
            self.append([self.event("system", "user" if by == "user" else "host", actions=Actions(permission_decision=dec),
                                    invocation=call.invocation)], durable=True)  # fmt: skip
            decision = answer
            if by == "nobody":
                reason = f"nobody was there to approve it: {reason}"
        if decision != "allow":
            early.append(
                self._outcome(
                    call, ToolResult(output=f"permission denied: {reason}", is_error=True), None
                )
            )
        return decision


_ACTIVE: weakref.WeakSet[Runner] = weakref.WeakSet()


def stop_all(reason: StopReason) -> bool:
    """Ask every runner of this process that is driving a turn to stop; False if there was none."""
    runners = list(_ACTIVE)
    for r in runners:
        r.request_stop(reason)
    return bool(runners)


@functools.cache
def _start_of(pid: int) -> str | None:
    # Keyed by pid: a forked child is another process.
    from bubu.engine.scope import proc_start

    return proc_start(pid)


def _ignore(_: Delta) -> None:
    """A delta sink that drops everything (summaries are not streamed to the screen)."""


def _benign(r: Record) -> bool:
    """A record another process may append to a running session (a notice dismissal)."""
    c = r.event.content
    return isinstance(c, SystemNote) and type(c.note).__name__ in (
        "NoticeDismissed",
        "MemoryForgotten",
    )


def _summary(tool: str, args: dict[str, object]) -> str:
    if tool == "run_command":
        return f"run `{args.get('command')}`"
    path = args.get("path")
    return f"{tool} {path}" if path is not None else tool


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


_request_encoder = msgspec.json.Encoder(order="sorted")


__all__ = ["NullObserver", "Observer", "RunConfig", "Runner", "owner_id", "sanitize", "stop_all"]
