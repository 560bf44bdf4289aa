"""Rewind: put a session's files back as they were at a seq and fork its log there, as one
recorded, crash-safe operation.

`preview` says, for each file Bubu changed after SEQ (`bubu.projections.rewind`), what will
happen to it:

- ``restore``: put back its content at SEQ (kept in the blob store by the write that changed it);
- ``delete``: it was created after SEQ (a fork with ``--restore-files`` keeps it: ``keep``);
- ``unchanged``: it already is as it was at SEQ;
- ``changed``: its hash now is not what Bubu's last write left, so someone else (a person, a
  command) changed it since: not overwritten unless the user names it (``--force-file``);
- ``cannot``: its earlier content was not kept (over `KEEP_MAX_BYTES`, a secret in it, an older
  Bubu), it lies outside the workspace, or it is a protected path.

Commands run after SEQ are listed: their effects cannot be undone.

`rewind` then records, in the rewound session, a turn of the host's own: a plan event first
(which files, the fork's id), each restore as a provable write (`bubu.tools.restore`: a call, a
dispatch with the hashes and the kept content, an outcome), then the fork (`fork_session` under
the id the plan named), then the turn's end. A crash at any point leaves an open turn that
recovery handles like any other (`bubu.engine.recovery`): dangling restores are proven applied,
re-run or reported by the usual rules, and `finish` then does what the plan still lacks.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from bubu import clock, failpoints, ids
from bubu.engine.driver import Runner, owner_id
from bubu.engine.keep import KEEP_MAX_BYTES, kept_before
from bubu.engine.scope import acting_info, holder_gone
from bubu.errors import (
    BubuError,
    ConfigError,
    CorruptLog,
    LeaseError,
    ToolError,
    UnknownSession,
)
from bubu.events import (
    Actions,
    FunctionCall,
    Info,
    Record,
    SystemNote,
    ToolDispatch,
    TurnStarted,
    make,
)
from bubu.log import codec, readview
from bubu.log.store import SessionInfo, Store
from bubu.projections.recovery import REWIND_KEY, Rewinding
from bubu.projections.rewind import Command, FileChange, boundaries, shown_boundaries, since
from bubu.providers.base import DeltaSink, ModelRequest, ModelResponse
from bubu.snapshot import refs, tree
from bubu.tools.base import Tool, ToolResult
from bubu.tools.restore import ABSENT, NAME, restore_tool

Action = Literal["restore", "delete", "keep", "unchanged", "changed", "cannot"]
ACTS: frozenset[str] = frozenset({"restore", "delete"})
"""The actions that write (the others leave the file as it is)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FileStep:
    """What a rewind does with one file, and why."""

    path: str
    """Relative to the workspace (absolute when outside it)."""
    action: Action
    reason: str
    sha256: str | None = None
    """The content to put back (restore), or None."""
    now: str | None = None
    """The file's hash now (None: absent)."""
    mode: int | None = None
    """The permission bits to restore (from a snapshot), or None."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Preview:
    """What a rewind of `session` to `to` will do."""

    session: str
    workspace: str
    to: int
    delete: bool
    files: tuple[FileStep, ...]
    commands: tuple[Command, ...]
    snapshots: bool = False
    """The workspace snapshots cover the span, so what commands changed is among `files`."""

    @property
    def writes(self) -> list[FileStep]:
        """The steps that change a file."""
        return [f for f in self.files if f.action in ACTS]

    @property
    def changed(self) -> list[FileStep]:
        """Files changed since Bubu's last write, left alone unless named."""
        return [f for f in self.files if f.action == "changed"]

    def lines(self) -> list[str]:
        """The preview for people, one line each."""
        out = [f"rewind {self.session} to seq {self.to} in {self.workspace}:"]
        if not self.files:
            out.append("  no file was changed by Bubu after that seq")
        for f in self.files:
            out.append(f"  {f.action:<9} {f.path}: {f.reason}")
        if self.commands and self.snapshots:
            out.append(
                f"  {len(self.commands)} command(s) ran after seq {self.to}; what they changed in "
                "the workspace is listed above (from its snapshots):"
            )
            out.extend(f"    seq {c.seq}: {c.label}" for c in self.commands)
        elif self.commands:
            out.append(
                f"  {len(self.commands)} command(s) ran after seq {self.to}; their effects "
                "cannot be undone (inspect the workspace):"
            )
            out.extend(f"    seq {c.seq}: {c.label}" for c in self.commands)
        return out

    @property
    def token(self) -> str:
        """A digest of the preview: a rewind carries out only the preview the user saw."""
        return codec.args_digest(self._body())[:16]

    def to_json(self) -> dict[str, object]:
        """The preview as stable JSON."""
        return {**self._body(), "token": self.token}

    def _body(self) -> dict[str, object]:
        return {
            "session": self.session,
            "workspace": self.workspace,
            "to": self.to,
            "deletes": self.delete,
            "files": [
                {
                    "path": f.path,
                    "action": f.action,
                    "reason": f.reason,
                    "sha256": f.sha256,
                    "now": f.now,
                }
                for f in self.files
            ],
            "commands": [{"seq": c.seq, "label": c.label} for c in self.commands],
            "commands_note": (
                None
                if not self.commands
                else "what commands changed in the workspace is among the files"
                if self.snapshots
                else "commands' effects cannot be undone"
            ),
        }


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """One restore of a recorded plan."""

    call: str
    path: str
    sha256: str | None = None
    expect: str | None = None
    """The file's hash when previewed (`ABSENT`: no file)."""
    mode: int | None = None


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """A rewind's plan as its plan event records it."""

    to: int
    fork: str
    delete: bool
    steps: list[Step]
    skipped: list[str] = msgspec.field(default_factory=list)
    commands: list[str] = msgspec.field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class Done:
    """What a rewind did."""

    session: str
    fork: str
    to: int
    results: list[tuple[str, str, bool]] = field(default_factory=list)
    """(path, what the restore said, whether it failed) per restore."""

    def to_json(self) -> dict[str, object]:
        """As stable JSON."""
        return {
            "session": self.session,
            "fork": self.fork,
            "to": self.to,
            "restores": [{"path": p, "result": t, "ok": not e} for p, t, e in self.results],
        }


# ---- preview ------------------------------------------------------------------------------------


def _shown(workspace: str, path: str) -> str | None:
    """`path` relative to the workspace, or None when it lies outside."""
    root = os.path.realpath(workspace)
    if path == root or not path.startswith(root.rstrip(os.sep) + os.sep):
        return None
    return os.path.relpath(path, root)


def _step(
    store: Store, workspace: str, fc: FileChange, to: int, *, delete: bool, forced: bool
) -> FileStep:
    from pathlib import Path

    from bubu.tools.base import ToolContext
    from bubu.tools.files import UNREACHABLE, sha256_beneath
    from bubu.tools.protected import write_reason

    rel = _shown(workspace, fc.path)
    if rel is None:
        return FileStep(
            path=fc.path, action="cannot", reason="outside the workspace; restore it by hand"
        )
    # The same judgement restore_file makes: by name, by the directory it is in, by the place.
    why = write_reason(ToolContext(workspace=Path(workspace)), fc.path)
    if why is not None:
        shown = why.removeprefix(f"{rel} is ").removeprefix(f"{fc.path} is ")
        return FileStep(path=rel, action="cannot", reason=f"{shown}; restore it by hand")
    now = sha256_beneath(workspace, fc.path)
    if now is not None and (now == UNREACHABLE or now.startswith("unreadable")):
        return FileStep(path=rel, action="cannot", reason=f"{now}; not touched")
    if now == fc.at_seq:
        return FileStep(
            path=rel, action="unchanged", reason=f"already as it was at seq {to}", now=now
        )
    if now != fc.last_after and not forced:
        left = "deleted it" if fc.last_after is None else f"left {fc.last_after[:12]}"
        found = "it is gone" if now is None else f"it is {now[:12]} now"
        by = (
            " (a command ran after that write; its effect cannot be undone)"
            if fc.command_after
            else ""
        )
        return FileStep(
            path=rel,
            action="changed",
            now=now,
            reason=f"changed since Bubu's last write (Bubu {left}, {found}){by}; not overwritten "
            "without asking (--force-file to overwrite it)",
        )
    over = "; changed since Bubu's last write, overwritten as asked" if now != fc.last_after else ""
    if fc.at_seq is None:
        if not delete:
            return FileStep(
                path=rel,
                action="keep",
                now=now,
                reason=f"created after seq {to}; a fork with --restore-files deletes nothing",
            )
        return FileStep(path=rel, action="delete", now=now, reason=f"created after seq {to}{over}")
    if fc.link:
        return FileStep(
            path=rel,
            action="cannot",
            now=now,
            reason="a symbolic link at the seq or since; restore it by hand",
        )
    if store.blob(fc.at_seq) is None and store.missing_objects([fc.at_seq]):
        return FileStep(
            path=rel,
            action="cannot",
            now=now,
            reason=f"its content at seq {to} ({fc.at_seq[:12]}) was not kept (over "
            f"{KEEP_MAX_BYTES // (1024 * 1024)} MiB, holding a secret, or written by an "
            "older Bubu)",
        )
    return FileStep(
        path=rel,
        action="restore",
        sha256=fc.at_seq,
        now=now,
        mode=fc.mode,
        reason=f"back to its content at seq {to} ({fc.at_seq[:12]}){over}",
    )


def _check_session(store: Store, info: SessionInfo) -> None:
    """Refuse a session that is running or has an unfinished turn (other than a rewind)."""
    st = readview.status(store, info.id)
    if st.state in ("open", "blocked"):
        lease = store.current_lease(info.id)
        if lease is not None and not holder_gone(store, info.id, lease):
            raise ConfigError(
                f"session {info.id} is running; stop it first (`bubu stop {info.id}`), then rewind"
            )
        raise ConfigError(
            f"session {info.id} has an unfinished turn (a crash); `bubu recover {info.id}` it "
            "first, then rewind"
        )


def check_target(records: Sequence[Record], session: str, to: int) -> None:
    """Refuse a seq that is no turn boundary, naming the ones that are."""
    valid = boundaries(records)
    if to in valid:
        return
    high = records[-1].seq if records else 0
    where = (
        f"outside the session's events 0..{high}" if not 0 <= to <= high else "not a turn boundary"
    )
    raise ConfigError(
        f"seq {to} is {where}; session {session} can be rewound to: {shown_boundaries(valid)}"
    )


def preview(
    store: Store, ref: str, to: int, *, delete: bool = True, force: Collection[str] = ()
) -> Preview:
    """What rewinding session `ref` to seq `to` would do (nothing is changed)."""
    info = store.session(ref)
    _check_session(store, info)
    acting, _ = acting_info(store, info)
    records = store.read(info.id)
    check_target(records, info.id, to)
    report = store.verify(info.id)
    if not report.ok and (report.first_bad_seq is None or report.first_bad_seq <= to):
        raise CorruptLog(
            f"session {info.id} does not verify up to seq {to} ({report.problem}); nothing was "
            "done (rewind to an earlier seq)",
            session=info.id,
            seq=report.first_bad_seq,
        )
    ws = acting.workspace
    forced = {os.path.normpath(p) for p in force}
    steps = []
    for fc in changed_files(store, records, to, ws):
        rel = _shown(ws, fc.path)
        steps.append(
            _step(
                store,
                ws,
                fc,
                to,
                delete=delete,
                forced=rel is not None and (rel in forced or fc.path in forced),
            )
        )
    unknown = (
        forced
        - {f.path for f in steps}
        - {os.path.join(os.path.realpath(ws), f.path) for f in steps}
    )
    if unknown:
        raise ConfigError(
            f"--force-file {sorted(unknown)[0]} names no file this rewind touches; the files are: "
            f"{', '.join(f.path for f in steps) or 'none'}"
        )
    return Preview(
        session=info.id,
        workspace=ws,
        to=to,
        delete=delete,
        files=tuple(steps),
        commands=since(records, to).commands,
        snapshots=_covered(records, to),
    )


def _covered(records: Sequence[Record], to: int) -> bool:
    """Whether snapshots name the workspace at `to` and as the session last left it."""
    last = records[-1].seq if records else 0
    return None not in (refs.snapshot_at(records, to), refs.snapshot_before(records, last))


def changed_files(
    store: Store, records: Sequence[Record], to: int, workspace: str
) -> list[FileChange]:
    """Every file the session changed after `to`: those its writes changed (`since`), and
    those its snapshots show changed from the workspace at `to` to the last one recorded —
    what commands created, changed or deleted too. The snapshots win where both know a file:
    they saw what happened after the last write."""
    out = {fc.path: fc for fc in since(records, to).files}
    at, last = refs.snapshot_at(records, to), refs.snapshot_before(records, records[-1].seq)
    if at is None or last is None or at.tree is None or last.tree is None:
        return sorted(out.values(), key=lambda f: f.path)
    root = os.path.realpath(workspace)
    try:
        changes = tree.changes(store.get_object, at.tree, last.tree)
    except CorruptLog:
        return sorted(out.values(), key=lambda f: f.path)
    for c in changes:
        path = os.path.join(root, c.path)
        link = any(s is not None and s.mode == tree.LINK for s in (c.old, c.new))
        out[path] = FileChange(
            path=path,
            at_seq=None if c.old is None else c.old.sha256,
            last_after=None if c.new is None else c.new.sha256,
            last_write_seq=0,
            writes=out[path].writes if path in out else 0,
            command_after=False,
            link=link,
            from_snapshots=True,
            mode=None if c.old is None else c.old.mode & 0o7777,
        )
    return sorted(out.values(), key=lambda f: f.path)


# ---- the recorded operation ---------------------------------------------------------------------


class NoModel:
    """The provider of a rewind's runner: a rewind never calls a model."""

    def __init__(self, spec: str) -> None:
        self._spec = spec

    @property
    def spec(self) -> str:
        return self._spec

    @property
    def context_window(self) -> int:
        return 0

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        raise BubuError("a rewind does not call a model")


def rewind_tools(tools: dict[str, Tool], store: Store) -> dict[str, Tool]:
    """`tools` with the restore a rewind makes (for recovering an unfinished rewind)."""

    def content(sha: str) -> bytes | None:
        # A write kept what it replaced as a blob; a snapshot holds every file as an object.
        found = store.blob(sha)
        return found if found is not None else store.get_object(sha)

    return {**tools, NAME: restore_tool(content)}


def _turn_note(records: Sequence[Record], acting: SessionInfo) -> TurnStarted:
    """The rewind turn's start: the session's latest turn settings (a rewind changes none)."""
    for r in reversed(records):
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, TurnStarted):
            return c.note
    return TurnStarted(model=acting.model or "none", workspace=acting.workspace, title=acting.title)


def rewind(
    store: Store, p: Preview, *, fork_id: str | None = None, owner: str | None = None
) -> Done:
    """Carry out `p` (see the module docstring): plan event, restores, fork, end of the turn."""
    info = store.session(p.session)
    forced = [f.path for f in p.files if f.action in ACTS and "overwritten as asked" in f.reason]
    again = preview(store, info.id, p.to, delete=p.delete, force=forced)
    if again.token != p.token:
        raise ConfigError(
            f"the files of session {info.id} changed since the preview; nothing was done, look "
            "at the new preview and confirm again"
        )
    acting, _ = acting_info(store, info)
    records = store.read(info.id)
    try:
        lease = store.acquire_lease(info.id, owner or owner_id(), 30.0)
    except LeaseError as e:
        raise ConfigError(f"session {info.id} is running; stop it first, then rewind ({e})") from e
    plan = Plan(
        to=p.to,
        fork=fork_id or ids.session_id(),
        delete=p.delete,
        steps=[
            Step(
                call=ids.new_id("rw"),
                path=f.path,
                sha256=f.sha256,
                expect=f.now or ABSENT,
                mode=f.mode,
            )
            for f in p.writes
        ],
        skipped=[f"{f.path}: {f.action}" for f in p.files if f.action not in ACTS],
        commands=[f"seq {c.seq}: {c.label}" for c in p.commands],
    )
    runner = Runner(
        store=store,
        session=acting,
        provider=NoModel(acting.model or "none"),
        tools=rewind_tools({}, store),
        lease=lease,
    )
    try:
        turn = ids.turn_id()
        opened = make(
            session=info.id,
            turn=turn,
            role="system",
            author="host",
            ts=clock.now_ms(),
            content=SystemNote(note=_turn_note(records, acting)),
            visibility="hidden",
        )
        text = (
            f"rewinding to seq {p.to}: {len(plan.steps)} file(s) to restore, then a fork "
            f"{plan.fork}"
        )
        planned = make(
            session=info.id,
            turn=turn,
            role="system",
            author="host",
            ts=clock.now_ms(),
            content=SystemNote(note=Info(text=text)),
            visibility="hidden",
            actions=Actions(state_delta={REWIND_KEY: msgspec.to_builtins(plan)}),
        )
        runner.start_run("new", prefix=[opened, planned])
        runner.drive(lambda: finish(runner, plan), continue_turn=False)
    finally:
        with contextlib.suppress(BubuError):
            store.release_lease(runner.lease)
    return _done(store, info.id, plan)


def unfinished(records: Sequence[Record]) -> Plan | None:
    """The plan of the open turn when it is a rewind's, else None."""
    fold = Rewinding()
    for r in records:
        fold.apply(r)
    return plan_of(fold)


def plan_of(fold: Rewinding) -> Plan | None:
    """The rewind plan `fold` found, decoded."""
    return None if fold.plan is None else msgspec.convert(fold.plan, Plan)


def finish(runner: Runner, plan: Plan) -> None:
    """Do what `plan` still lacks: each restore without a call yet, the fork, the turn's end.

    Restores already called were carried out, or settled by recovery; they are not made again."""
    from bubu.engine.fork import fork_session

    tool = runner.tools[NAME]
    for step in plan.steps:
        if step.call in runner.turn.calls:
            continue
        args: dict[str, object] = {"path": step.path}
        if step.sha256 is not None:
            args["sha256"] = step.sha256
        if step.expect is not None:
            args["expect"] = step.expect
        if step.mode is not None:
            args["mode"] = step.mode
        made = runner.event(
            "model",
            "host",
            FunctionCall(call_id=step.call, name=NAME, arguments=args),
            actions=Actions(end_invocation=True),
            invocation=ids.new_id("inv"),
            visibility="hidden",
        )
        runner.append([made])
        call = runner.turn.calls[step.call]
        ctx = runner.tool_calls.context_for(call)
        try:
            intent = tool.prepare(dict(args), ctx)
        except ToolError as e:
            runner.tool_calls.commit_outcomes(
                [(call, ToolResult(output=str(e), is_error=True), None)]
            )
            continue
        assert intent is not None
        dispatch = ToolDispatch(
            call_id=call.call_id,
            tool=NAME,
            effect="provable_write",
            args_digest=codec.args_digest(dict(args)),
            path=intent.path,
            before_sha256=intent.before_sha256,
            after_sha256=intent.after_sha256,
        )
        runner.append(
            [
                runner.event(
                    "system",
                    "system",
                    actions=Actions(tool_dispatch=dispatch),
                    invocation=call.invocation,
                )
            ],
            durable=True,
            blobs=kept_before([intent]),
        )
        failpoints.hit("mid_rewind")
        runner.tool_calls.execute([(call, tool, ctx, intent)])
    try:
        runner.store.session(plan.fork)
    except UnknownSession:
        fork_session(runner.store, runner.session.id, plan.to, fork_id=plan.fork, from_start=True)
    failed = sum(1 for s in plan.steps if (c := runner.turn.calls.get(s.call)) and c.outcome_error)
    said = f"; {failed} restore(s) failed" if failed else ""
    runner.end_turn("completed", f"rewound to seq {plan.to}{said}; continue in {plan.fork}")


def _done(store: Store, session: str, plan: Plan) -> Done:
    from bubu.events import FunctionResponse

    texts: dict[str, tuple[str, bool]] = {}
    for r in store.read(session, kinds=("function_response",)):
        c = r.event.content
        if isinstance(c, FunctionResponse):
            texts[c.call_id] = (c.result, c.is_error)
    results = [
        (s.path, *texts.get(s.call, ("not carried out (the rewind was stopped)", True)))
        for s in plan.steps
    ]
    return Done(session=session, fork=plan.fork, to=plan.to, results=results)


__all__ = [
    "REWIND_KEY",
    "Done",
    "FileStep",
    "NoModel",
    "Plan",
    "Preview",
    "check_target",
    "finish",
    "plan_of",
    "preview",
    "rewind",
    "rewind_tools",
    "unfinished",
]
