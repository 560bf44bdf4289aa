"""The driver: does what `decide` says, and appends what happened.

Every step is an append through the session's lease. A model response is appended in one
transaction; a tool call crosses two durable boundaries (DESIGN §4): the dispatch is committed and
synced before the tool starts, the outcome is committed before the model can see it. Model calls
and tools run in worker threads so that a stop (Ctrl-C, SIGTERM, a lost lease) is noticed at once.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import os
import random
import socket
import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, assert_never

from bubu import clock, failpoints, ids, images, pricing
from bubu.context.offload import offload_result
from bubu.context.policy import ContextPolicy
from bubu.engine import choices, compacting, turnstart
from bubu.engine.attempts import End, Knobs, after_failure, wanted_model
from bubu.engine.backoff import WAIT_CAP_S
from bubu.engine.callids import unique_call_id
from bubu.engine.compactor import Compactor, cache_view
from bubu.engine.decide import CallModel, EndTurn, Idle, NeedsRecovery, RunTools, decide
from bubu.engine.instructions import Instructions
from bubu.engine.keep import kept_before
from bubu.engine.lanes import Admitted, Lanes
from bubu.engine.lease import heartbeat
from bubu.engine.loops import GoOn, Stuck, verdict, warning
from bubu.engine.memory import workspace_memory
from bubu.engine.overflow import Again, Shrink, Stop, after_overflow, empty_response
from bubu.engine.permissions import Answer, Asker, Policy, nobody
from bubu.engine.prompt import system_prompt
from bubu.errors import AppendConflict, BubuError, LeaseLost, ProviderError, StorageError, ToolError
from bubu.events import (
    Actions,
    Content,
    EndCause,
    Error,
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
    ServerNote,
    StepLimit,
    SystemNote,
    Text,
    Thinking,
    TokenUsage,
    ToolDispatch,
    TurnEnded,
    TurnEndReason,
    WindowLearned,
    make,
)
from bubu.events import ModelRequest as ModelRequestNote
from bubu.log import codec, redact
from bubu.log.store import Lease, SessionInfo, Store
from bubu.projections.context import ContextFold
from bubu.projections.longrun import LongRunFold
from bubu.projections.memory import Note
from bubu.projections.request import NextRequest, Prefix, RequestFold, build
from bubu.projections.turn import CallState, TurnFold
from bubu.providers.base import (
    Delta,
    ModelRequest,
    ModelResponse,
    Provider,
    TextPart,
    ThinkingPart,
    ToolSpec,
    arguments_error,
)
from bubu.tools import sandbox
from bubu.tools.base import Tool, ToolContext, ToolResult, WriteIntent
from bubu.tools.protected import protected_reason, protected_write, relative

StopReason = Literal["stopped", "suspended", "lease_lost"]
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
    max_tokens: int | None = None
    """The cap on tokens one call may produce (None: the provider's `--max-output-tokens`)."""
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
        self.requests = RequestFold(policy=self.config.context)
        self.compactor = Compactor(policy=self.config.context, fold=self.requests)
        self._hot: dict[str, bytes] = {}  # the hot offloaded results' bytes (content-addressed)
        self.high_water = 0
        """The seq of the last record folded in (staged ones included)."""
        self._confined: tuple[tuple[SandboxMode, bool], sandbox.Sandbox | None] | None = None
        self._staged: list[Event] = []  # folded, committed with the next append (see `stage`)
        self._after_commit: list[str] = []  # failpoints reached once the staged events commit
        self.run: str | None = None
        self._run_seq = 0  # the seq this run started at
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
    def context(self) -> ContextFold:
        """The conversation as the next request shows it."""
        return self.requests.context

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
            sandboxed=self.confinement() is not None,
            pass_env=tuple(dict.fromkeys([*self.policy.pass_env, *self.turn.pass_env])),
        )

    @property
    def sandbox_mode(self) -> tuple[SandboxMode, bool]:
        """The sandbox mode and network flag of the turn: recorded with it, else the host's."""
        t, p = self.turn, self.policy
        return sandbox.turn_mode(t.sandbox, t.network, p.sandbox, p.network)

    def confinement(self) -> sandbox.Sandbox | None:
        """The sandbox of the turn's commands (looked up once per mode: it searches PATH)."""
        mode = self.sandbox_mode
        if self._confined is None or self._confined[0] != mode:
            self._confined = (mode, sandbox.confinement(*mode))
        return self._confined[1]

    # -- plumbing ---------------------------------------------------------------------------------

    def _catch_up(self) -> list[Record]:
        assert not self._staged
        records = self.store.read(self.session.id, after=self.high_water)
        self._fold(records)
        return records

    def _refold(self) -> None:
        """Fold the log afresh, without the staged events (they were not committed)."""
        self._staged, self._after_commit = [], []
        self.turn, self.longrun = TurnFold(), LongRunFold()
        self.requests = RequestFold(policy=self.config.context)
        self.compactor.fold = self.requests
        self._blobs, self._call_ids, self.high_water = set(), set(), 0
        self._catch_up()

    def stage(self, events: Sequence[Event], *, after: str | None = None) -> None:
        """Fold `events` now and commit them with the next append, in its transaction.

        For what must be in the log before anything leaves the process, but not sooner: a model
        response goes with the dispatches of its calls, the last outcomes of a step with the next
        request's note (DESIGN §4: the dispatch is still committed before the tool starts, the
        outcome before the model sees it). Nothing runs, asks or calls out while events are
        staged. `after` names the failpoint reached once they are committed. If that append
        fails, the folds are rebuilt from the log as if the events had never been made.
        """
        events, _ = redact.scrub(events)  # the folds hold what the log will hold:
        events = [codec.decode(codec.encode(e)) for e in events]  # as a reader will decode them
        base = self.high_water
        self._fold([Record(seq=base + i, hash="", event=e) for i, e in enumerate(events, 1)])
        self._staged.extend(events)
        if after is not None:
            self._after_commit.append(after)

    def _fold(self, records: Sequence[Record]) -> None:
        """Fold committed records (in seq order, right after the high water) into every fold."""
        for r in records:
            self.turn.apply(r)
            self.longrun.apply(r)
            self.instructions.apply(r)
            self.requests.apply(r)
            blob = getattr(r.event.content, "blob", None)
            if blob is not None:
                self._blobs.add(blob.sha256)
            if isinstance(r.event.content, FunctionCall):
                self._call_ids.add(r.event.content.call_id)
        if records:
            self.high_water = records[-1].seq
        if self.requests.adopted:
            adopted, self.requests.adopted = self.requests.adopted, []
            for seq, body in adopted:
                cache_view(self.store, self.session.id, seq, body)

    def blobs_of(self, shas: Sequence[str]) -> dict[str, bytes]:
        """The bytes of these offloaded results, as far as the store has them."""
        out: dict[str, bytes] = {}
        for sha in shas:
            data = self._hot.get(sha)
            if data is None:
                data = self.store.blob(sha)
            if data is not None:
                out[sha] = data
        return out

    def append(
        self, events: Sequence[Event], *, durable: bool = False, blobs: Sequence[bytes] = ()
    ) -> None:
        """Append through the lease, fold what was committed and tell the observer.

        Staged events go first, in the same transaction.

        Other processes may append only notice dismissals to a running session; such an append
        makes ours conflict, so we fold it in and retry. Anything else is a real conflict.
        """
        staged, after = self._staged, self._after_commit
        while True:
            base = self.high_water - len(self._staged)
            try:
                done = self.store.append(
                    self.session.id,
                    [*self._staged, *events],
                    expect=base,
                    durable=durable,
                    lease=self.lease,
                    blobs=blobs,
                )
            except AppendConflict:
                if self._staged:
                    self._refold()
                    foreign = self.store.read(self.session.id, after=base)
                else:
                    foreign = self._catch_up()
                self.observer.on_records(foreign)
                if not foreign or not all(_benign(r) for r in foreign):
                    raise
                if staged:
                    self.stage(staged)
                continue
            except BaseException:
                if self._staged:
                    with contextlib.suppress(BubuError):
                        self._refold()  # nothing of it was committed: the folds say so again
                raise
            # The store hands back what it committed (redacted, with seq and hash): fold that
            # (the staged part is folded already).
            self._staged, self._after_commit = [], []
            self._fold(done.records[len(staged) :])
            self.observer.on_records(done.records)
            for name in after:
                failpoints.hit(name)
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
        heartbeat(
            self.store, lambda: self.lease, self._renewed, ttl_s=self.config.lease_ttl_s,
            stop=self._stop_event, request_stop=self.request_stop,
        )  # fmt: skip

    def _renewed(self, lease: Lease) -> None:
        self.lease = lease

    # -- the loop ---------------------------------------------------------------------------------

    def start_run(
        self, cause: Literal["new", "resume", "recovery"], *, prefix: Sequence[Event] = (),
        blobs: Sequence[bytes] = (),
    ) -> None:  # fmt: skip
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
        self.append(events, durable=True, blobs=blobs)
        self._run_seq = self.high_water
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
        if (pending := turnstart.take_pending()) is not None:  # a Ctrl-C before it registered
            self.request_stop(pending)
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
                            if not self._stuck():
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
                        case _:
                            assert_never(step)
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
            if self._staged:
                # An error or a stop ends the run: what it staged is still committed, as it would
                # have been (a lease really lost refuses the append: the fence holds).
                with contextlib.suppress(BubuError):
                    self.append(())
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

    def next_request(self) -> NextRequest:
        """The next model request, its digest and estimate: the pure projection of the log
        (`projections.request`), given the prefix and the hot blobs' bytes read here."""
        self._hot = self.blobs_of(self.requests.blobs_needed())
        prefix = Prefix(
            model=self.provider.spec,
            system=self.system,
            tools=self.tool_specs,
            max_tokens=self.config.max_tokens,
            session_id=self.session.id,
        )
        return build(self.requests, prefix, ordinal=self.turn.model_responses, blobs=self._hot)

    def build_request(self) -> ModelRequest:
        """The next model request, projected from the log."""
        return self.next_request().request

    def request_digest(self, request: ModelRequest) -> tuple[str, int]:
        """The digest naming the next request, and its estimated tokens (bytes / 4)."""
        n = self.next_request()
        return n.digest, n.estimate

    def digest_at(self, seq: int) -> str:
        """The chain digest of this session's prefix 1..seq."""
        rows = self.store.read(self.session.id, after=seq - 1, upto=seq)
        return rows[0].hash if rows else codec.GENESIS.hex()

    def _call_model(self) -> None:
        """One attempt of the next model call; a transient failure plans (and waits out) the next
        attempt, which the loop makes after `decide` has looked at the limits again."""
        self._select_model()
        nxt = self.next_request()
        # Compact until the request fits, while a pass still folds something (choices.py).
        passes, before, after = 0, None, self._watermark()
        while choices.compact_again(
            over_budget=compacting.over_budget(self, nxt.estimate),
            passes=passes, before=before, after=after,
        ):  # fmt: skip
            before = after
            compacting.compact(self)
            nxt = self.next_request()
            passes, after = passes + 1, self._watermark()
        request, digest, estimate, checkpoint = (
            nxt.request,
            nxt.digest,
            nxt.estimate,
            nxt.checkpoint,
        )
        attempt = self.longrun.streak + 1
        self.append(
            [self.note(ModelRequestNote(model=self.provider.spec, request_digest=digest, checkpoint=checkpoint,
                                        estimated_tokens=estimate, attempt=attempt))]
        )  # fmt: skip
        failpoints.hit("before_model_call")
        self.observer.on_activity("thinking")
        self._check_stop()  # a stop asked for by now (a draining worker) comes before the call
        try:
            response = self._wait(self._pool.submit(self._complete, request))
            empty_response(response, self.provider.spec)
        except ProviderError as e:
            if not self._overflowed(e, attempt, estimate):
                self._failed_attempt(e, attempt)
            return
        self._commit_response(response, estimate)

    def _stuck(self) -> bool:
        """End the turn when the model keeps repeating one failing call (loops.py)."""
        v = verdict(self.turn.calls.values(), after_seq=self._run_seq)
        match v:
            case GoOn():
                return False
            case Stuck():
                self.end_turn("stopped", v.message)
                return True
            case _:
                assert_never(v)

    def _overflowed(self, e: ProviderError, attempt: int, estimate: int) -> bool:
        """Handle an overflow or an empty answer (overflow.py); False: the retry policy decides."""
        window = compacting.window(self)
        calibrated = int(estimate * self.compactor.calibration.factor)
        plan = after_overflow(e, attempt=attempt, window=window, estimate=calibrated)
        if plan is None:
            return False
        error = Error(
            error_class=e.error_class,
            message=str(e),
            retryable=not isinstance(plan, Stop),
            status=e.status,
        )
        match plan:
            case Shrink(window=tokens, source=source):
                self.append(
                    [
                        self.event("system", "system", error),
                        self.note(WindowLearned(tokens=tokens, source=source)),
                    ]
                )
            case Again():
                self.append([self.event("system", "system", error)])
            case Stop(message=message):
                self.append([self.event("system", "system", error)])
                self.end_turn("failed", message)
            case _:
                assert_never(plan)
        return True

    def _watermark(self) -> int:
        return self.context.checkpoint.watermark if self.context.checkpoint else 0

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
                        text=codec.sanitize_text(p.text),
                        signature=p.signature,
                        redacted=p.redacted,
                        native=sanitize(p.native),
                    )
                )
            else:
                cid = unique_call_id(p.call_id, self._call_ids)
                self._call_ids.add(cid)
                contents.append(FunctionCall(
                    call_id=cid, provider_id=None if cid == p.call_id else p.call_id, name=codec.sanitize_text(p.name), arguments=sanitize(p.arguments),
                    raw_arguments=None if p.raw_arguments is None else codec.sanitize_text(p.raw_arguments),
                    native=sanitize(p.native)))  # fmt: skip
        if not contents:
            contents.append(Text(text=""))
        u = response.usage
        usage = TokenUsage(
            model=self.provider.spec, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens, cache_write_tokens=u.cache_write_tokens,
            reasoning_tokens=u.reasoning_tokens,
            estimated_input_tokens=estimate, stop_reason=response.stop_reason,
            served_model=codec.sanitize_text(response.model)[:200] or None, usage_unknown=not u.reported,
            cost_usd=pricing.usage_cost(self.provider.spec, u, official=getattr(self.provider, "official", True)),
        )  # fmt: skip
        events = (
            [self.note(ServerNote(text=codec.sanitize_text(response.notice)))]
            if response.notice
            else []
        )
        events += [self.event("model", "agent", c, invocation=inv) for c in contents[:-1]]
        events.append(self.event("model", "agent", contents[-1], Actions(token_usage=usage, end_invocation=True),
                                 invocation=inv, status="completed"))  # fmt: skip
        # Committed with the dispatches of its calls (or the turn's end): one transaction.
        self.stage(events, after="after_model_response")

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
            sandbox=self.confinement(),
            pass_env=self.effective_policy.pass_env,
            marker=f"{self.session.id}/{self.run}/{call.call_id}",
            memory=self.read_memory,
            images=images.accepts_images(self.provider),
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
        again = warning(self.turn.calls.values(), call) if result.is_error else None
        if again is not None:
            result = ToolResult(
                output=f"{result.output}\n[{again}]", is_error=True, full=result.full
            )
        text = codec.sanitize_text(result.output)
        data = result.full if result.full is not None else text.encode("utf-8")
        # Before the placeholder's excerpt cuts a line (and a secret in it) short.
        data = redact.data(data)
        # A page of an offloaded result is never offloaded again.
        offload = offload and choices.may_offload(call.name)
        placed = (
            offload_result(call.name, data, self.config.context, dropped=result.dropped)
            if offload
            else None
        )
        blob = None
        if placed is not None:
            text, blob = placed
        refs, _ = images.refs(result.images)
        event = self.event(
            "tool", "tool",
            FunctionResponse(call_id=call.call_id, name=call.name, result=text, is_error=result.is_error,
                             duration_ms=duration, blob=blob, images=refs),
            invocation=call.invocation, status="failed" if result.is_error else "completed",
        )  # fmt: skip
        return event, (data if blob is not None else None)

    def commit_outcomes(
        self, done: Sequence[tuple[CallState, ToolResult, float | None]], *, stage: bool = False
    ) -> bool:
        """Commit outcomes with their offloaded blobs in one transaction; if storing the blobs
        fails, commit the results inline instead — never a reference to bytes that are not there.
        With `stage`, outcomes without blobs are staged for the next append instead (True)."""
        pairs = [self._offloaded(c, r, t) for c, r, t in done]
        blobs = [b for _, b in pairs if b is not None] + [
            d for _, r, _ in done for _, d in r.images
        ]
        if stage and not blobs:
            self.stage([e for e, _ in pairs], after="after_outcome")
            return True
        form: choices.OutcomeForm | None = "offloaded"
        while form is not None:
            try:
                match form:
                    case "offloaded":
                        self.append([e for e, _ in pairs], blobs=blobs)
                    case "inline":
                        inline = [
                            ToolResult(
                                output=r.full.decode("utf-8", "replace"), is_error=r.is_error
                            )
                            if r.full
                            else ToolResult(output=r.output, is_error=r.is_error)  # no images
                            for _, r, _ in done
                        ]
                        self.append([self._outcome(c, r, t) for (c, _, t), r in zip(done, inline, strict=True)])  # fmt: skip
                    case "cut":
                        # Not even that fits (a full disk): keep the run going with what the tool
                        # kept for the model, saying what was lost, rather than losing the outcome.
                        cut = [
                            ToolResult(output=r.output + choices.cut_note(len(r.full or b"")), is_error=r.is_error)
                            for _, r, _ in done
                        ]  # fmt: skip
                        self.append([self._outcome(c, r, t) for (c, _, t), r in zip(done, cut, strict=True)])  # fmt: skip
                    case _:
                        assert_never(form)
                return False
            except StorageError:
                form = choices.next_form(form) if blobs else None
                if form is None:
                    raise
        return False

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
        self.append(dispatches, durable=any(t.effect != "read_only" for _, t, _, _ in ready),
                    blobs=kept_before(i for *_, i in ready))  # fmt: skip
        failpoints.hit("after_dispatch")
        self.execute(ready, lanes, last_of_step=True)

    def execute(
        self,
        ready: Sequence[tuple[CallState, Tool, ToolContext, WriteIntent | None]],
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
            # The step's last outcomes are committed with the next request's note.
            last = last_of_step and not pending and not any(lanes.waiting.values() if lanes else ())
            if not self.commit_outcomes(
                [(futures[f][0], f.result(), futures[f][1]) for f in done], stage=last
            ):
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
            self.append([dispatch], durable=tool.effect != "read_only", blobs=kept_before([intent]))
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
                output=f"{call.name} did not run: its arguments {arguments_error(call.raw_arguments)}; "
                       f"send them as one JSON object. They were: {call.raw_arguments[:300]}",
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
        allowed = False
        if call.decision is None:
            command = call.arguments.get("command") if tool.name == "run_command" else None
            if isinstance(command, str):
                verdict = self.effective_policy.check_command(command, cwd=self.session.workspace)
                allowed = verdict.allowed
                reason = verdict.why or reason
        settled = choices.permission(
            call.decision,
            protected=protected,
            allowed_by_policy=allowed,
            yes=self.effective_policy.yes,
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
                self._outcome(
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
            request_id=ids.new_id("perm"), call_id=call.call_id, tool=tool.name,
            summary=_summary(tool.name, call.arguments), reason=reason, protected=protected,
        )  # fmt: skip
        if early:
            self.append(early)
            early.clear()
        self.append([self.event("system", "agent", actions=Actions(permission_request=request), invocation=call.invocation)],
                    durable=True)  # fmt: skip
        answer: Answer
        by: choices.By
        if isinstance(settled, choices.Settled) and settled.by is not None:
            answer, by = settled.answer, settled.by
        else:
            self.observer.on_activity("waiting for permission")
            answer, by = choices.answered(self.asker(request))
        self._check_stop()
        dec = PermissionDecision(
            request_id=request.request_id, call_id=call.call_id, decision=answer, by=by
        )
        self.append([self.event("system", "user" if by == "user" else "host", actions=Actions(permission_decision=dec),
                                invocation=call.invocation)], durable=True)  # fmt: skip
        return answer, by


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


__all__ = ["NullObserver", "Observer", "RunConfig", "Runner", "owner_id", "sanitize", "stop_all"]
