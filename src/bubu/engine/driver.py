"""The driver: does what `decide` says, and appends what happened.

Every step is an append through the session's lease. A model response is appended in one
transaction; a tool call crosses two durable boundaries (DESIGN §4): the dispatch is committed and
synced before the tool starts, the outcome is committed before the model can see it. Model calls
and tools run in worker threads so that a stop (Ctrl-C, SIGTERM, a lost lease) is noticed at once.

The runner holds the session's state and the loop; the model call is `modelcall`, the tool calls
are `toolcalls`, and what the loop decides besides `decide` is in `choices`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import os
import socket
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, assert_never

from bubu import clock, failpoints, ids
from bubu.engine import choices, processes, reload, turnstart
from bubu.engine.blobs import Blobs
from bubu.engine.compacting import Compacting
from bubu.engine.compactor import Compactor, cache_view
from bubu.engine.decide import CallModel, EndTurn, Idle, NeedsRecovery, RunTools, decide
from bubu.engine.hookpoints import HookPoints
from bubu.engine.instructions import Instructions
from bubu.engine.lease import heartbeat
from bubu.engine.modelcall import ModelCaller, RequestBuilder, sanitize
from bubu.engine.permissions import Asker, Policy, nobody
from bubu.engine.ports import NullObserver, Observer, RunConfig, Stopped, StopReason
from bubu.engine.toolcalls import ToolCalls
from bubu.errors import AppendConflict, BubuError, LeaseLost
from bubu.events import (
    Actions,
    Content,
    EndCause,
    Event,
    Info,
    Record,
    Role,
    RunStarted,
    StepLimit,
    SystemNote,
    TurnEnded,
    TurnEndReason,
    make,
)
from bubu.log import codec, readview, redact
from bubu.log.store import Lease, SessionInfo, Store
from bubu.projections.request import RequestFold
from bubu.projections.turn import CallState
from bubu.providers.base import Provider, ToolSpec
from bubu.tools import sandbox
from bubu.tools.base import Tool, ToolResult
from bubu.tools.patch import companions

T = TypeVar("T")

_STOPPED_BY: dict[StopReason, str] = {
    "stopped": "stopped by the user",
    "suspended": "stopped by an orderly shutdown of Bubu (SIGTERM)",
    "lease_lost": "stopped because another runner took this session over",
}


def owner_id() -> str:
    """This process's identity as a lease owner: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{ids.new_id('own')[-6:]}"


@dataclass(eq=False)
class Runner:
    """Drives the open turn of one session while holding its lease.

    The runner holds the session's state (its folds, its high water, the staged events) and the
    loop; the model call (`modelcall.ModelCaller`), the tool calls (`toolcalls.ToolCalls`), the
    compaction (`compacting.Compacting`) and the hooks (`hookpoints.HookPoints`) are its parts,
    each handed what it needs: the runner as one of the narrow views of `ports` (the run's state,
    the log's appender, the stop), and the other parts themselves (the blob reader, the request
    builder, the compaction).
    """

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
        self.instructions = Instructions()
        self.requests = RequestFold(policy=self.config.context)
        self.compactor = Compactor(policy=self.config.context, fold=self.requests)
        self._adopt(reload.RunnerFolds(policy=self.config.context))
        self._staged: list[Event] = []  # folded, committed with the next append (see `stage`)
        self._after_commit: list[str] = []  # failpoints reached once the staged events commit
        self._view_due: int | None = None  # the high water at which the session view is due
        self._state_due: int | None = None  # the high water at which the runner state is due
        self.run: str | None = None
        self.run_seq = 0
        """The seq this run started at."""
        self.stop_reason: StopReason | None = None
        self.stop_event = threading.Event()
        self.pool = cf.ThreadPoolExecutor(max_workers=8, thread_name_prefix="bubu-tool")
        self._heartbeat: threading.Thread | None = None
        self.lost_processes: list[str] = []
        """The background processes found dead when this run started (for the notice)."""
        offered = tuple(
            ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
            for t in sorted(self.tools.values(), key=lambda t: t.name)
        )
        read_only = tuple(s for s in offered if self.tools[s.name].effect == "read_only")
        # The tools behind a provider's own shapes run, but are not offered by name.
        self.tools = {**companions(self.tools), **self.tools}
        # Each part is handed what it needs: the run's state and the log's appender and the stop
        # are this runner (as the narrow views of `ports`), the rest the parts themselves.
        self.blobs = Blobs(self.store, known=lambda: self.known_blobs)
        self.hook_points = HookPoints(state=self, log=self, stops=self, observer=self.observer)
        self.request_builder = RequestBuilder(
            self,
            self.blobs,
            self.instructions,
            prompt=self.prompt,
            tools=offered,
            plan_tools=read_only,
        )
        self.compacting = Compacting(
            state=self,
            compactor=self.compactor,
            log=self,
            stops=self,
            blobs=self.blobs,
            hook_points=self.hook_points,
            next_request=self.request_builder.next,
        )
        self.model_calls = ModelCaller(
            state=self,
            log=self,
            stops=self,
            end_turn=self.end_turn,
            requests=self.request_builder,
            compacting=self.compacting,
            observer=self.observer,
            fallbacks=self.fallbacks,
        )
        self.tool_calls = ToolCalls(
            state=self,
            log=self,
            stops=self,
            blobs=self.blobs,
            hook_points=self.hook_points,
            observer=self.observer,
            pool=self.pool,
            tools=self.tools,
            asker=self.asker,
        )
        self._appending = threading.RLock()
        """Sub-agent calls append their facts from their own threads."""
        from bubu.engine.children import Children

        self.children: Children | None = Children(self)
        self._catch_up()

    # -- plumbing ---------------------------------------------------------------------------------

    def _catch_up(self) -> list[Record]:
        assert not self._staged
        if self.high_water == 0:  # a reload: from the last valid snapshot, then the suffix
            state, records = reload.load(self.store, self.session.id, self.config.context)
            self._adopt(state)
            self._adopted()
            return records
        records = self.store.read(self.session.id, after=self.high_water)
        self._fold(records)
        return records

    def _adopt(self, state: reload.RunnerFolds) -> None:
        """Take `state`'s folds as this runner's (the folds `_fold` applies records to)."""
        self._state = state
        self.turn, self.longrun = state.turn, state.longrun
        self.instructions.fold = state.instructions
        self.requests = self.compactor.fold = state.requests
        self.stored, self.known_blobs = state.stored, state.known_blobs
        self.call_ids, self.high_water = state.call_ids, state.high_water

    def _refold(self) -> None:
        """Fold the log afresh, without the staged events (they were not committed)."""
        self._staged, self._after_commit = [], []
        self._adopt(reload.RunnerFolds(policy=self.config.context))
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
        self._state.fold(records)
        self.high_water = self._state.high_water
        self._adopted()

    def _adopted(self) -> None:
        """Cache the checkpoints the folds took into use as views."""
        if self.requests.adopted:
            adopted, self.requests.adopted = self.requests.adopted, []
            for seq, body in adopted:
                cache_view(self.store, self.session.id, seq, body)

    def append(
        self, events: Sequence[Event], *, durable: bool = False, blobs: Sequence[bytes] = ()
    ) -> None:
        """Append through the lease, fold what was committed and tell the observer.

        Staged events go first, in the same transaction.

        Other processes may append only notice dismissals to a running session; such an append
        makes ours conflict, so we fold it in and retry. Anything else is a real conflict.
        """
        with self._appending:
            self._append(events, durable=durable, blobs=blobs)

    def _append(self, events: Sequence[Event], *, durable: bool, blobs: Sequence[bytes]) -> None:
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
                if not choices.benign(foreign):
                    raise
                if staged:
                    self.stage(staged)
                continue
            except BaseException:  # folds undone, then re-raised: Ctrl-C and exits too
                if self._staged:
                    with contextlib.suppress(BubuError):
                        self._refold()  # nothing of it was committed: the folds say so again
                raise
            # The store hands back what it committed (redacted, with seq and hash): fold that
            # (the staged part is folded already).
            self._staged, self._after_commit = [], []
            self._fold(done.records[len(staged) :])
            self._keep_view()
            self.observer.on_records(done.records)
            for name in after:
                failpoints.hit(name)
            return

    def flush(self) -> None:
        """Commit what is staged now (before something leaves the process: a hook runs)."""
        if self._staged:
            self.append(())

    def _keep_view(self) -> None:
        """Snapshot the session view every `readview.EVERY` events (readers start from it)."""
        due = self._view_due
        if due is None or self.high_water >= due:
            # A view is only a cache: nothing about it may stop the run (readers fold the log).
            with contextlib.suppress(Exception):
                self._view_due = readview.keep_up(self.store, self.session.id, self.high_water, due)
        due = self._state_due
        if due is None or self.high_water >= due:
            with contextlib.suppress(Exception):  # the runner's state snapshot is a cache too
                self._state_due = reload.keep_up(
                    self.store, self.session.id, self.config.context, self.high_water, due
                )

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
        """Ask the run to stop at once (Ctrl-C: stopped; SIGTERM: suspended). Safe from signal
        handlers."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stop_event.set()

    def stopped_by(self) -> str:
        """Who stopped this run, in the words a cut-off tool result uses."""
        return _STOPPED_BY[self.stop_reason or "stopped"]

    def check_stop(self) -> None:
        """Raise out of whatever the run is doing once a stop was asked for."""
        if self.stop_reason is not None:
            raise Stopped

    def wait(self, fut: cf.Future[T]) -> T:
        """The future's result, waited for in slices so that a stop is noticed at once."""
        while True:
            try:
                return fut.result(timeout=0.1)
            except cf.TimeoutError:
                self.check_stop()

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`, or until a stop is asked for."""
        if self.stop_event.wait(seconds):
            self.check_stop()

    def beat(self) -> None:
        """Renew the lease every third of its time; between renewals, look for a stop request
        from another process (`bubu stop`, a web UI that does not run this turn)."""
        heartbeat(
            self.store,
            lambda: self.lease,
            self._renewed,
            ttl_s=self.config.lease_ttl_s,
            stop=self.stop_event,
            request_stop=self.request_stop,
        )

    def _renewed(self, lease: Lease) -> None:
        self.lease = lease

    # -- the loop ---------------------------------------------------------------------------------

    def start_run(
        self,
        cause: Literal["new", "resume", "recovery"],
        *,
        prefix: Sequence[Event] = (),
        blobs: Sequence[bytes] = (),
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
        self.append(events, durable=True, blobs=blobs)
        self.run_seq = self.high_water
        mode, network = self.tool_calls.sandbox_mode
        if mode != "off" and sandbox.confinement(mode, network) is None:
            # The log says why this run's commands ask although the turn wants a sandbox.
            why = sandbox.unavailable()
            self.append([self.note(Info(text=f"no sandbox for commands: {why}; each one asks"))])

    def _stamp(self, e: Event, turn: str | None) -> Event:
        return make(
            id=e.id,
            session=e.session,
            turn=turn,
            run=self.run,
            invocation=e.invocation,
            role=e.role,
            author=e.author,
            ts=e.ts,
            content=e.content,
            actions=e.actions,
            visibility=e.visibility,
            status=e.status,
        )

    def drive(
        self, before: Callable[[], None] | None = None, *, continue_turn: bool = True
    ) -> TurnEndReason | None:
        """Run the open turn until it ends (or the run stops); returns how the turn ended.

        `before` runs first, under the same lease heartbeat and stop handling (recovery applies
        its plan there); with `continue_turn` false the run ends after it.
        """
        self._heartbeat = threading.Thread(target=self.beat, name="bubu-lease", daemon=True)
        self._heartbeat.start()
        _ACTIVE.add(self)
        self.lost_processes = processes.attach(self)
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
                    self.check_stop()
                    step = decide(self.turn, limit=self.longrun.limit_hit(clock.now_ms()))
                    match step:
                        case Idle():
                            return self.turn.end_reason
                        case CallModel():
                            if not self.model_calls.stuck():
                                self.model_calls.call()
                        case RunTools(calls=calls):
                            self.tool_calls.run(calls)
                            self.instructions.after_tools(self.session.workspace, self, calls)
                            self._halt_for_hooks(calls)
                        case EndTurn(reason="completed") if self.hook_points.stop():
                            continue  # a Stop hook gave the model more to do
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
                except Stopped:
                    after = choices.after_stop(self.stop_reason, turn_open=self.turn.open)
                    match after:
                        case choices.Leave():
                            return None
                        case choices.Ended():
                            return self.turn.end_reason
                        case choices.EndStopped(reason=reason):
                            self._finish_stopped(reason)
                            return reason
                        case _:
                            assert_never(after)
        except LeaseLost:
            return None
        finally:
            if self._staged:
                # An error or a stop ends the run: what it staged is still committed, as it would
                # have been (a lease really lost refuses the append: the fence holds).
                with contextlib.suppress(BubuError):
                    self.append(())
            processes.release(self)
            _ACTIVE.discard(self)
            self.stop_event.set()
            self.pool.shutdown(wait=False, cancel_futures=True)

    def _halt_for_hooks(self, calls: Sequence[CallState]) -> None:
        """End the turn, resumably, when a hook of these calls said ``"continue": false``."""
        halt = self.hook_points.halted(calls)
        if halt is not None and self.turn.open and not self.turn.open_calls:
            why = halt.reason or "no reason given"
            self.end_turn("stopped", f"the {halt.event} hook `{halt.hook}` ended the turn: {why}")

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
        processes.end_of_turn(self)
        end = TurnEnded(reason=reason, message=message, cause=cause)
        self.append([*extra, self.note(end)], durable=True)
        failpoints.hit("after_turn_end")

    def _finish_stopped(self, reason: Literal["stopped", "suspended"]) -> None:
        # Calls dispatched in this run whose outcome is missing were cancelled: say so.
        events = []
        for c in self.turn.dangling:
            events.append(
                self.tool_calls.outcome(
                    c,
                    ToolResult(output=f"{self.stopped_by()} before it finished", is_error=True),
                    None,
                )
            )
        for c in self.turn.undispatched:
            events.append(
                self.tool_calls.outcome(
                    c, ToolResult(output=f"not run: the turn was {reason}", is_error=True), None
                )
            )
        msg = "stopped by the user" if reason == "stopped" else "suspended by an orderly shutdown"
        self.end_turn(reason, msg, extra=events)


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


__all__ = [
    "NullObserver",
    "Observer",
    "RunConfig",
    "Runner",
    "StopReason",
    "owner_id",
    "sanitize",
    "stop_all",
]
