"""Applying the recovery plan: facts first, then the notice, then a new run with no new input."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import msgspec

from bubu import failpoints
from bubu.engine import reload
from bubu.engine.driver import Runner
from bubu.engine.leftovers import Leftovers, stop_leftovers
from bubu.engine.memory import workspace_memory
from bubu.engine.reload import RunnerFolds
from bubu.engine.rewind import Plan as RewindPlan
from bubu.engine.rewind import finish, plan_of, rewind_tools
from bubu.engine.scope import acting_info, holder_gone, lease_is_stale
from bubu.engine.session import Host
from bubu.engine.snapshots import WorkspaceChange, change_since
from bubu.errors import BubuError, LeaseError
from bubu.events import (
    Actions,
    BlobRef,
    Event,
    FunctionResponse,
    RecoveryNotice,
    ToolRecovery,
    TurnEndReason,
    WorkspaceSnapshot,
)
from bubu.log import readview
from bubu.log.store import SessionInfo, Store
from bubu.projections.memory import (
    MEMORY_PREFIX,
    Note,
    is_memory_path,
    note_hash,
)
from bubu.projections.recovery import (
    INTERRUPTED,
    CallPlan,
    Integrity,
    Plan,
    Rewinding,
    forced_plan,
    label,
    paths_to_observe,
    plan_recovery,
)
from bubu.projections.turn import CallState
from bubu.snapshot import refs
from bubu.snapshot.take import snapshots_enabled, snapshotter
from bubu.toolfacts import facts_of
from bubu.tools.patch import companions

Outcome = TurnEndReason | Literal["blocked", "busy", "nothing"] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovered:
    """What recovering one session did."""

    session: str
    plan: Plan
    outcome: Outcome


def needs_recovery(store: Store, info: SessionInfo) -> bool:
    """An open turn whose runner is gone (and that is not already blocked)."""
    st = readview.status(store, info.id)
    if st.state != "open":
        return False
    return holder_gone(store, info.id, store.current_lease(info.id))


def forceable(store: Store, info: SessionInfo) -> bool:
    """A blocked session whose runner is gone: what `bubu recover --force` may continue."""
    st = readview.status(store, info.id)
    return st.state == "blocked" and holder_gone(store, info.id, store.current_lease(info.id))


def observe(
    paths: list[str],
    workspace: str | None = None,
    memory: Callable[[], dict[str, Note]] | None = None,
) -> dict[str, str | None]:
    """The sha-256 of each file now (None when it does not exist), opened beneath `workspace`;
    a ``memory:KEY`` path is the workspace's note of that key, hashed from the memory
    projection, never a file on disk."""
    from bubu.tools.files import file_sha256, sha256_beneath

    notes = memory() if memory is not None and any(map(is_memory_path, paths)) else {}

    def one(p: str) -> str | None:
        if is_memory_path(p):
            return note_hash(notes, p.removeprefix(MEMORY_PREFIX))
        return file_sha256(p) if workspace is None else sha256_beneath(workspace, p)

    return {p: one(p) for p in paths}


SCAN_CHUNK = 2_000
"""Records decoded at a time when recovery streams the log through its checks."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Prefix:
    """What the recovery plan needs of the whole committed prefix, beyond the turn's fold."""

    integrity: Integrity
    """The checks of every outcome and recovery fact against the calls and dispatches before."""
    rewinding: RewindPlan | None
    """The open turn's rewind plan (`unfinished`), or None."""
    snapshots: dict[int, WorkspaceSnapshot | None]
    """The last workspace snapshot at or before each of the given dispatch seqs."""

    @classmethod
    def of(cls, state: RunnerFolds, dispatch_seqs: Iterable[int]) -> Prefix:
        """What the runner's folds (`reload.RunnerFolds`) hold of it."""
        return cls(
            integrity=state.integrity,
            rewinding=plan_of(state.rewinding),
            snapshots=state.snapshots.at(dispatch_seqs),
        )


def scan_prefix(
    store: Store,
    session: str,
    upto: int,
    dispatch_seqs: Iterable[int],
    *,
    chunk: int = SCAN_CHUNK,
) -> Prefix:
    """Stream the records 1..`upto` through recovery's checks, `chunk` records at a time: the
    same answers as `_integrity`, `unfinished` and `snapshot_before` of the whole list, without
    holding the decoded log in memory."""
    integrity, rewind, snaps = Integrity(), Rewinding(), refs.SnapshotsBefore(dispatch_seqs)
    for after in range(0, upto, chunk):
        for r in store.read(session, after=after, upto=min(after + chunk, upto)):
            integrity.apply(r)
            rewind.apply(r)
            snaps.apply(r)
    return Prefix(integrity=integrity, rewinding=plan_of(rewind), snapshots=snaps.at())


def recover_session(
    host: Host,
    info: SessionInfo,
    *,
    continue_turn: bool = True,
    force: bool = False,
    workspace: str | None = None,
) -> Recovered:
    """Take the lease, plan, commit the recovery facts and the notice, then continue the turn.

    With `force`, a blocked plan gives way to `forced_plan` (the user looked and said so). With
    `workspace`, the turn continues there (a fleet worker's own copy) instead of where its chain
    says."""
    store = host.store
    current = store.current_lease(info.id)
    steal = holder_gone(store, info.id, current)
    try:
        # Steal only the lease judged dead: another recoverer may have taken it since.
        lease = store.acquire_lease(
            info.id,
            host.owner,
            host.config.lease_ttl_s,
            steal=steal,
            steal_epoch=current.epoch if current is not None else 0,
        )
    except LeaseError:
        return Recovered(session=info.id, plan=Plan(kind="nothing"), outcome="busy")
    try:
        # Before any result is written: nothing of the dead run may still be acting on the world.
        # Only an open turn has a dead run (a closed one may have a live runner's background jobs).
        st = readview.status(store, info.id)
        leftovers = stop_leftovers(info.id) if st.state == "open" else Leftovers()
        # The runner state's snapshot and the records after it, which must verify from its
        # digest: the turn's fold and the checks of the whole prefix (integrity, an unfinished
        # rewind, the workspace before each dangling dispatch) without reading the log again.
        state, _, report = reload.continuable(store, info.id, host.config.context)
        turn = state.turn
        host.adopt_turn_tools(turn)
        prefix = Prefix.of(state, [c.dispatch_seq for c in turn.dangling if c.dispatch_seq])
        rewinding = prefix.rewinding  # a rewind's turn ends with its plan, never a model call
        tools = host.tools if rewinding is None else rewind_tools(host.tools, store)
        effects = {name: t.effect for name, t in {**companions(tools), **tools}.items()}
        plan = plan_recovery(
            (),
            effects,
            observe(
                paths_to_observe((), turn=turn),
                info.workspace,
                lambda: workspace_memory(store, info.workspace),
            ),
            chain_problem=None if report.ok else report.problem,
            turn=turn,
            integrity=prefix.integrity,
        )
        if plan.kind == "nothing":
            return Recovered(session=info.id, plan=plan, outcome="nothing")
        if plan.kind == "blocked" and force:
            plan = forced_plan((), plan, turn=turn)
        # The workspace the chain records, never the header's (an export can edit the header).
        acting, facts = acting_info(store, info)
        if workspace is not None:
            acting = msgspec.structs.replace(acting, workspace=workspace)
        if facts.origin == "import":
            plan = _not_on_an_imports_word(plan)
        changes = _changes(store, acting.workspace, prefix.snapshots, plan)
        runner = Runner(
            store=store,
            session=acting,
            provider=host.provider,
            tools=tools,
            lease=lease,
            policy=host.policy,
            asker=host.asker,
            observer=host.observer,
            config=host.config,
            prompt=host.prompt,
        )
        host.runner = runner
        runner.start_run("recovery")
        if plan.kind == "blocked":
            runner.append(
                [
                    runner.note(
                        RecoveryNotice(
                            status="blocked",
                            reason=plan.reason,
                            leftovers=leftovers.lines(lambda c: _label_of(runner, c)),
                        )
                    )
                ],
                durable=True,
            )
            return Recovered(session=info.id, plan=plan, outcome="blocked")

        def apply() -> None:
            _apply(runner, plan, leftovers, changes)
            failpoints.hit("mid_recovery")
            notice = _notice(plan, runner, leftovers, changes)
            runner.append([runner.note(notice)], durable=True)
            if rewinding is not None:
                finish(runner, rewinding)

        outcome = runner.drive(apply, continue_turn=continue_turn and rewinding is None)
        if rewinding is not None:
            outcome = runner.turn.end_reason
        return Recovered(session=info.id, plan=plan, outcome=outcome)
    finally:
        held = host.runner.lease if host.runner is not None else lease
        host.runner = None
        with contextlib.suppress(BubuError):
            store.release_lease(held)


def _not_on_an_imports_word(plan: Plan) -> Plan:
    """An imported log proves nothing about this machine's files: a write it says is unapplied
    is not written again silently, it is left for review like a command."""
    calls = tuple(
        msgspec.structs.replace(
            c, decision="interrupted", reason="an imported log's write is not re-run"
        )
        if c.effect == "provable_write" and c.decision == "rerun_not_applied"
        else c
        for c in plan.calls
    )
    return msgspec.structs.replace(plan, calls=calls)


def _changes(
    store: Store,
    workspace: str,
    before: Mapping[int, WorkspaceSnapshot | None],
    plan: Plan,
) -> dict[str, WorkspaceChange]:
    """For each dangling call that may have changed the workspace: the workspace now against
    the snapshot taken at its dispatch (`before`: the last snapshot at or before each dangling
    dispatch's seq; the dead run's processes are already stopped)."""
    changing = [c for c in plan.calls if c.effect != "read_only"]
    if plan.kind != "ready" or not changing or not snapshots_enabled():
        return {}
    now = snapshotter(store, workspace).take()
    out: dict[str, WorkspaceChange] = {}
    for cp in changing:
        change = change_since(store, before.get(cp.dispatch_seq), now)
        if change is not None:
            out[cp.call_id] = change
    return out


def _notice(
    plan: Plan,
    runner: Runner,
    leftovers: Leftovers,
    changes: Mapping[str, WorkspaceChange] | None = None,
) -> RecoveryNotice:
    """The notice names every recovery decision committed since the last notice: this plan's, and
    those of an earlier recovery that died before it could show its own."""
    labels: dict[str, list[str]] = {"silent": [], "applied": [], "review": []}
    seen: set[str] = set()
    for fact in runner.turn.unnoticed:
        if fact.call_id in seen:
            continue
        seen.add(fact.call_id)
        call = runner.turn.calls.get(fact.call_id)
        name = label(call.name, call.arguments) if call is not None else fact.tool
        group = {
            "rerun": "silent",
            "rerun_not_applied": "silent",
            "applied": "applied",
            "resume": "silent",
        }
        labels[group.get(fact.decision, "review")].append(name)
    return RecoveryNotice(
        status="ready",
        silent_retries=labels["silent"],
        verified_applied=labels["applied"],
        pending_review=labels["review"],
        dropped_model_calls=plan.dropped_model_calls,
        leftovers=leftovers.lines(lambda c: _label_of(runner, c)) + runner.lost_processes,
        forced=plan.reason if plan.forced else None,
        workspace_changes=[
            f"{_label_of(runner, cid)}: {c.line()}"
            for cid, change in (changes or {}).items()
            for c in change.changed
        ],
    )


def _label_of(runner: Runner, call_id: str) -> str:
    call = runner.turn.calls.get(call_id)
    return call_id if call is None else label(call.name, call.arguments)


def _apply(
    runner: Runner,
    plan: Plan,
    leftovers: Leftovers,
    changes: Mapping[str, WorkspaceChange] | None = None,
) -> None:
    """Commit facts and outcomes: proven outcomes in one transaction, re-runs after their fact.
    An interrupted call's result says what its snapshots show it changed (`changes`)."""
    changes = changes or {}
    calls = runner.turn.calls
    from bubu.tools.files import remove_stray_temp_files

    for cp in plan.calls:
        d = calls[cp.call_id].dispatch
        if (
            cp.effect == "provable_write"
            and d is not None
            and d.path
            and not is_memory_path(d.path)
        ):
            # A kill inside atomic_write leaves its temporary file in the user's workspace.
            remove_stray_temp_files(runner.session.workspace, d.path)
    settled: list[Event] = []
    blobs: list[bytes] = []
    reruns: list[tuple[CallPlan, CallState]] = []
    for cp in plan.calls:
        call = calls[cp.call_id]
        change = changes.get(cp.call_id)
        d = call.dispatch
        reason = cp.reason
        if change is not None and cp.effect == "provable_write" and cp.decision != "interrupted":
            # Proven against the whole workspace, not only the target file.
            target = _relative(runner.session.workspace, d.path if d is not None else None)
            reason = f"{cp.reason}. {change.sentence(skip=target)}"
        fact = runner.event(
            "system",
            "system",
            actions=Actions(
                tool_recovery=ToolRecovery(
                    call_id=cp.call_id,
                    tool=cp.tool,
                    decision=cp.decision,
                    reason=reason,
                    dispatch_seq=cp.dispatch_seq,
                )
            ),
            invocation=call.invocation,
        )
        settled.append(fact)
        if cp.decision == "applied":
            settled.append(
                _response(
                    runner,
                    call,
                    f"{cp.tool} was applied before the crash: {reason.rstrip('.')}.",
                    False,
                )
            )
        elif cp.decision == "interrupted":
            is_command = facts_of(cp.tool).command is not None
            said = leftovers.sentence(cp.call_id) if is_command else ""
            if change is None:
                settled.append(_response(runner, call, INTERRUPTED + said, True))
            else:
                text, whole, ref = change.result(INTERRUPTED + said)
                if whole is not None:
                    blobs.append(whole)
                settled.append(_response(runner, call, text, True, snapshot=change.now, blob=ref))
        else:
            reruns.append((cp, call))
    if settled:
        runner.append(settled, durable=True, blobs=blobs)
    if not reruns:
        return
    ready = []
    for cp, call in reruns:
        tool = runner.tools.get(cp.tool)
        ctx = runner.tool_calls.context_for(
            call, outside_allowed=call.decision is not None and call.decision.decision == "allow"
        )
        intent = None
        if tool is not None and tool.effect == "provable_write":
            try:
                intent = tool.prepare(call.arguments, ctx)
            except BubuError as e:
                runner.append([_response(runner, call, f"{INTERRUPTED} ({e})", True)])
                continue
            d = call.dispatch
            if d is None or intent is None or intent.after_sha256 != d.after_sha256:
                runner.append([_response(runner, call, INTERRUPTED, True)])
                continue
        if tool is None:
            runner.append([_response(runner, call, INTERRUPTED, True)])
            continue
        ready.append((call, tool, ctx, intent))
    if ready:
        runner.tool_calls.execute(ready)


def _response(
    runner: Runner,
    call: CallState,
    text: str,
    is_error: bool,
    *,
    snapshot: WorkspaceSnapshot | None = None,
    blob: BlobRef | None = None,
) -> Event:
    return runner.event(
        "tool",
        "tool",
        FunctionResponse(
            call_id=call.call_id,
            name=call.name,
            result=text,
            is_error=is_error,
            snapshot=snapshot,
            blob=blob,
        ),
        invocation=call.invocation,
        status="failed" if is_error else "completed",
    )


def _relative(workspace: str, path: str | None) -> str | None:
    """A dispatch's target as a snapshot names it (relative to the workspace)."""
    if path is None:
        return None
    import os

    real, root = os.path.realpath(path), os.path.realpath(workspace)
    return os.path.relpath(real, root) if real.startswith(root + os.sep) else None


__all__ = [
    "Outcome",
    "Prefix",
    "Recovered",
    "lease_is_stale",
    "needs_recovery",
    "observe",
    "recover_session",
    "scan_prefix",
]
