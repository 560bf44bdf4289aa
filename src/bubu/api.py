"""The Python API: build your own agent on Bubu's runtime.

    from bubu import Agent, tool

    @tool(effect="read_only")
    def word_count(text: str) -> str:
        '''Count the words of a text.'''
        return str(len(text.split()))

    with Agent(model="anthropic:claude-sonnet-5-5", tools=[word_count]) as agent:
        result = agent.run("How many words are in README.md?")
        print(result.text, result.usage.output_tokens)
        for record in agent.events(result.session):
            print(record.seq, kind_of(record.event))

Everything goes through the same machinery as the CLI: the session's lease, the durable log, the
Dispatch/Outcome boundaries of tool calls, and recovery (`Agent.recover`) after a crash. `run`
blocks until the turn ends; `start` runs it in a background thread and returns a `Run` whose
`events()` follow the log as records are committed. Every blocking method has an ``a``-prefixed
async twin.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from bubu.engine.assemble import assemble_host, code_tools, provider_of
from bubu.engine.driver import NullObserver, Observer, RunConfig
from bubu.engine.permissions import Asker, Policy, nobody
from bubu.engine.recovery import recover_session
from bubu.engine.session import Host, check_task, new_session, resume_turn, start_turn
from bubu.errors import ConfigError
from bubu.events import (
    FunctionResponse,
    Record,
    RecoveryNotice,
    SystemNote,
    Text,
    TurnEnded,
    TurnEndReason,
)
from bubu.log import open_store
from bubu.log.store import SessionInfo, Store
from bubu.projections.recovery import Plan
from bubu.projections.status import Status, fold_status
from bubu.projections.transcript import Transcript, transcript
from bubu.providers.base import Provider
from bubu.tools.base import Tool
from bubu.tools.mcp import MCPConfig, MCPServers, load_config

Ending = TurnEndReason | Literal["lease_lost", "blocked", "busy", "nothing"]
"""How a call ended: the turn's end reason; ``lease_lost`` when another process took the session
over; for `Agent.recover`, ``blocked`` (the log is not trustworthy), ``busy`` (another process
holds the session) or ``nothing`` (no unfinished turn)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Totals:
    """Token accounting of a turn (or of a session)."""

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """What one turn (or one recovery) came to."""

    session: str
    turn: str | None
    reason: Ending
    text: str
    """The model's last text in the turn ("" when it said nothing)."""
    usage: Totals
    high_water: int
    """The session's last seq when the call returned."""
    recovery: Plan | None = None
    """For `Agent.recover`: the recovery plan that was applied."""

    @property
    def ok(self) -> bool:
        """True when the turn completed."""
        return self.reason == "completed"


def summarize(
    session: str, records: Iterable[Record], reason: Ending, high_water: int
) -> RunResult:
    """The result of the records a call appended (pure)."""
    rs = list(records)
    t = transcript(rs)
    said = [
        c.text for r in rs if isinstance(c := r.event.content, Text) and r.event.role == "model"
    ]
    text = next((s for s in reversed(said) if s), "")
    turn = next((r.event.turn for r in rs if r.event.turn is not None), None)
    usage = Totals(
        model_calls=t.model_calls,
        input_tokens=t.input_tokens,
        output_tokens=t.output_tokens,
        cache_read_tokens=t.cache_read_tokens,
    )
    return RunResult(
        session=session, turn=turn, reason=reason, text=text, usage=usage, high_water=high_water
    )


# ---- following the log --------------------------------------------------------------------------


@dataclass(slots=True)
class _Follow:
    """When to stop following (sans I/O): once a turn end (or a blocked recovery) has been seen
    and the session is no longer in an open turn; or, with `until`, once that says so."""

    status: Status = field(default_factory=Status)
    ended: bool = False

    def feed(self, batch: list[Record]) -> None:
        self.status = fold_status(batch, self.status)
        for r in batch:
            c = r.event.content
            if isinstance(c, SystemNote) and (
                isinstance(c.note, TurnEnded)
                or (isinstance(c.note, RecoveryNotice) and c.note.status == "blocked")
            ):
                self.ended = True

    @property
    def at_rest(self) -> bool:
        return self.ended and self.status.state != "open"


def follow_records(
    store: Store,
    session: str,
    *,
    after: int = 0,
    poll_s: float = 0.05,
    until: Callable[[], bool] | None = None,
) -> Iterator[Record]:
    """Records with seq > `after` as they are committed, until the turn in progress ends.

    Without `until`, following stops after a turn end once the session has no open turn (a
    finished session is read to its end; after its high-water, the iterator waits for the next
    turn). With `until`, it stops when `until()` is true and everything committed was yielded.
    """
    state = _Follow(status=fold_status(store.read(session, upto=after)) if after else Status())
    last = after
    while True:
        finished = until is not None and until()
        batch = store.read(session, after=last)
        yield from batch
        if batch:
            last = batch[-1].seq
            state.feed(batch)
            continue
        if finished or (until is None and state.at_rest):
            return
        time.sleep(poll_s)


async def afollow_records(
    store: Store,
    session: str,
    *,
    after: int = 0,
    poll_s: float = 0.05,
    until: Callable[[], bool] | None = None,
) -> AsyncIterator[Record]:
    """The async twin of `follow_records`: the store is read in a worker thread."""
    prefix = await asyncio.to_thread(store.read, session, upto=after) if after else []
    state = _Follow(status=fold_status(prefix))
    last = after
    while True:
        finished = until is not None and until()
        batch = await asyncio.to_thread(store.read, session, after=last)
        for r in batch:
            yield r
        if batch:
            last = batch[-1].seq
            state.feed(batch)
            continue
        if finished or (until is None and state.at_rest):
            return
        await asyncio.sleep(poll_s)


# ---- sessions -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionView:
    """A session of the store, read through the projections."""

    store: Store
    info: SessionInfo

    @property
    def id(self) -> str:
        """The session id."""
        return self.info.id

    def records(self, after: int = 0) -> list[Record]:
        """The committed records with seq > `after`."""
        return self.store.read(self.info.id, after=after)

    def transcript(self) -> Transcript:
        """What a person reads: messages, tool cards, notes and token totals."""
        return transcript(self.records())

    def status(self) -> Status:
        """The session's state (idle, open, completed, failed, stopped, suspended, blocked)."""
        return fold_status(self.records())

    def results(self) -> dict[str, FunctionResponse]:
        """Every committed tool outcome, by call id."""
        return {
            c.call_id: c
            for r in self.records()
            if isinstance(c := r.event.content, FunctionResponse)
        }

    def events(self, *, after: int = 0, follow: bool = True) -> Iterator[Record]:
        """Committed records, following the log until the turn in progress ends."""
        if not follow:
            return iter(self.records(after))
        return follow_records(self.store, self.info.id, after=after)


# ---- the host -----------------------------------------------------------------------------------


class Run:
    """A turn running in a background thread (from `Agent.start`)."""

    def __init__(
        self,
        *,
        session: str,
        start_seq: int,
        store: Store,
        host: Host,
        body: Callable[[], RunResult],
    ) -> None:
        self.session = session
        self.start_seq = start_seq
        """The session's high-water before the turn: its records come after it."""
        self._store, self._host = store, host
        self._result: RunResult | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._main, args=(body,), name="bubu-run", daemon=True
        )
        self._thread.start()

    def done(self) -> bool:
        """True once the turn ended (or the run failed)."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> RunResult:
        """Wait for the turn's end and return its result (re-raises what the run raised)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the turn of session {self.session} is still running")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    async def await_result(self) -> RunResult:
        """The async twin of `wait`."""
        return await asyncio.to_thread(self.wait)

    def stop(self) -> None:
        """Stop the turn: running tools are cancelled and it ends ``stopped``."""
        runner = self._host.runner
        if runner is not None:
            runner.request_stop("stopped")

    def events(self) -> Iterator[Record]:
        """This turn's records as they are committed, until the run is over."""
        return follow_records(self._store, self.session, after=self.start_seq, until=self.done)

    def aevents(self) -> AsyncIterator[Record]:
        """The async twin of `events`."""
        return afollow_records(self._store, self.session, after=self.start_seq, until=self.done)

    def _main(self, body: Callable[[], RunResult]) -> None:
        try:
            self._result = body()
        except BaseException as e:  # handed to wait()
            self._error = e
        finally:
            self._done.set()


# ---- the agent ----------------------------------------------------------------------------------


class Agent:
    """An agent: a model, tools, a system prompt and a store, run through Bubu's runtime.

    `model` is a spec (``anthropic:MODEL``, ``openai:MODEL``, ``scripted:PATH``, ``PLUGIN:MODEL``)
    or a `Provider`. `tools` are added to the built-in tools (``builtin_tools=False`` leaves those
    out; ``plugins=True`` adds every tool registered in the ``bubu.tools`` entry-point group).
    `mcp` is an MCP configuration file (or an `MCPConfig`, or connected `MCPServers`). `store` is a
    SQLite path, a ``postgresql://`` URL or an open `Store` (default: as the CLI's ``--db``).
    """

    def __init__(
        self,
        model: str | Provider,
        *,
        tools: Iterable[Tool] = (),
        builtin_tools: bool = True,
        plugins: bool = False,
        mcp: str | Path | MCPConfig | MCPServers | None = None,
        system_prompt: str | None = None,
        store: str | Path | Store | None = None,
        workspace: str | Path = ".",
        policy: Policy | None = None,
        asker: Asker = nobody,
        observer: Observer | None = None,
        config: RunConfig | None = None,
    ) -> None:
        self.provider: Provider = provider_of(model, {}) if isinstance(model, str) else model
        self.workspace = Path(workspace).expanduser().resolve()
        self.system_prompt = system_prompt
        self.policy = policy or Policy()
        self.asker = asker
        self.observer: Observer = observer or NullObserver()
        self.config = config or RunConfig()
        self._owns_store = not isinstance(store, Store)
        self.store: Store = store if isinstance(store, Store) else open_store(_db(store))
        self._mcp: MCPServers | None = None
        self._owns_mcp = False
        self.last_session: str | None = None
        try:
            self.tools: dict[str, Tool] = code_tools(
                [*tools, *self._mcp_tools(mcp)], builtin=builtin_tools, plugins=plugins
            )
        except BaseException:  # undone, then re-raised: Ctrl-C and exits too
            self.close()
            raise

    def _mcp_tools(self, mcp: str | Path | MCPConfig | MCPServers | None) -> list[Tool]:
        if mcp is None:
            return []
        if isinstance(mcp, MCPServers):
            self._mcp = mcp
        else:
            config = mcp if isinstance(mcp, MCPConfig) else load_config(mcp)
            servers = MCPServers(config, where=str(mcp), pass_env=self.policy.pass_env)
            self._mcp, self._owns_mcp = servers, True
        self._mcp.start()
        return list(self._mcp.tools())

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        """Disconnect the MCP servers this agent started and close the store it opened."""
        if self._mcp is not None and self._owns_mcp:
            self._mcp.close()
        self._mcp = None
        if self._owns_store:
            self.store.close()
            self._owns_store = False

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def host(self) -> Host:
        """A fresh Host for one run, with this agent's provider, tools, policy and prompt
        (`bubu.engine.assemble`, as every front end builds its hosts)."""
        return assemble_host(
            self.store,
            self.provider,
            {},
            tools=self.tools,
            policy=self.policy,
            config=self.config,
            asker=self.asker,
            observer=self.observer,
            prompt=self.system_prompt,
        )

    # -- turns ------------------------------------------------------------------------------------

    def run(self, task: str, *, session: str | None = None) -> RunResult:
        """Run `task` as a turn (in a new session unless `session` is given) until it ends."""
        info = self._target(task, session)
        return self._turn(info, lambda host: start_turn(host, info, task))

    def continue_(self, task: str, *, session: str | None = None) -> RunResult:
        """A follow-up turn in `session`, by default the session this agent used last."""
        ref = session or self.last_session
        if ref is None:
            raise ConfigError("there is no session to continue; call run() first or name one")
        return self.run(task, session=ref)

    def start(self, task: str, *, session: str | None = None) -> Run:
        """Start `task` as a turn in a background thread; the session exists when this returns."""
        info = self._target(task, session)
        host = self.host()
        return Run(
            session=info.id,
            start_seq=self.store.head(info.id).high_water,
            store=self.store,
            host=host,
            body=lambda: self._turn(info, lambda h: start_turn(h, info, task), host=host),
        )

    def resume(self, session: str) -> RunResult:
        """Continue a stopped or suspended turn without new input."""
        info = self.store.session(session)
        return self._turn(info, lambda host: resume_turn(host, info))

    def recover(self, session: str) -> RunResult:
        """Recover a turn a crash left open (DESIGN §5) and continue it to its end."""
        info = self.store.session(session)
        plan: list[Plan] = []

        def body(host: Host) -> Ending | None:
            rec = recover_session(host, info)
            plan.append(rec.plan)
            return rec.outcome

        return replace(self._turn(info, body), recovery=plan[0] if plan else None)

    async def arun(self, task: str, *, session: str | None = None) -> RunResult:
        """The async twin of `run` (the turn runs in a worker thread)."""
        return await asyncio.to_thread(self.run, task, session=session)

    async def acontinue(self, task: str, *, session: str | None = None) -> RunResult:
        """The async twin of `continue_`."""
        return await asyncio.to_thread(self.continue_, task, session=session)

    async def aresume(self, session: str) -> RunResult:
        """The async twin of `resume`."""
        return await asyncio.to_thread(self.resume, session)

    async def arecover(self, session: str) -> RunResult:
        """The async twin of `recover`."""
        return await asyncio.to_thread(self.recover, session)

    def _target(self, task: str, session: str | None) -> SessionInfo:
        check_task(task)
        if session is not None:
            return self.store.session(session)
        return new_session(
            self.store, task=task, workspace=self.workspace, model=self.provider.spec
        )

    def _turn(
        self,
        info: SessionInfo,
        body: Callable[[Host], Ending | None],
        *,
        host: Host | None = None,
    ) -> RunResult:
        host = host or self.host()
        start = self.store.head(info.id).high_water
        self.last_session = info.id
        with _ctrl_c_stops(host) as ctrl_c:
            ending = body(host)
        records = self.store.read(info.id, after=start)
        high = records[-1].seq if records else start
        result = summarize(info.id, records, ending or "lease_lost", high)
        if ctrl_c.pressed:
            raise KeyboardInterrupt  # the turn ended `stopped` and the log is clean
        return result

    # -- reading ----------------------------------------------------------------------------------

    def sessions(self) -> list[SessionInfo]:
        """Every session of the store, newest first."""
        return self.store.sessions()

    def session(self, ref: str | None = None) -> SessionView:
        """A session by id (or unique id prefix); by default the one this agent used last."""
        ref = ref or self.last_session
        if ref is None:
            raise ConfigError("no session given and this agent has not run one yet")
        return SessionView(self.store, self.store.session(ref))

    def events(
        self, session: str, *, after: int = 0, follow: bool = True, poll_s: float = 0.05
    ) -> Iterator[Record]:
        """Committed records of `session` with seq > `after`; with `follow`, new ones as they are
        committed, until the turn in progress ends (see `follow_records`)."""
        sid = self.store.session(session).id
        if not follow:
            return iter(self.store.read(sid, after=after))
        return follow_records(self.store, sid, after=after, poll_s=poll_s)

    def aevents(
        self, session: str, *, after: int = 0, poll_s: float = 0.05
    ) -> AsyncIterator[Record]:
        """The async twin of `events` (always following)."""
        sid = self.store.session(session).id
        return afollow_records(self.store, sid, after=after, poll_s=poll_s)


def _db(store: str | Path | None) -> str | None:
    return None if store is None else str(store)


@dataclass(slots=True)
class _CtrlC:
    pressed: bool = False


@contextmanager
def _ctrl_c_stops(host: Host) -> Iterator[_CtrlC]:
    """In the main thread, Ctrl-C stops the turn cleanly (then KeyboardInterrupt is raised)."""
    ctrl_c = _CtrlC()
    if threading.current_thread() is not threading.main_thread():
        yield ctrl_c
        return

    def on_int(*_: object) -> None:
        ctrl_c.pressed = True
        if host.runner is not None:
            host.runner.request_stop("stopped")

    old = signal.signal(signal.SIGINT, on_int)
    try:
        yield ctrl_c
    finally:
        signal.signal(signal.SIGINT, old)


__all__ = [
    "Agent",
    "Ending",
    "Run",
    "RunResult",
    "SessionView",
    "Totals",
    "afollow_records",
    "follow_records",
    "summarize",
]
