"""Session-level operations: start a turn, resume a stopped one, all through the session's lease."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bubu import clock, failpoints, ids
from bubu.engine import turnstart
from bubu.engine.driver import NullObserver, Observer, RunConfig, Runner, owner_id
from bubu.engine.instructions import NoteMaker
from bubu.engine.permissions import Asker, Policy, nobody
from bubu.engine.scope import acting_info, holder_gone
from bubu.engine.settings import ModelSettings, public_url
from bubu.engine.toolcalls import recorded_box
from bubu.errors import BubuError, ConfigError, CorruptLog
from bubu.events import (
    Actions,
    EndCause,
    Event,
    FunctionCall,
    ProjectInstructions,
    SkillsListed,
    SystemNote,
    Text,
    TurnEndReason,
    TurnStarted,
    make,
)
from bubu.log.store import SessionInfo, Store, VerifyReport
from bubu.projections.longrun import LongRunFold
from bubu.projections.turn import TurnFold, fold
from bubu.providers import windows
from bubu.providers.base import Provider
from bubu.tools.base import Tool
from bubu.tools.sandbox import DEFAULT_MODE, box_fields, turn_options


@dataclass(kw_only=True)
class Host:
    """What a front end (CLI, web UI, worker, Python API) brings to a run."""

    store: Store
    provider: Provider
    tools: dict[str, Tool]
    policy: Policy = field(default_factory=Policy)
    asker: Asker = nobody
    observer: Observer = field(default_factory=NullObserver)
    config: RunConfig = field(default_factory=RunConfig)
    owner: str = field(default_factory=owner_id)
    prompt: str | None = None
    """A custom system prompt (recorded with each turn it starts)."""
    mcp_config: str | None = None
    """The MCP configuration file `tools` came from (recorded with each turn it starts)."""
    load_tools: Callable[[str], dict[str, Tool]] | None = None
    """How to build the tools of another MCP configuration, so that a recovered or resumed turn
    gets the tools it was started with; None when the tools are fixed (the user chose them)."""
    model_settings: ModelSettings = field(default_factory=ModelSettings)
    """How `provider` was built besides its spec (recorded with each turn it starts)."""
    runner: Runner | None = None
    fallbacks: dict[str, Provider] = field(default_factory=dict)
    """Providers for fallback models, by spec, built with the host's options."""
    hooked: set[str] = field(default_factory=set)
    """Sessions this host ran the SessionStart hooks of (once per session and process)."""

    def check_integrity(self, session: str) -> None:
        """Refuse to run a session whose log does not verify (an altered or damaged row would
        reach the model as if it were the session's): the records after the last snapshot of
        the runner's state verify from its digest (the whole log when there is none), and the
        rows of the prefix a run acts on (the session's chained facts) are linked into the
        chain, so the check costs the same on the session's first turn and its thousandth."""
        # Not `Store.verify`: a derived view that disagrees with the log is ignored and rebuilt,
        # never a reason to refuse the log itself.
        from bubu.engine import reload

        report = reload.continuable(self.store, session, self.config.context)[2]
        if not report.ok:
            seq = report.first_bad_seq
            rows = [] if seq is None else self.store.raw(session, after=seq - 1, upto=seq)
            newer_event(rows, seq)
            raise CorruptLog(refusal(report), session=session, seq=seq)

    def adopt_turn_tools(self, turn: TurnFold) -> None:
        """Offer the tools of the MCP configuration `turn` was started with, when it differs
        from this host's and the host's tools were not chosen explicitly."""
        wanted = turn.mcp_config
        if wanted is None or wanted == self.mcp_config or self.load_tools is None:
            return
        if not Path(wanted).is_file():
            raise ConfigError(
                f"the turn was started with the MCP servers in {wanted}, which no longer exists; "
                "restore it, or pass --mcp FILE to continue with other servers"
            )
        self.tools = self.load_tools(wanted)
        self.mcp_config = wanted

    @contextmanager
    def runner_for(self, session: SessionInfo) -> Iterator[Runner]:
        """Hold the session's lease for the duration of a `Runner`."""
        self.check_integrity(session.id)
        # A held lease raises LeaseError: "session S is being run by OWNER; wait for it …". A
        # lease whose process died on this host is held by nobody: take it at once.
        current = self.store.current_lease(session.id)
        dead = current is not None and holder_gone(self.store, session.id, current)
        lease = self.store.acquire_lease(
            session.id,
            self.owner,
            self.config.lease_ttl_s,
            steal=dead,
            steal_epoch=current.epoch if dead and current is not None else None,
        )
        runner: Runner | None = None
        try:
            # The workspace and title the chain records, not the header (which it does not cover).
            acting, _ = acting_info(self.store, session)
            runner = Runner(
                store=self.store,
                session=acting,
                provider=self.provider,
                tools=self.tools,
                lease=lease,
                policy=self.policy,
                asker=self.asker,
                observer=self.observer,
                config=self.config,
                prompt=self.prompt,
                fallbacks=self.fallbacks,
            )
            self.runner = runner
            yield runner
        finally:
            self.runner = None
            with contextlib.suppress(BubuError):
                self.store.release_lease(runner.lease if runner is not None else lease)


def new_session(store: Store, *, task: str, workspace: str | Path, model: str) -> SessionInfo:
    """Create a session for `task` in `workspace` (which must exist)."""
    ws = Path(workspace).expanduser().resolve()
    if not ws.is_dir():
        raise ConfigError(f"the workspace {ws} is not a directory; create it or pass -w DIR")
    title = " ".join(task.split())[:120] or "(empty task)"
    return store.create_session(title=title, workspace=str(ws), model=model)


def check_task(task: str) -> str:
    """Refuse tasks that cannot be a request; returns the task unchanged otherwise."""
    if not task.strip():
        raise ConfigError(
            'the task is empty; say what Bubu should do, e.g. bubu run "fix the failing test"'
        )
    if len(task.encode("utf-8", "replace")) > 1_000_000:
        raise ConfigError(
            "the task is larger than 1 MB; put the material in a file in the workspace and refer "
            "to it"
        )
    return task


def newer_event(rows: Sequence[tuple[int, bytes, bytes]], seq: int | None) -> None:
    """Raise NewerLogError when the row at `seq` was written by a newer Bubu: that, not an
    altered log, is why it does not verify, and upgrading is the remedy."""
    from bubu.errors import NewerLogError
    from bubu.log import codec

    payload = next((p for at, _, p in rows if at == seq), None)
    if payload is None or seq is None:
        return
    try:
        codec.decode(bytes(payload), seq=seq)
    except NewerLogError:
        raise
    except BubuError:
        pass  # damaged or altered: the caller says so


def refusal(report: VerifyReport) -> str:
    """Why a session whose log does not verify is not run, and what to do."""
    sid = report.session
    return (
        f"session {sid} is not continued: its log does not verify at seq {report.first_bad_seq} "
        f"({report.problem}); `bubu verify {sid}` shows it — restore the database from a backup, "
        "or start a new session"
    )


PLAN_MODE = (
    "[plan mode] Plan, do not act: read and search the workspace as much as you need, but "
    "change nothing (every write, edit and command is refused). Record the steps with "
    "update_plan and end your answer with the plan. The user approves it before anything is done."
)
"""What the model is told at the start of each planning turn."""
APPROVED = "The plan is approved: carry it out."
"""The request of the turn that acts on an approved plan, when the user gives none."""


def start_turn(
    host: Host,
    session: SessionInfo,
    task: str,
    *,
    committed: Callable[[], None] | None = None,
    images: Sequence[tuple[str, bytes]] = (),
    reads: Sequence[str] = (),
    approve_plan: bool = False,
) -> TurnEndReason | None:
    """Append the user's request, open a turn and drive it to its end; `committed` is called once
    the request is durable, before the first step (what it raises is not the turn's concern).
    `images` (media type, bytes) are attached to the request, stored as blobs with it; each
    workspace path of `reads` (an ``@path`` mention) is given as a `read_file` call the host
    makes, run and recorded like the model's own, so the log holds what the model was shown. With
    `approve_plan`, the session's pending plan is approved first (a `PlanApproved` note): the
    turn acts on it."""
    check_task(task)
    from bubu.images import refs

    attached, blobs = refs(images)
    from bubu.log.codec import sanitize_text

    with host.runner_for(session) as runner:
        if runner.turn.open:
            raise ConfigError(
                f"session {session.id} has an unfinished turn; `bubu recover` or "
                f"`bubu resume {session.id}` it first"
            )
        turn = ids.turn_id()
        approval = _approval(host, runner, turn) if approve_plan else []
        plan = not approve_plan and (host.config.plan or runner.turn.plan)
        hooked = _turn_hooks(host, runner, task, turn)
        now = clock.now_ms()
        request = make(
            session=session.id,
            turn=turn,
            role="user",
            author="user",
            ts=now,
            content=Text(text=sanitize_text(task), images=attached),
        )
        opened = make(
            session=session.id,
            turn=turn,
            role="system",
            author="system",
            ts=now,
            content=SystemNote(note=_turn_started(host, runner.session, plan=plan)),
            visibility="hidden",
        )
        if plan:
            hooked.append(
                make(
                    session=session.id,
                    turn=turn,
                    role="user",
                    author="host",
                    ts=now,
                    content=Text(text=PLAN_MODE),
                )
            )
        notes = runner.instructions.at_turn_start(
            runner.session.workspace,
            enabled=host.config.project_instructions,
            called=runner.turn.model_responses > 0,
            make_note=instructions_note(session, turn, now),
            skills="skill" in host.tools,
        )
        attach = [
            make(
                session=session.id,
                turn=turn,
                role="model",
                author="host",
                ts=now,
                content=FunctionCall(
                    call_id=ids.new_id("at"), name="read_file", arguments={"path": path}
                ),
                actions=Actions(end_invocation=True),
                invocation=ids.invocation_id(),
            )
            for path in dict.fromkeys(reads)
            if "read_file" in host.tools
        ]
        with turnstart.window():
            runner.start_run(
                "new", prefix=[*approval, request, opened, *notes, *hooked, *attach], blobs=blobs
            )
            failpoints.pause("after_turn_start")
            if committed is not None:
                with contextlib.suppress(Exception):
                    committed()
            return runner.drive()


def _approval(host: Host, runner: Runner, turn: str) -> list[Event]:
    """The note that approves the session's pending plan (the switch from planning to acting)."""
    from bubu.events import PlanApproved
    from bubu.projections.memory import fold_plan

    if not runner.turn.plan:
        raise ConfigError(
            f"session {runner.session.id} has no plan waiting for approval; start one with "
            '`bubu run --plan "TASK"` (or /plan in the chat)'
        )
    items = fold_plan(host.store.read(runner.session.id)) or ()
    approved = PlanApproved(plan=[i.text for i in items])
    return [
        make(
            session=runner.session.id,
            turn=turn,
            role="system",
            author="user",
            ts=clock.now_ms(),
            content=SystemNote(note=approved),
            visibility="hidden",
        )
    ]


def _turn_hooks(host: Host, runner: Runner, task: str, turn: str) -> list[Event]:
    """Run the SessionStart (once per session here) and UserPromptSubmit hooks of a new turn:
    their notes and context for its first append; a refusal is committed alone and raised."""
    from bubu.engine.hookpoints import blocked_message
    from bubu.errors import HookBlocked

    if not host.config.hooks:
        return []
    sid, source = runner.session.id, None
    if sid not in host.hooked:
        source = "startup" if runner.turn.turn is None else "resume"
        host.hooked.add(sid)
    said = runner.hook_points.turn_start(task, source=source, turn=turn)
    if said.blocked is not None:
        note, reason = said.blocked
        runner.append([note], durable=True)
        raise HookBlocked(blocked_message(reason))
    return said.events


def instructions_note(session: SessionInfo, turn: str, now: int) -> NoteMaker:
    """How a turn's project instruction notes are made (hidden in the prefix, visible after)."""

    def note(n: ProjectInstructions | SkillsListed, visible: bool) -> Event:
        return make(
            session=session.id,
            turn=turn,
            role="system",
            author="system",
            ts=now,
            content=SystemNote(note=n),
            visibility="visible" if visible else "hidden",
        )

    return note


def resume_turn(host: Host, session: SessionInfo) -> TurnEndReason | None:
    """Reopen the last turn if it was stopped or suspended and continue it without new input."""
    host.adopt_turn_tools(
        fold(host.store.read(session.id, kinds=("turn_started", "session_started")))
    )
    with host.runner_for(session) as runner:
        t = runner.turn
        if t.open:
            raise ConfigError(f"session {session.id} has an open turn; `bubu recover` continues it")
        if t.turn is None or not resumable(t.end_reason, runner.longrun.end_cause):
            raise ConfigError(
                f"session {session.id} has no stopped or suspended turn to resume "
                f"(its last turn {'ended ' + t.end_reason if t.end_reason else 'does not exist'})"
            )
        return reopen_turn(host, runner)


def resumable(reason: str | None, cause: EndCause | None) -> bool:
    """Whether a turn that ended so may be continued: stopped, suspended, or failed only because
    the provider stayed unavailable."""
    return reason in ("stopped", "suspended") or (
        reason == "failed" and cause == "provider_unavailable"
    )


def reopen_turn(host: Host, runner: Runner) -> TurnEndReason | None:
    """Reopen the runner's ended turn under the host's settings (widened by the turn's own) and
    drive it on; every limit counts afresh from here."""
    t, session = runner.turn, runner.session
    reopened = make(
        session=session.id,
        turn=t.turn,
        role="system",
        author="system",
        ts=clock.now_ms(),
        content=SystemNote(note=_turn_started(host, session, t, runner.longrun)),
        visibility="hidden",
    )
    with turnstart.window():
        runner.start_run("resume", prefix=[reopened])
        failpoints.pause("after_turn_start")
        return runner.drive()


def _turn_window(host: Host, p: TurnFold) -> tuple[int | None, str | None]:
    """The window the turn records, with its source: the user's; else the reopened turn's when
    a user set it or the server's overflow error stated it; else the model's as found now."""
    if host.config.context_window:
        return host.config.context_window, windows.USER
    if p.context_window and (
        p.window_source in (None, windows.USER) or windows.learned(p.window_source)
    ):
        return p.context_window, p.window_source or windows.USER
    try:
        tokens = host.provider.context_window
    except BubuError:
        return None, None
    source = getattr(host.provider, "context_window_source", None)
    return tokens, source if isinstance(source, str) else "the model provider"


def _turn_started(
    host: Host,
    session: SessionInfo,
    previous: TurnFold | None = None,
    budget: LongRunFold | None = None,
    *,
    plan: bool | None = None,
) -> TurnStarted:
    """The turn's recorded settings: the host's, widened by those of the turn it reopens (limits
    and the retry policy the host leaves unset are kept from it); and the session's workspace
    and title, so that the chain, not the sessions table, says where it acts."""
    p = previous if previous is not None else TurnFold()
    b = budget if budget is not None else LongRunFold()
    c = host.config
    ms = host.model_settings
    window, window_source = _turn_window(host, p)
    return TurnStarted(
        model=host.provider.spec,
        max_steps=c.max_steps if c.max_steps is not None else b.max_steps,
        retry_for_s=c.retry_for_s if c.retry_for_s is not None else b.retry_for_s,
        fallback_models=list(c.fallback_models or b.fallbacks),
        token_limit=c.token_limit if c.token_limit is not None else b.token_limit,
        time_limit_s=c.time_limit_s if c.time_limit_s is not None else b.time_limit_s,
        yes=host.policy.yes or p.yes,
        allow_commands=list(dict.fromkeys([*p.allow_commands, *host.policy.allow_commands])),
        allow_write=list(dict.fromkeys([*p.allow_write, *host.policy.allow_write])),
        system_prompt=host.prompt if host.prompt is not None else p.system_prompt,
        project_instructions=host.config.project_instructions,
        context_window=window,
        window_source=window_source,
        mcp_config=host.mcp_config if host.mcp_config is not None else p.mcp_config,
        # A mode chosen now wins; else the reopened turn's; the network only ever widens.
        sandbox=host.policy.sandbox or p.sandbox or DEFAULT_MODE,
        network=host.policy.network or (host.policy.sandbox is None and p.network),
        pass_env=list(dict.fromkeys([*p.pass_env, *host.policy.pass_env])),
        # The reopened turn's sockets, agent and limits; the host's may only tighten them.
        **box_fields(turn_options(recorded_box(p), host.policy.box)),
        base_url=public_url(getattr(host.provider, "base_url", None) or ms.base_url),
        stall_timeout=ms.stall_timeout,
        thinking_budget=ms.thinking_budget,
        reasoning_effort=ms.reasoning_effort,
        max_output_tokens=ms.max_output_tokens,
        cache_ttl=ms.cache_ttl,
        native_tools=ms.native_tools,
        tool_timeout=host.config.tool_timeout_s,
        workspace=session.workspace,
        title=session.title,
        max_cost=host.config.max_cost if host.config.max_cost is not None else p.max_cost,
        deny=list(dict.fromkeys([*p.deny, *host.policy.deny])),
        plan=plan if plan is not None else host.config.plan or p.plan,
    )
