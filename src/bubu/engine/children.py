"""Sub-agents: a `delegate` call runs a child session in the same store, exactly once.

The child's id is derived from the parent's id and the call's (`child_id`), and the child's first
event (`session_started`, with `parent` and `parent_call`) is written with the session itself, in
one transaction. So running a delegate call again — which is what recovery does with a dispatched
call that has no outcome (decision ``resume``) — finds the child it started: a child whose turn is
open is recovered and continued, a child that finished has its report read back, and no second
child is ever started. The parent's log records `child_started` and `child_finished`; what a
child spent counts in the parent's turn (its limits and its status).

A child gets its share of what the parent's turn has left of each limit (tokens and cost split
between the delegate calls of one response; time not, as they run at once), capped by the call's
`budget`. It stops when its parent stops. With ``isolation: worktree`` it works in a git worktree
of its own under ``$BUBU_HOME/worktrees/``; its result names its branch and diff, and
`merge_child` applies that diff to the parent's workspace.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from bubu import clock, ids
from bubu.agents import AgentDef, load_agents
from bubu.errors import BubuError, ConfigError, UnknownSession
from bubu.events import ChildFinished, ChildStarted, SessionStarted, make
from bubu.log import make_home, readview
from bubu.log.store import SessionInfo
from bubu.projections.children import fold_children, outcome_line, report
from bubu.tools.base import JSON, Tool, ToolResult
from bubu.tools.delegate import Budget, DelegateArgs, MergeArgs

if TYPE_CHECKING:
    from bubu.engine.driver import Runner
    from bubu.engine.ports import RunConfig
    from bubu.engine.session import Host
    from bubu.providers.base import Provider

PARENT_ONLY = frozenset({"delegate", "merge_child"})
"""Tools a child gets only when they are asked for by name: sub-agents do not nest unasked."""

POLL_S = 0.2


def child_id(parent: str, call_id: str) -> str:
    """The session id of the child that the call `call_id` of session `parent` starts."""
    return ids.derived_id("ses", f"child:{parent}/{call_id}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What a child is started as."""

    task: str
    agent: AgentDef | None
    tools: dict[str, Tool]
    provider: Provider
    isolation: bool
    budget: Budget | None = None


class Children:
    """The sub-agents of one runner (the `bubu.tools.base.Children` the tools are given)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self._facts = threading.Lock()

    # -- delegate ---------------------------------------------------------------------------------

    def delegate(self, call_id: str, args: dict[str, JSON]) -> ToolResult:
        """Run the child of `call_id` to its end (starting, continuing or reading it back)."""
        try:
            return self._delegate(call_id, msgspec.convert(args, DelegateArgs))
        except BubuError as e:
            return ToolResult(output=f"the sub-agent did not run: {e}", is_error=True)

    def _delegate(self, call_id: str, a: DelegateArgs) -> ToolResult:
        r = self.runner
        cid = child_id(r.session.id, call_id)
        plan = self._plan(a)
        info = _find(r.store, cid)
        known = fold_children(r.store.read(r.session.id, kinds=("child_started",))).get(cid)
        branch = known.branch if known is not None else None
        base = known.base if known is not None else None
        resumed = info is not None
        if info is None:
            workspace = r.session.workspace
            if plan.isolation:
                workspace, branch, base = worktree(r.session.workspace, cid)
            info = self._create(cid, call_id, plan, workspace)
        elif not plan.isolation:
            # A child without a worktree acts where its parent does now (a fleet worker's copy).
            info = msgspec.structs.replace(info, workspace=r.session.workspace)
        self._fact(
            ChildStarted(
                child=cid,
                call_id=call_id,
                agent=a.agent or None,
                model=plan.provider.spec,
                branch=branch,
                base=base,
                resumed=resumed,
            )
        )
        read_back = resumed and _ended(r.store, cid)
        if not read_back:
            self._run(self._host(plan, call_id), info, plan.task)
        got = report(r.store.read(cid))
        line = outcome_line(got) if got.reason is not None else "stopped: its parent stopped"
        self._fact(
            ChildFinished(
                child=cid,
                call_id=call_id,
                reason=got.reason or "stopped",
                tokens=got.tokens,
                cost_usd=got.cost_usd,
                read_back=read_back,
            )
        )
        who = f"sub-agent {cid}" + (f" ({a.agent})" if a.agent else "")
        text = f"{who} {line}:\n{got.text or '(it said nothing)'}"
        if branch is not None and base is not None:
            text += "\n\n" + finish_worktree(info.workspace, branch, base, cid)
        return ToolResult(output=text, is_error=got.reason != "completed")

    def _plan(self, a: DelegateArgs) -> Plan:
        r = self.runner
        if not a.task.strip():
            raise ConfigError("the task is empty; say what the sub-agent should do")
        agent = None
        if a.agent:
            agents = load_agents(r.session.workspace)
            agent = agents.found.get(a.agent)
            if agent is None:
                known = ", ".join(sorted(agents.found)) or "none"
                why = "".join(f"; {line}" for line in agents.ignored)
                raise ConfigError(f"there is no agent {a.agent!r} (the agents: {known}{why})")
        names = a.tools or (agent.tools if agent is not None else None)
        if names is None:
            tools = {n: t for n, t in r.tools.items() if n not in PARENT_ONLY}
        else:
            unknown = [n for n in names if n not in r.tools]
            if unknown:
                raise ConfigError(
                    f"no tool {', '.join(map(repr, unknown))} here; the tools are: "
                    + ", ".join(sorted(r.tools))
                )
            tools = {n: r.tools[n] for n in names}
        spec = a.model or (agent.model if agent is not None else None)
        return Plan(
            task=a.task,
            agent=agent,
            tools=tools,
            provider=self._provider(spec),
            isolation=a.isolation == "worktree",
            budget=a.budget,
        )

    def _provider(self, spec: str | None) -> Provider:
        from bubu.providers import resolve
        from bubu.providers.scripted import absolute_spec

        mine = self.runner.provider
        if spec is None or absolute_spec(spec) == mine.spec:
            return mine
        return resolve(absolute_spec(spec))

    def _create(self, cid: str, call_id: str, plan: Plan, workspace: str) -> SessionInfo:
        r = self.runner
        title = " ".join(plan.task.split())[:120]
        first = make(
            session=cid,
            role="system",
            author="host",
            ts=clock.now_ms(),
            visibility="hidden",
            content=_note(
                SessionStarted(
                    workspace=workspace,
                    title=title,
                    model=plan.provider.spec,
                    parent=r.session.id,
                    parent_call=call_id,
                )
            ),
        )
        try:
            return r.store.create_session(
                title=title,
                workspace=workspace,
                model=plan.provider.spec,
                session_id=cid,
                events=[first],
            )
        except BubuError:
            found = _find(r.store, cid)  # another process made it first: it is the same child
            if found is None:
                raise
            return found

    def _host(self, plan: Plan, call_id: str) -> Host:
        from bubu.engine.session import Host

        r = self.runner
        return Host(
            store=r.store,
            provider=plan.provider,
            tools=plan.tools,
            policy=r.tool_calls.effective_policy,
            asker=r.asker,
            config=self._limits(call_id, plan.budget),
            prompt=plan.agent.instructions
            if plan.agent is not None and plan.agent.instructions.strip()
            else None,
        )

    def _limits(self, call_id: str, budget: Budget | None) -> RunConfig:
        """The parent's run config with the child's share of each limit."""
        r = self.runner
        lr, t = r.longrun, r.turn
        me = t.calls.get(call_id)
        siblings = (
            sum(
                1
                for c in t.calls.values()
                if c.name == "delegate" and me is not None and c.invocation == me.invocation
            )
            or 1
        )
        tokens = (
            None if lr.token_limit is None else max(1, (lr.token_limit - lr.tokens) // siblings)
        )
        cost = None if t.max_cost is None else max(1e-9, (t.max_cost - t.turn_cost) / siblings)
        seconds = None
        if lr.time_limit_s is not None:
            seconds = max(0.001, lr.time_limit_s - lr.running_ms(clock.now_ms()) / 1000)
        if budget is not None:
            tokens = _least(tokens, budget.tokens or None)
            cost = _least(cost, budget.cost or None)
            seconds = _least(seconds, budget.seconds or None)
        return replace(
            r.config, token_limit=tokens, max_cost=cost, time_limit_s=seconds, fallback_models=()
        )

    def _fact(self, note: ChildStarted | ChildFinished) -> None:
        """Append a fact to the parent's log from the call's thread."""
        with self._facts:
            self.runner.append([self.runner.note(note)])

    def _run(self, host: Host, info: SessionInfo, task: str) -> None:
        """Drive the child until its turn has ended, or its parent stops."""
        from bubu.engine.recovery import recover_session
        from bubu.engine.scope import holder_gone
        from bubu.engine.session import start_turn

        r, store = self.runner, self.runner.store
        done = threading.Event()
        watcher = threading.Thread(
            target=self._watch, args=(host, done), daemon=True, name="bubu-child-stop"
        )
        watcher.start()
        try:
            while r.stop_reason is None:
                st = readview.status(store, info.id)
                if st.turns == 0:
                    start_turn(host, info, task)
                elif st.state == "open":
                    if not holder_gone(store, info.id, store.current_lease(info.id)):
                        time.sleep(POLL_S)  # another runner has it: wait for its end
                        continue
                    rec = recover_session(host, info, workspace=info.workspace)
                    if rec.outcome == "busy":
                        time.sleep(POLL_S)
                        continue
                if _ended(store, info.id):
                    return
        finally:
            done.set()

    def _watch(self, host: Host, done: threading.Event) -> None:
        """Stop the child's runner when the parent's stops."""
        r = self.runner
        while not done.is_set():
            if r.stop_event.wait(POLL_S) and r.stop_reason is not None:
                child = host.runner
                if child is not None and child.stop_reason is None:
                    child.request_stop(r.stop_reason)
                done.wait(POLL_S)

    # -- merge_child ------------------------------------------------------------------------------

    def merge(self, args: dict[str, JSON]) -> ToolResult:
        """Apply a finished child's worktree diff to the parent's workspace."""
        try:
            a = msgspec.convert(args, MergeArgs)
            r = self.runner
            children = fold_children(
                r.store.read(r.session.id, kinds=("child_started", "child_finished"))
            )
            match = [c for c in children.values() if c.session.startswith(a.child.strip())]
            if len(match) != 1:
                known = ", ".join(children) or "none"
                raise ConfigError(
                    f"{a.child!r} names no single sub-agent of this session (they are: {known})"
                )
            child = match[0]
            if child.branch is None or child.base is None:
                raise ConfigError(
                    f"sub-agent {child.session} worked in this workspace; there is nothing to merge"
                )
            if child.state == "running":
                raise ConfigError(f"sub-agent {child.session} has not finished")
            return ToolResult(output=merge_branch(r.session.workspace, child.branch, child.base))
        except BubuError as e:
            return ToolResult(output=f"merge_child did not merge: {e}", is_error=True)


def _note(n: SessionStarted) -> Any:
    from bubu.events import SystemNote

    return SystemNote(note=n)


def _least(a: float | int | None, b: float | int | None) -> Any:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _find(store: Any, cid: str) -> SessionInfo | None:
    try:
        info: SessionInfo = store.session(cid)
    except UnknownSession:
        return None
    return info if info.id == cid else None


def _ended(store: Any, cid: str) -> bool:
    st = readview.status(store, cid)
    return st.turns > 0 and st.state not in ("open", "queued")


# -- git worktrees ---------------------------------------------------------------------------------


def _git(cwd: str | Path, *args: str, stdin: bytes | None = None) -> str:
    """Run git (hooks off: a repository's hooks never run on Bubu's behalf); its stdout."""
    cmd = ["git", "-c", "core.hooksPath=/dev/null", "-C", str(cwd), *args]
    try:
        done = subprocess.run(cmd, input=stdin, capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"git {args[0]} failed: {e}") from e
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ConfigError(f"git {args[0]} failed: {err[-1] if err else done.returncode}")
    return done.stdout.decode("utf-8", "replace")


def worktree(workspace: str, cid: str) -> tuple[str, str, str]:
    """A git worktree of `workspace`'s repository for child `cid` (made once): the child's
    workspace in it, its branch and the commit it starts from."""
    from bubu.tools.places import bubu_home

    try:
        top = _git(workspace, "rev-parse", "--show-toplevel").strip()
    except ConfigError as e:
        raise ConfigError(f"isolation worktree needs a git repository ({e})") from e
    base = _git(top, "rev-parse", "HEAD").strip()
    rel = Path(workspace).resolve().relative_to(Path(top).resolve())
    path = Path(bubu_home()) / "worktrees" / cid
    branch = f"bubu/{cid}"
    if not path.exists():
        make_home(path.parent.parent)  # $BUBU_HOME: 0700 when this creates it
        path.parent.mkdir(exist_ok=True)
        exists = bool(_git(top, "branch", "--list", branch).strip())
        new = [] if exists else ["-b", branch]
        _git(top, "worktree", "add", "-q", *new, str(path), branch if exists else base)
    return str(path / rel), branch, base


def finish_worktree(workspace: str, branch: str, base: str, cid: str) -> str:
    """Commit what the child left in its worktree to its branch; its branch and diff."""
    _git(workspace, "add", "-A")
    staged = _git(workspace, "diff", "--cached", "--name-only").strip()
    if staged:
        _git(
            workspace,
            "-c",
            "user.name=Bubu",
            "-c",
            "user.email=bubu@localhost",
            "commit",
            "-q",
            "--no-verify",
            "-m",
            f"sub-agent {cid}",
        )
    stat = _git(workspace, "diff", "--stat", base, branch).strip()
    if not stat:
        return f"branch {branch}: no changes"
    patch = _git(workspace, "diff", base, branch)
    return (
        f"branch {branch} (from {base[:12]}); merge_child{{child: {cid}}} applies it here:\n"
        f"{stat}\n\n{patch}"
    )


def merge_branch(workspace: str, branch: str, base: str) -> str:
    """Apply `branch`'s changes since `base` to `workspace` (uncommitted)."""
    top = _git(workspace, "rev-parse", "--show-toplevel").strip()
    patch = _git(top, "diff", "--binary", base, branch).encode()
    if not patch.strip():
        return f"branch {branch} has no changes; nothing was merged"
    try:
        _git(top, "apply", "--whitespace=nowarn", stdin=patch)
    except ConfigError:
        _git(top, "apply", "--3way", "--whitespace=nowarn", stdin=patch)
    stat = _git(top, "diff", "--stat", base, branch).strip()
    return f"applied branch {branch} to the workspace (uncommitted):\n{stat}"


__all__ = ["Children", "child_id", "finish_worktree", "merge_branch", "worktree"]
