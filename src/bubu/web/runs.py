"""Turns the web UI runs in-process: start, follow up, stop, resume, recover, and live approvals.

Every run goes through the same `Host` / lease machinery as the CLI, in a background thread. A run
started here asks for permission through the page: the asker blocks on a `threading.Event` keyed
by the request id until someone clicks Approve or Deny (or the turn is stopped, or the UI shuts
down, which answers nobody). The streamed draft and the current activity, which the log does not
hold until the model call is committed, are kept per session for the live view.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from bubu.engine.assemble import assemble_host, config_options
from bubu.engine.driver import Observer
from bubu.engine.permissions import Answer, Asker, nobody
from bubu.engine.recovery import needs_recovery, recover_session
from bubu.engine.scope import acting_info, scan
from bubu.engine.session import (
    Host,
    check_task,
    new_session,
    resumable,
    resume_turn,
    start_turn,
)
from bubu.engine.settings import continuing_opts, imported_server, last_turn
from bubu.errors import BubuError, ConfigError
from bubu.events import PermissionRequest, Record, SandboxMode, SystemNote, TurnEnded, TurnStarted
from bubu.log import readview, redact
from bubu.log.store import SessionInfo, Store
from bubu.projections.longrun import fold_longrun
from bubu.providers.base import Delta, close_provider

log = logging.getLogger("bubu.web")

SETTLE_SECONDS = 5.0
"""How long an action waits for a UI thread whose turn has ended to finish closing."""

_UNFINISHED = frozenset({"open", "blocked", "queued", "held"})
"""Session states in which a turn is under way or waiting to start."""


class HostFactory(Protocol):
    """Builds a host for a model spec (with the settings a turn `recorded`, when it continues
    one), with the manager's asker (the page) and observer (its live state)."""

    def __call__(
        self,
        store: Store,
        model: str,
        /,
        *,
        recorded: TurnStarted | None = None,
        new_turn: bool = False,
        asker: Asker = nobody,
        observer: Observer | None = None,
    ) -> Host: ...


def default_host(
    store: Store,
    model: str,
    /,
    *,
    recorded: TurnStarted | None = None,
    new_turn: bool = False,
    asker: Asker = nobody,
    observer: Observer | None = None,
) -> Host:
    """A host under the user's own config file (`bubu.engine.assemble`). A turn's `recorded`
    settings rebuild its provider (its server, window, timeouts) and, unless this is a
    `new_turn`, its limits."""
    options = _user_options()
    if recorded is not None and recorded.model == model:
        options = continuing_opts(options, (), recorded, new_turn=new_turn)
    return assemble_host(store, model, options, asker=asker, observer=observer)


def _user_options() -> dict[str, Any]:
    """The run options of the user's own config file (a page's turns run under them); a bad
    file is logged and its settings are off."""
    try:
        return config_options(None)
    except ConfigError as e:
        log.warning("the config file's settings are off: %s", e)
        return {}


@dataclass(slots=True)
class Live:
    """What a running turn shows before it is committed: the streamed draft and the activity."""

    activity: str | None = None
    draft: str = ""
    thinking: str = ""


@dataclass(slots=True)
class _Ask:
    request: PermissionRequest
    session: str | None
    done: threading.Event = field(default_factory=threading.Event)
    answer: Answer | None = None


class _PageObserver:
    """The observer of a host started by the UI: feeds the manager's live state."""

    def __init__(self, manager: RunManager) -> None:
        self.manager = manager
        self.host: Host | None = None

    def _session(self) -> str | None:
        runner = self.host.runner if self.host is not None else None
        return None if runner is None else runner.session.id

    def on_delta(self, delta: Delta) -> None:
        """Append a streamed fragment to the draft."""
        self.manager.update_live(self._session(), delta=delta)

    def on_records(self, records: Sequence[Record]) -> None:
        """A committed model response replaces the draft; a turn's end clears the activity."""
        committed = any(r.event.role == "model" for r in records)
        ended = any(
            isinstance(r.event.content, SystemNote) and isinstance(r.event.content.note, TurnEnded)
            for r in records
        )
        if committed or ended:
            self.manager.update_live(self._session(), reset=True, ended=ended)

    def on_activity(self, text: str | None) -> None:
        """Record what runs now."""
        self.manager.update_live(self._session(), activity=text, set_activity=True)


class RunManager:
    """The UI's runs: one background thread per session at a time, plus start-up recovery."""

    def __init__(self, store: Store, *, host_factory: HostFactory = default_host) -> None:
        self.store = store
        self._factory = host_factory
        self._lock = threading.RLock()
        self._hosts: list[Host] = []
        self._threads: dict[str, threading.Thread] = {}
        self._recovery: threading.Thread | None = None
        self._asks: dict[str, _Ask] = {}
        self._early: dict[str, Answer] = {}
        self._live: dict[str, Live] = {}
        self._errors: dict[str, str] = {}
        self._closing = False

    # -- hosts --------------------------------------------------------------------------------

    def host(
        self, model: str, *, recorded: TurnStarted | None = None, new_turn: bool = False
    ) -> Host:
        """A registered host for `model` whose asker is the page and whose observer is live state
        (built with the settings a turn `recorded`, when it continues one)."""
        with self._lock:
            if self._closing:
                raise ConfigError("the UI is shutting down; start Bubu again to run turns")
        page = _PageObserver(self)
        host = self._factory(
            self.store,
            model,
            recorded=recorded,
            new_turn=new_turn,
            asker=lambda request: self._ask(host, request),
            observer=page,
        )
        page.host = host
        with self._lock:
            self._hosts.append(host)
        return host

    def _drop(self, host: Host) -> None:
        """The host's run is over (or never started): forget it and close its model client."""
        with self._lock:
            if host in self._hosts:
                self._hosts.remove(host)
        close_provider(host.provider)

    def _host_running(self, session: str) -> Host | None:
        with self._lock:
            for h in self._hosts:
                if h.runner is not None and h.runner.session.id == session:
                    return h
        return None

    def running_here(self, session: str) -> bool:
        """True while this UI runs (or is about to run) a turn of the session."""
        with self._lock:
            t = self._threads.get(session)
            return (t is not None and t.is_alive()) or self._host_running(session) is not None

    def _settle(self, info: SessionInfo) -> None:
        """Give a UI thread whose turn the log already shows ended a moment to finish (it is
        releasing its lease and closing its host), so that an action taken the moment a turn
        completes is not refused as running."""
        with self._lock:
            t = self._threads.get(info.id)
        if t is not None and t.is_alive() and self._state(info) not in _UNFINISHED:
            t.join(timeout=SETTLE_SECONDS)

    def error(self, session: str) -> str | None:
        """The last failure of a UI run of the session that the log could not record, if any."""
        with self._lock:
            return self._errors.get(session)

    # -- live state ---------------------------------------------------------------------------

    def update_live(
        self,
        session: str | None,
        *,
        delta: Delta | None = None,
        activity: str | None = None,
        set_activity: bool = False,
        reset: bool = False,
        ended: bool = False,
    ) -> None:
        """Fold an observer callback into the session's live state."""
        if session is None:
            return
        with self._lock:
            live = self._live.setdefault(session, Live())
            if reset:
                live.draft, live.thinking = "", ""
            if ended:
                live.activity = None
            if set_activity:
                live.activity = activity
            if delta is not None:
                if delta.kind == "text":
                    live.draft += delta.text
                else:
                    live.thinking += delta.text

    def live(self, session: str) -> Live:
        """A copy of the session's live state."""
        with self._lock:
            cur = self._live.get(session)
            if cur is None:
                return Live()
            activity, draft, thinking = cur.activity, cur.draft, cur.thinking
        # Shown as the log will hold it: redacted, a run that may be a secret's start held back.
        return Live(activity, redact.shown_prefix(draft), redact.shown_prefix(thinking))

    # -- permissions --------------------------------------------------------------------------

    def _ask(self, host: Host, request: PermissionRequest) -> Answer | None:
        runner = host.runner
        ask = _Ask(request=request, session=None if runner is None else runner.session.id)
        with self._lock:
            if self._closing:
                return None
            early = self._early.pop(request.request_id, None)
            if early is not None:
                return early
            self._asks[request.request_id] = ask
        if ask.session is not None:
            self.update_live(ask.session, activity="waiting for your approval", set_activity=True)
        ask.done.wait()
        with self._lock:
            self._asks.pop(request.request_id, None)
        return ask.answer

    def waiting(self, session: str) -> list[PermissionRequest]:
        """The permission requests of the session that wait for an answer in this UI."""
        with self._lock:
            return [a.request for a in self._asks.values() if a.session == session]

    def answer(self, session: str, request_id: str, decision: Answer) -> None:
        """Answer a waiting request; an answer that arrives before the asker waits is kept for
        it."""
        with self._lock:
            ask = self._asks.get(request_id)
            if ask is None:
                if not self.running_here(session):
                    raise ConfigError(
                        f"the permission request {request_id} is not waiting in this UI; "
                        "answer it where its turn runs"
                    )
                self._early[request_id] = decision
                return
            ask.answer = decision
            ask.done.set()

    def _release(self, session: str | None) -> None:
        """Unblock waiting askers (of one session, or all) with no answer."""
        with self._lock:
            for ask in list(self._asks.values()):
                if session is None or ask.session == session:
                    ask.answer = None
                    ask.done.set()

    # -- actions ------------------------------------------------------------------------------

    def start_task(
        self,
        *,
        task: str,
        workspace: str,
        model: str,
        allow_commands: Sequence[str] = (),
        sandbox: SandboxMode | None = None,
        network: bool = False,
    ) -> SessionInfo:
        """Create a session in `workspace` and run `task` as its first turn in the background;
        commands matching `allow_commands` (shell-style patterns) run without asking, and so do
        commands confined by `sandbox` (default workspace-write)."""
        check_task(task)
        patterns = tuple(dict.fromkeys(p.strip() for p in allow_commands if p.strip()))
        host = self.host(model)
        host.policy = replace(host.policy, allow_commands=(*host.policy.allow_commands, *patterns))
        if sandbox is not None or network:
            host.policy = replace(
                host.policy, sandbox=sandbox or host.policy.sandbox, network=network
            )
        try:
            info = new_session(self.store, task=task, workspace=workspace, model=model)
        except BaseException:  # undone, then re-raised: Ctrl-C and exits too
            self._drop(host)
            raise
        self._spawn(info.id, host, lambda: start_turn(host, info, task))
        return info

    def follow_up(self, session: str, task: str, model: str | None = None) -> None:
        """Run `task` as a new turn of an idle session."""
        check_task(task)
        info = self.store.session(session)
        self._settle(info)
        state = self._state(info)
        if state == "open":
            raise ConfigError(
                f"session {info.id} has an unfinished turn; stop, resume or recover it first"
            )
        host, info = self._continuing(info, model, new_turn=True)
        self._spawn(info.id, host, lambda: start_turn(host, info, task))

    def resume(self, session: str, model: str | None = None) -> str:
        """Resume a stopped or suspended turn, or recover a crashed one; returns which."""
        info = self.store.session(session)
        self._settle(info)
        if self.running_here(info.id):
            raise ConfigError(f"session {info.id} is already running in this UI")
        if needs_recovery(self.store, info):
            # Pressed by the user: an imported or forked session is continued too.
            host, info = self._continuing(info, model)
            self._spawn(info.id, host, lambda: recover_session(host, info))
            return "recover"
        state = self._state(info)
        ended = fold_longrun(self.store.read(info.id, kinds=("turn_started", "turn_ended")))
        if not resumable(state, ended.end_cause):
            raise ConfigError(
                f"session {info.id} has no stopped or suspended turn to resume (it is {state})"
            )
        host, info = self._continuing(info, model)
        self._spawn(info.id, host, lambda: resume_turn(host, info))
        return "resume"

    def compact(self, session: str) -> str:
        """Build a compaction checkpoint now, in the background (as `bubu compact` does)."""
        from bubu.engine.compacting import compact_now

        info = self.store.session(session)
        self._settle(info)
        if self.running_here(info.id) or self._state(info) == "running":
            raise ConfigError(f"session {info.id} is running; compact it once its turn ends")
        host, info = self._continuing(info, None)

        def work() -> None:
            with host.runner_for(info) as runner:
                compact_now(runner)

        self._spawn(info.id, host, work)
        return "compact"

    def stop(self, session: str) -> None:
        """Stop the session's running turn (it ends `stopped`; resume continues it), here or in
        whichever process runs it (that runner sees the request within a second)."""
        host = self._host_running(session)
        if host is not None and host.runner is not None:
            host.runner.request_stop("stopped")
            self._release(session)
            return
        if self.store.request_stop(session) is None:
            raise ConfigError(f"no turn of session {session} is running; there is nothing to stop")

    def _state(self, info: SessionInfo) -> str:
        return readview.status(self.store, info.id).state

    def _continuing(
        self, info: SessionInfo, model: str | None, *, new_turn: bool = False
    ) -> tuple[Host, SessionInfo]:
        """A host for another run of `info` with the settings its latest turn recorded (a model
        chosen on the page replaces them), and the session as its chain records it."""
        acting, facts = acting_info(self.store, info)
        if not Path(acting.workspace).is_dir():
            raise ConfigError(
                f"the workspace {acting.workspace} of session {acting.id} is not a directory "
                "on this machine; restore it to continue the session"
            )
        note = last_turn(self.store, acting.id)
        if facts.origin == "import":
            imported_server(note, acting.id)
        chosen = model or (note.model if note is not None else None) or acting.model
        if not chosen:
            raise ConfigError(f"session {info.id} has no model recorded; give a model spec")
        host = self.host(chosen, recorded=note, new_turn=new_turn)
        try:
            host.check_integrity(acting.id)  # refused here, in the request, with the reason
        except BubuError:
            self._drop(host)
            raise
        return host, acting

    def _spawn(self, session: str, host: Host, work: Callable[[], object]) -> None:
        with self._lock:
            running = self._threads.get(session)
            if self._closing or (running is not None and running.is_alive()):
                self._drop(host)
                raise ConfigError(
                    "the UI is shutting down"
                    if self._closing
                    else f"session {session} is already running in this UI"
                )
            self._errors.pop(session, None)
            self._live[session] = Live(activity="starting")
            thread = threading.Thread(
                target=self._job, args=(session, host, work), name=f"bubu-ui-{session}", daemon=True
            )
            self._threads[session] = thread
            thread.start()

    def _job(self, session: str, host: Host, work: Callable[[], object]) -> None:
        try:
            work()
        except BubuError as e:
            with self._lock:
                self._errors[session] = str(e)
        except Exception as e:  # a bug must not vanish with its thread: show it on the page
            log.exception("a UI run of %s failed", session)
            with self._lock:
                self._errors[session] = f"the run failed unexpectedly: {type(e).__name__}: {e}"
        finally:
            self._drop(host)
            with self._lock:
                self._live.pop(session, None)

    # -- start-up recovery and shutdown ---------------------------------------------------------

    def recover_at_start(self) -> threading.Thread:
        """Continue, in the background, the sessions whose runner died on this host (each with
        its own recorded settings), as `bubu run` does; the rest are left alone, and an imported
        or forked one is only logged (the page's Resume button continues it)."""

        def work() -> None:
            try:
                found = scan(self.store)
            except Exception:  # logged: a failed look must not stop the page
                log.exception("start-up recovery could not look at the sessions")
                return
            for f in found:
                sid = f.session.id
                if f.verdict != "recover":
                    log.warning("%s", f.advice())
                    continue
                try:
                    host, info = self._continuing(f.session, None)
                except Exception as e:  # one bad session must not stop the others
                    log.warning("could not recover session %s: %s", sid, e)
                    continue
                try:
                    recover_session(host, info)
                except BubuError as e:
                    log.warning("could not recover session %s: %s", sid, e)
                except Exception:  # logged: one bad session must not stop the others
                    log.exception("the recovery of session %s failed", sid)
                finally:
                    self._drop(host)

        thread = threading.Thread(target=work, name="bubu-ui-recovery", daemon=True)
        with self._lock:
            self._recovery = thread
        thread.start()
        return thread

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Suspend every turn this UI runs (flushing their ends) and wait for the threads."""
        import time

        with self._lock:
            self._closing = True
            hosts = list(self._hosts)
            threads = [*self._threads.values(), *([self._recovery] if self._recovery else [])]
        for h in hosts:
            if h.runner is not None:
                h.runner.request_stop("suspended")
        self._release(None)
        deadline = time.monotonic() + timeout_s
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))


__all__ = ["HostFactory", "Live", "RunManager", "default_host"]
