"""Who may continue a crashed session by itself: only a runner that died on this host.

`bubu run` and `bubu ui` continue, without being asked, a session whose turn is open, whose lease
nobody live holds, whose last run ran on this machine in a process that is gone, and which was
neither imported nor forked. Everything else is left to its own runner (another machine, a live
process) or to the user (`bubu recover SESSION`). A process id can be reused: where the system
tells a process's start time, a run records it, and a live pid that started at another time is
not the run's process.
"""

from __future__ import annotations

import os
from collections.abc import Container
from pathlib import Path
from typing import Literal

import msgspec

from bubu.engine.settings import last_turn, server_unknown
from bubu.events import RunStarted, SystemNote
from bubu.log import readview
from bubu.log.store import Lease, SessionInfo, Store
from bubu.projections.origin import FACT_KINDS, SessionFacts, fold_facts


def _hostname() -> str:
    import socket  # only when a lease or a run is checked

    return socket.gethostname()


_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (field 3 on), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ")".
    return stat[stat.rfind(")") + 2 :].split()


def proc_start(pid: int) -> str | None:
    """When process `pid` started, as ``BOOT_ID:TICKS`` (Linux), or None where unknown."""
    fields = _stat(pid)
    try:
        boot = _BOOT_ID.read_text().strip()
    except OSError:
        return None
    return f"{boot}:{fields[19]}" if fields is not None and len(fields) > 19 else None


def pid_alive(pid: int, started: str | None = None) -> bool:
    """Whether process `pid` of this host is running (and, given `started`, is that process);
    a zombie, dead but not yet reaped by its parent, is not."""
    if pid == os.getpid():
        return started is None or started == proc_start(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    fields = _stat(pid)
    if fields is not None and fields[0] in ("Z", "X"):
        return False
    if started is not None:
        now = proc_start(pid)
        return now is None or now == started
    return True


def lease_is_stale(lease: Lease | None, now_ms: int) -> bool:
    """True when nobody holds the lease: never taken, released, expired, or its process (on
    this host) is dead."""
    if lease is None or not lease.owner or lease.expires_ms <= now_ms:
        return True
    host, _, rest = lease.owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host == _hostname() and pid_text.isdigit():
        return not pid_alive(int(pid_text))
    return False


def session_free(store: Store, session: str) -> bool:
    """True when no live runner holds `session`'s lease (see `lease_is_stale`)."""
    return lease_is_stale(store.current_lease(session), store.now_ms())


def holder_gone(store: Store, session: str, lease: Lease | None) -> bool:
    """`lease_is_stale`, and also when the lease's process on this host is another one now (its
    pid reused): the run that took the lease recorded when its process started."""
    if lease_is_stale(lease, store.now_ms()):
        return True
    assert lease is not None
    if lease.owner.partition(":")[0] != _hostname():
        return False
    for r in reversed(store.read(session, kinds=("run_started",))):
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, RunStarted):
            n = c.note
            if n.owner != lease.owner:
                return False
            return n.pid is not None and not pid_alive(n.pid, n.proc_start)
    return False


def session_facts(store: Store, info: SessionInfo) -> SessionFacts:
    """The session's own facts from its chain (its header's for a legacy session)."""
    return fold_facts(
        store.read(info.id, kinds=FACT_KINDS),
        workspace=info.workspace,
        title=info.title,
        model=info.model,
        first=next(iter(store.read(info.id, upto=1)), None),
    )


def acting_info(store: Store, info: SessionInfo) -> tuple[SessionInfo, SessionFacts]:
    """`info` with the workspace, title and model its chain records: what a run acts on."""
    facts = session_facts(store, info)
    chained = msgspec.structs.replace(
        info, workspace=facts.workspace, title=facts.title, model=facts.model
    )
    return chained, facts


Verdict = Literal[
    "recover",
    "running",
    "idle",
    "elsewhere",
    "adopted",
    "no_workspace",
    "no_server",
    "error",
    "child",
]
"""``recover``: continue it now. ``adopted`` (imported or forked), ``no_workspace``,
``no_server`` (an older Bubu did not record the model's server) and ``error``: leave it to the
user, and say so. ``child``: a sub-agent, continued by its parent's recovery. The rest: not ours
to continue, nothing to say."""


class Found(msgspec.Struct, frozen=True, kw_only=True):
    """What start-up makes of one session, and why."""

    session: SessionInfo
    verdict: Verdict
    reason: str = ""

    def advice(self) -> str:
        """One line for a session that is left to the user: what it is and how to continue it."""
        sid = self.session.id
        if self.verdict == "adopted":
            return (
                f"session {sid} has an unfinished turn but was {self.reason}; it is not "
                f"continued by itself: `bubu recover {sid}` (or Resume in the UI) continues it"
            )
        if self.verdict == "no_server":
            return (
                f"session {sid} has an unfinished turn, but {self.reason}; "
                f"`bubu recover {sid} --base-url URL` continues it"
            )
        if self.verdict == "no_workspace":
            return f"session {sid} has an unfinished turn, but {self.reason}; it is left as it is"
        return f"could not look at session {sid} for recovery: {self.reason}"


def classify(store: Store, info: SessionInfo) -> Found:
    """Whether this host should continue `info` by itself (verdict ``recover``), and if not why."""
    if readview.status(store, info.id).state != "open":
        return Found(session=info, verdict="idle")
    if not holder_gone(store, info.id, store.current_lease(info.id)):
        return Found(session=info, verdict="running")
    acting, facts = acting_info(store, info)
    if facts.parent is not None:
        return Found(session=acting, verdict="child", reason=f"a sub-agent of {facts.parent}")
    if facts.adopted:
        return Found(session=acting, verdict="adopted", reason=facts.describe())
    run = next(
        (
            c.note
            for r in reversed(store.read(info.id, kinds=("run_started",)))
            if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, RunStarted)
        ),
        None,
    )
    if run is None or run.host != _hostname() or run.pid is None:
        where = run.host if run is not None and run.host else "an unknown host"
        return Found(session=acting, verdict="elsewhere", reason=f"its last run was on {where}")
    if pid_alive(run.pid, run.proc_start):
        return Found(session=acting, verdict="running", reason=f"process {run.pid} still runs")
    if not Path(acting.workspace).is_dir():
        return Found(
            session=acting,
            verdict="no_workspace",
            reason=f"its workspace {acting.workspace} is not a directory",
        )
    note = last_turn(store, info.id)
    if note is not None and server_unknown(note):
        return Found(
            session=acting,
            verdict="no_server",
            reason=f"an older Bubu did not record which server {note.model} was asked",
        )
    return Found(session=acting, verdict="recover")


def scan(store: Store, *, skip: Container[str] = ()) -> list[Found]:
    """What start-up makes of every session but `skip` (quiet verdicts left out); a session that
    cannot even be looked at is an ``error``, never an exception."""
    found = []
    for info in store.sessions():
        if info.id in skip:
            continue
        try:
            f = classify(store, info)
        except Exception as e:  # one bad session must not stop the look at the others
            f = Found(session=info, verdict="error", reason=f"{type(e).__name__}: {e}")
        if f.verdict not in ("idle", "running", "elsewhere", "child"):
            found.append(f)
    return found


__all__ = [
    "Found",
    "Verdict",
    "acting_info",
    "classify",
    "holder_gone",
    "lease_is_stale",
    "pid_alive",
    "proc_start",
    "scan",
    "session_facts",
]
