"""The fleet: submitting tasks to a shared log, and the worker that claims and runs them
(DESIGN §7).


`submit` creates a session whose log holds the user's request and the policy it runs under; the
store's work queue (derived from the log) then lists it as queued. A `Worker` runs `concurrency`
slots, each with a connection of its own. A slot claims the oldest session with work under a new
lease epoch, timed by the database clock, that fences every append; the `Runner` renews it by
heartbeat. A queued request becomes a new turn under its recorded policy; an open turn whose
runner handed its lease back cleanly is continued; one whose runner died (lease expired) is
recovered with `recover_session`. Each run start records the lease epoch that fenced it, so the
log itself shows that no two runners ever ran a session at once.

SIGTERM (or a first Ctrl-C) drains: no new claims, each running turn finishes the step it is in,
then its lease is released and another worker continues the turn. `halt` stops at once (running
tools are cancelled and their outcomes recorded).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import msgspec

from bubu import clock, ids
from bubu.engine import reload
from bubu.engine.ceiling import Asked, Ceiling, excess, hold_state
from bubu.engine.driver import Observer, RunConfig, Runner, owner_id
from bubu.engine.materialize import local_workspace
from bubu.engine.recovery import Outcome, recover_session
from bubu.engine.scope import acting_info
from bubu.engine.session import (
    Host,
    check_task,
    instructions_note,
    new_session,
    reopen_turn,
    resumable,
)
from bubu.errors import BubuError, ConfigError, LeaseLost
from bubu.events import (
    Actions,
    Record,
    RecoveryNotice,
    RunStarted,
    SandboxMode,
    SystemNote,
    TaskApproved,
    TaskHeld,
    Text,
    TurnEnded,
    TurnStarted,
    WorkspaceTaken,
    make,
)
from bubu.log.codec import sanitize_text
from bubu.log.store import Lease, SessionInfo, Store
from bubu.providers.base import Delta, close_provider
from bubu.tools.sandbox import DEFAULT_MODE, Options, unavailable

if TYPE_CHECKING:
    from bubu.log.postgres import Claim

WorkOutcome = Outcome | Literal["held"]
"""How handling a claim ended: a turn's outcome, or `held` above the worker's ceiling."""

SUBMIT_KEY = "submit"
"""The state_delta key under which a queued request records its policy."""

REQUEST_KINDS = ("text", "turn_started", "turn_ended", "task_held", "task_approved")
"""The event kinds `queued_request` and the ceiling's hold look at."""


class SubmittedModel(msgspec.Struct, frozen=True, kw_only=True):
    """How the worker builds a queued task's provider (`bubu submit`'s model options)."""

    base_url: str | None = None
    """The server, without credentials (they never enter the log)."""
    context_window: int | None = None
    thinking_budget: int | None = None
    reasoning_effort: str | None = None
    max_output_tokens: int | None = None
    cache_ttl: str | None = None
    native_tools: bool | None = None
    """The provider's own tool shapes on or off (None: on at the provider's own API only)."""


class Submission(msgspec.Struct, frozen=True, kw_only=True):
    """The policy a queued request runs under, recorded with the request in the log."""

    yes: bool = False
    allow_commands: tuple[str, ...] = ()
    max_steps: int | None = None
    retry_for_s: float | None = None
    fallback_models: tuple[str, ...] = ()
    token_limit: int | None = None
    time_limit_s: float | None = None
    sandbox: SandboxMode = DEFAULT_MODE
    network: bool = False
    pass_env: tuple[str, ...] = ()
    """Secret variables of the worker's environment passed on to commands (names only)."""
    allow_sockets: tuple[str, ...] = ()
    """Host Unix sockets the task's sandboxed commands may reach (``--allow-socket``)."""
    ssh_agent: bool = False
    """Whether the task's sandboxed commands may use the worker's SSH agent."""
    max_procs: int | None = None
    max_memory: int | None = None
    max_file_size: int | None = None
    """The task's sandbox limits (None: the worker's; above the worker's, clamped to them)."""
    model: SubmittedModel = SubmittedModel()
    """The model options the task was submitted with."""


def submit(
    store: Store,
    *,
    task: str,
    workspace: str | Path,
    model: str,
    policy: Submission | None = None,
    snapshot: bool = False,
) -> SessionInfo:
    """Create a session whose log holds `task` and its policy: queued for the fleet. With
    `snapshot`, the workspace is snapshotted into the store first and named before the request,
    so a worker on another machine materializes it."""
    check_task(task)
    info = new_session(store, task=task, workspace=workspace, model=model)
    delta = {SUBMIT_KEY: msgspec.to_builtins(policy or Submission())}
    request = make(
        session=info.id,
        turn=ids.turn_id(),
        role="user",
        author="user",
        ts=clock.now_ms(),
        content=Text(text=sanitize_text(task)),
        actions=Actions(state_delta=delta),
    )
    taken = []
    if snapshot:
        from bubu.snapshot.take import Snapshotter

        snap = Snapshotter(store, info.workspace).take()
        if snap.tree is None:
            raise ConfigError(
                f"the workspace {info.workspace} could not be snapshotted: {snap.partial}"
            )
        taken.append(
            make(
                session=info.id,
                role="system",
                author="host",
                ts=clock.now_ms(),
                visibility="hidden",
                content=SystemNote(note=WorkspaceTaken(snapshot=snap, source=info.workspace)),
            )
        )
    store.append(info.id, [*taken, request], expect=0, durable=True)
    return info


def queued_request(records: Sequence[Record]) -> tuple[Record, Submission] | None:
    """The first user request after the last turn boundary, with the policy it was submitted under
    (the default, most careful one if it recorded none)."""
    found: Record | None = None
    for r in records:
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, TurnStarted | TurnEnded):
            found = None
        elif found is None and isinstance(c, Text) and r.event.role == "user":
            found = r if r.event.visibility == "visible" else found
    if found is None:
        return None
    actions = found.event.actions
    raw = (actions.state_delta or {}).get(SUBMIT_KEY) if actions is not None else None
    try:
        policy = Submission() if raw is None else msgspec.convert(raw, Submission)
    except msgspec.ValidationError:
        policy = Submission()
    return found, policy


@contextmanager
def running(host: Host, info: SessionInfo, lease: Lease) -> Iterator[Runner]:
    """A `Runner` under an already held lease, released when done (never for a session whose
    log does not verify: the lease is released and the refusal raised)."""
    try:
        host.check_integrity(info.id)
    except BubuError:
        with contextlib.suppress(BubuError):
            host.store.release_lease(lease)
        raise
    runner = Runner(
        store=host.store,
        session=info,
        provider=host.provider,
        tools=host.tools,
        lease=lease,
        policy=host.policy,
        asker=host.asker,
        observer=host.observer,
        config=host.config,
        prompt=host.prompt,
    )
    host.runner = runner
    try:
        yield runner
    finally:
        host.runner = None
        with contextlib.suppress(BubuError):
            host.store.release_lease(runner.lease)


def asked(policy: Submission | TurnStarted) -> Asked:
    """The loosening options of a submitted policy or of a started turn, for the ceiling."""
    url = policy.model.base_url if isinstance(policy, Submission) else policy.base_url
    return Asked(
        sandbox=policy.sandbox or "off",
        yes=policy.yes,
        network=policy.network,
        allow_commands=tuple(policy.allow_commands),
        pass_env=tuple(policy.pass_env),
        allow_sockets=tuple(policy.allow_sockets),
        ssh_agent=policy.ssh_agent,
        base_url=url,
    )


def hold(
    host: Host, info: SessionInfo, lease: Lease, request: Record, reasons: Sequence[str]
) -> None:
    """Record that the worker holds `request` above its ceiling (the queue then lists it held)."""
    note = TaskHeld(request_seq=request.seq, reasons=list(reasons), worker=lease.owner)
    ev = make(
        session=info.id,
        turn=request.event.turn,
        role="system",
        author="host",
        ts=clock.now_ms(),
        content=SystemNote(note=note),
        visibility="hidden",
    )
    host.store.append(
        info.id, [ev], expect=host.store.head(info.id).high_water, durable=True, lease=lease
    )


def start_queued(
    host: Host, info: SessionInfo, lease: Lease, ceiling: Ceiling | None = None
) -> WorkOutcome:
    """Open a turn for the session's queued request under its recorded policy and drive it; one
    whose policy asks for more than `ceiling` is held (unless a person approved it)."""
    records = host.store.read(info.id, kinds=REQUEST_KINDS)
    queued = queued_request(records)
    if queued is None:
        return "nothing"
    request, policy = queued
    if ceiling is not None:
        reasons = excess(ceiling, asked(policy), sandbox_works=unavailable() is None)
        vouched = host.store.vouched_approvals(info.id) if reasons else None
        state = hold_state(records, request.seq, vouched) if reasons else "none"
        if reasons and state != "approved":
            # Again when held before: a queue row put back by hand must not make workers spin.
            hold(host, info, lease, request, reasons)
            return "held"
    with running(host, info, lease) as runner:
        if runner.turn.open:
            return "nothing"
        note = TurnStarted(
            model=host.provider.spec,
            max_steps=policy.max_steps,
            yes=policy.yes,
            allow_commands=list(policy.allow_commands),
            sandbox=policy.sandbox,
            network=policy.network,
            pass_env=list(policy.pass_env),
            retry_for_s=policy.retry_for_s,
            fallback_models=list(policy.fallback_models),
            token_limit=policy.token_limit,
            time_limit_s=policy.time_limit_s,
            workspace=runner.session.workspace,
            title=runner.session.title,
            project_instructions=host.config.project_instructions,
            allow_sockets=list(policy.allow_sockets),
            ssh_agent=policy.ssh_agent,
            max_procs=policy.max_procs,
            max_memory=policy.max_memory,
            max_file_size=policy.max_file_size,
        )
        turn, now = request.event.turn or ids.turn_id(), clock.now_ms()
        opened = make(
            session=info.id,
            turn=turn,
            role="system",
            author="system",
            ts=now,
            content=SystemNote(note=note),
            visibility="hidden",
        )
        # The project's AGENTS.md, as a turn started by `bubu run` reads it (a workspace this
        # machine does not have gives none, and never stops the turn).
        notes = runner.instructions.at_turn_start(
            runner.session.workspace,
            enabled=host.config.project_instructions,
            called=runner.turn.model_responses > 0,
            make_note=instructions_note(info, turn, now),
        )
        runner.start_run("new", prefix=[opened, *notes])
        return runner.drive()


def check_open_turn(
    records: Sequence[Record],
    ceiling: Ceiling,
    session: str,
    vouched: frozenset[int] | None = None,
) -> None:
    """Refuse to continue an open or retried turn whose recorded policy is above `ceiling`, unless
    a person approved the request that opened it (a turn started elsewhere, or written straight
    into the log, never gets more from a worker than a queued task would). With `vouched`, only
    approvals at those seqs count."""
    started: TurnStarted | None = None
    approved = approved_here = False
    for r in records:
        c = r.event.content
        n = c.note if isinstance(c, SystemNote) else None
        if isinstance(n, TurnStarted):
            started, approved, approved_here = n, approved_here, False
        elif isinstance(n, TurnEnded):
            approved_here = False
        elif isinstance(n, TaskApproved):
            approved_here = approved_here or vouched is None or r.seq in vouched
    if started is None or approved:
        return
    reasons = excess(ceiling, asked(started), sandbox_works=unavailable() is None)
    if reasons:
        raise ConfigError(
            f"session {session}'s open turn runs under a policy above this worker's ceiling "
            f"({'; '.join(reasons)}); continue it with `bubu recover {session}` where that "
            "policy is meant, or start the worker with a ceiling that allows it"
        )


def run_claim(
    host: Host, claim: Claim, ceiling: Ceiling | None = None, *, workspaces: str | None = None
) -> WorkOutcome:
    """Do the work a claim found: a new turn for a queued request, the continuation of a turn
    handed back cleanly, or the recovery of one whose runner died (never of a session that was
    imported or forked: the user continues those explicitly). Under a `ceiling`, a queued task
    that asks for more is held, and an open turn that runs with more is refused. With
    `workspaces`, the session runs in a copy of its workspace of this worker's own
    (`bubu.engine.materialize`)."""
    info, facts = acting_info(host.store, claim.session)
    if facts.parent is not None and claim.state != "queued":
        # Its parent's recovery continues it (wherever that runs); the claim is put off.
        raise ConfigError(
            f"session {info.id} is a sub-agent of {facts.parent}; it continues with it"
        )
    if facts.adopted and claim.state != "queued":
        raise ConfigError(
            f"session {info.id} was {facts.describe()}, so its unfinished turn is continued only "
            f"explicitly: `bubu recover {info.id}`"
        )
    info = local_workspace(host.store, info, workspaces)
    if claim.state == "queued":
        return start_queued(host, info, claim.lease, ceiling)
    if ceiling is not None:
        records = host.store.read(info.id, kinds=REQUEST_KINDS)
        check_open_turn(records, ceiling, info.id, host.store.vouched_approvals(info.id))
    if claim.state == "retry":
        # The turn gave up waiting for its provider a while ago: try it again, as `bubu resume`.
        with running(host, info, claim.lease) as runner:
            if runner.turn.open or not resumable(runner.turn.end_reason, runner.longrun.end_cause):
                return "nothing"
            return reopen_turn(host, runner)
    # The turn and the log's check from the runner state's snapshot, not the whole log.
    state, _, report = reload.continuable(host.store, info.id, host.config.context)
    if claim.released and report.ok and state.turn.open and not state.turn.dangling:
        with running(host, info, claim.lease) as runner:
            runner.start_run("resume")
            return runner.drive()
    return recover_session(host, info, workspace=info.workspace).outcome


class Queue(Protocol):
    """Where a worker finds work (`bubu.log.postgres.WorkQueue`)."""

    def claim(self, owner: str, ttl_s: float) -> Claim | None:
        """Take the lease on a session with work, or None."""

    def defer(self, session: str, *, error: str | None = None) -> int:
        """Put a session off after a failure; returns the delay in ms."""


Equip = Callable[[Store, SessionInfo, "Watch", str], Host]
"""Builds the host a claimed session runs with (on the slot's store, watched by the worker, for
the lease owner): `worker_host` with the worker's options."""

WORKER_KEYS = (
    "deny",
    "hooks",
    "prices",
    "notify",
    "notify_timeout",
    "loop_limit",
    "max_background",
    "compact_at",
    "compact_to",
    "summary_result_share",
)
"""The keys of the worker's own config file its tasks run under: rules, hooks and limits that
only tighten or are the operator's own (a task's loosening options come from its submission,
under the ceiling; its model options from the submission too)."""


def worker_options(
    *, mcp: str | None = None, tool_timeout: float | None = None, store_quota: int | None = None
) -> dict[str, Any]:
    """The run options of a worker: the `WORKER_KEYS` of its own config file (a bad file raises
    ConfigError), its MCP servers file, tool timeout and store quota."""
    from bubu.engine.assemble import config_options

    configured = config_options(None)
    options = {k: configured.get(k) for k in WORKER_KEYS}
    return options | {"mcp": mcp, "tool_timeout": tool_timeout, "store_quota": store_quota}


def submitted_options(model: SubmittedModel) -> dict[str, Any]:
    """The run options of a task's submitted model options (those it gave)."""
    given = {k: v for k, v in msgspec.structs.asdict(model).items() if v is not None}
    if "thinking_budget" in given:
        given["thinking"] = given.pop("thinking_budget")
    return given


def worker_host(
    store: Store,
    info: SessionInfo,
    options: Mapping[str, Any],
    *,
    observer: Observer,
    owner: str,
    config: WorkerConfig,
) -> Host:
    """The host of a claimed session (`bubu.engine.assemble`): the model recorded with it, built
    with the model options it was submitted with; the worker's own tools (the registered ones and
    those of its MCP servers, never those a turn recorded elsewhere), its `options` (tool
    timeout, store quota, `WORKER_KEYS`), lease time and sandbox limits; nobody answers a
    permission request."""
    from bubu.engine.assemble import assemble_host, policy_of, run_config_of

    if not info.model:
        raise ConfigError(f"session {info.id} has no model recorded; it cannot run in the fleet")
    first = queued_request(store.read(info.id, upto=8))
    opts = {**options, **(submitted_options(first[1].model) if first is not None else {})}
    run = replace(run_config_of(opts), max_steps=None, lease_ttl_s=config.run.lease_ttl_s)
    return assemble_host(
        store,
        info.model,
        opts,
        observer=observer,
        owner=owner,
        turn_tools=False,
        policy=policy_of({"deny": opts.get("deny")}, box=config.box),
        config=run,
    )


Opener = Callable[[], tuple[Store, Queue]]
"""Opens one slot's own store connection and its queue."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """Knobs of a worker."""

    concurrency: int = 1
    once: bool = False
    """Exit once nothing is claimable."""
    idle_exit_s: float | None = None
    """Exit after this long with nothing claimable."""
    poll_s: float = 1.0
    run: RunConfig = field(default_factory=lambda: RunConfig(max_steps=None))
    """The lease time of its runs (their limits come from `options` and each turn's record)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The worker's run options (`worker_host`)."""
    ceiling: Ceiling = field(default_factory=Ceiling)
    """The most a task may ask of this worker; a queued task asking for more is held."""
    workspaces: str | None = None
    """A root of this worker's own workspace copies (`bubu worker --workspaces DIR`)."""
    box: Options = field(default_factory=Options)
    """The worker's own sandbox limits, which clamp a task's (its sockets and agent are none:
    a task's come from its policy, under the ceiling)."""


class Watch:
    """The observer of one running turn: when the worker drains, it stops the turn at a safe point
    (never while a dispatched tool is unanswered) without ending it."""

    def __init__(self, draining: threading.Event) -> None:
        self.host: Host | None = None
        self.drained = False
        self._draining = draining
        self._lock = threading.Lock()
        self._phase: Literal["between", "tools", "model"] = "between"
        self._driving = False

    def _maybe_stop(self, *, runner_thread: bool) -> None:
        # Off the runner's thread only a model call is safe to cut: it may be about to dispatch.
        safe = ("between", "model") if runner_thread else ("model",)
        runner = self.host.runner if self.host is not None else None
        if self._draining.is_set() and self._driving and self._phase in safe and runner:
            self.drained = True
            runner.request_stop("lease_lost")

    def on_delta(self, delta: Delta) -> None:
        """A model call is streaming: safe to cut when draining."""
        with self._lock:
            self._maybe_stop(runner_thread=False)

    def on_records(self, records: Sequence[Record]) -> None:
        """Track whether a dispatched tool is unanswered, and whether the turn is being driven."""
        with self._lock:
            runner = self.host.runner if self.host is not None else None
            self._phase = "tools" if runner is not None and runner.turn.dangling else "between"
            for r in records:
                c = r.event.content
                if isinstance(c, SystemNote) and (
                    isinstance(c.note, RecoveryNotice)
                    or (isinstance(c.note, RunStarted) and c.note.cause != "recovery")
                ):
                    self._driving = True
            self._maybe_stop(runner_thread=True)

    def on_activity(self, text: str | None) -> None:
        """A model call (or a back-off before one) is starting."""
        with self._lock:
            if text == "thinking" or (text or "").startswith("retrying"):
                self._phase = "model"
            self._maybe_stop(runner_thread=True)

    def drain(self) -> None:
        """The worker started draining (called off the runner's thread)."""
        with self._lock:
            self._maybe_stop(runner_thread=False)

    def halt(self) -> None:
        """Stop now: running tools are cancelled and their outcomes recorded; the turn stays
        open."""
        runner = self.host.runner if self.host is not None else None
        if runner is not None:
            self.drained = True
            runner.request_stop("lease_lost")


class Worker:
    """Claims sessions with work and runs them, `config.concurrency` at a time."""

    def __init__(
        self,
        *,
        open_slot: Opener,
        config: WorkerConfig,
        log: Callable[[str], None],
        equip: Equip | None = None,
    ) -> None:
        self.config = config
        self._open = open_slot
        self._equip: Equip = equip or (
            lambda store, info, watch, owner: worker_host(
                store, info, config.options, observer=watch, owner=owner, config=config
            )
        )
        self._log = log
        self._draining = threading.Event()
        self._lock = threading.Lock()
        self._active: dict[int, Watch] = {}
        self.handled = 0

    @property
    def draining(self) -> bool:
        """True once `drain` or `halt` was called."""
        return self._draining.is_set()

    def serve(self) -> None:
        """Run the slots until they are done (`once`, idle exit) or drained; call from the main
        thread, which stays free to handle signals."""
        slots = [
            threading.Thread(target=self._slot, args=(n,), name=f"bubu-worker-{n}", daemon=True)
            for n in range(max(1, self.config.concurrency))
        ]
        for t in slots:
            t.start()
        while any(t.is_alive() for t in slots):
            for t in slots:
                t.join(timeout=0.2)

    def drain(self) -> None:
        """Claim nothing more; stop each running turn after its current step, handing it back."""
        self._draining.set()
        with self._lock:
            watches = list(self._active.values())
        for w in watches:
            w.drain()

    def halt(self) -> None:
        """Claim nothing more and stop every running turn now (it stays open for another worker)."""
        self._draining.set()
        with self._lock:
            watches = list(self._active.values())
        for w in watches:
            w.halt()

    def _slot(self, n: int) -> None:
        try:
            store, queue = self._open()
        except BubuError as e:
            self._log(f"slot {n} cannot start: {e}")
            return
        owner = owner_id()
        idle_since = time.monotonic()
        failures = 0
        try:
            while not self._draining.is_set():
                try:
                    claim = queue.claim(owner, self.config.run.lease_ttl_s)
                    failures = 0
                except BubuError as e:
                    # The database is away: say so, and look again less and less often.
                    self._log(f"slot {n} cannot claim: {e}")
                    claim, failures = None, failures + 1
                if claim is not None:
                    self._handle(n, store, queue, claim)
                    idle_since = time.monotonic()
                    continue
                idle = time.monotonic() - idle_since
                if self.config.once or (
                    self.config.idle_exit_s is not None and idle >= self.config.idle_exit_s
                ):
                    return
                pause = min(30.0, self.config.poll_s * 2 ** min(failures, 10))
                self._draining.wait(pause * (0.5 + random.random()))
        finally:
            store.close()

    def _handle(self, n: int, store: Store, queue: Queue, claim: Claim) -> None:
        info, lease = claim.session, claim.lease
        how = {"queued": "new", "retry": "retry"}.get(claim.state) or (
            "continue" if claim.released else "recover"
        )
        self._log(f"claim {info.id} {how} epoch={lease.epoch} slot={n}")
        started = time.monotonic()
        watch = Watch(self._draining)
        with self._lock:
            self._active[n] = watch
        detail = ""
        result: str
        try:
            watch.host = self._equip(store, info, watch, lease.owner)
            host = watch.host
            outcome = run_claim(host, claim, self.config.ceiling, workspaces=self.config.workspaces)
            result = outcome if outcome is not None else "released" if watch.drained else "lost"
        except LeaseLost:
            result = "lost"
        except Exception as e:  # one bad session must not take the worker down
            text = str(e) if isinstance(e, BubuError) else f"{type(e).__name__}: {e}"
            with contextlib.suppress(BubuError):
                delay = queue.defer(info.id, error=text)
                text += f" (retried in {delay / 1000:.0f} s)"
            result, detail = "error", f" {text}"
        finally:
            with self._lock:
                self._active.pop(n, None)
            with contextlib.suppress(BubuError):
                store.release_lease(lease)
            if watch.host is not None:
                close_provider(watch.host.provider)
        self.handled += 1
        took = time.monotonic() - started
        self._log(f"finish {info.id} {result} epoch={lease.epoch} {took:.1f}s{detail}")


__all__ = [
    "REQUEST_KINDS",
    "SUBMIT_KEY",
    "WORKER_KEYS",
    "Equip",
    "Queue",
    "Submission",
    "SubmittedModel",
    "Watch",
    "Worker",
    "WorkerConfig",
    "asked",
    "check_open_turn",
    "queued_request",
    "run_claim",
    "start_queued",
    "submit",
    "submitted_options",
    "worker_host",
    "worker_options",
]
