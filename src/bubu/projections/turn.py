"""The state of the latest turn, folded from the log: what the engine decides its next step from.

The fold is incremental: `TurnFold.apply` takes one record at a time, so a driver keeps one fold
and feeds it only what is new. `fold(a + b)` equals `fold(a)` followed by `apply` of each of `b`.
The accumulator is private mutable state; the records it reads are never changed.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable

import msgspec

from bubu.events import (
    ChildFinished,
    Compaction,
    FunctionCall,
    FunctionResponse,
    HookRun,
    ModelRequestNote,
    PermissionDecision,
    PlanApproved,
    Record,
    RecoveryNotice,
    RunStarted,
    SandboxMode,
    SessionStarted,
    SummaryChunk,
    SystemNote,
    Text,
    ToolDispatch,
    ToolRecovery,
    TurnEnded,
    TurnEndReason,
    TurnStarted,
    WindowLearned,
)


class CallState(msgspec.Struct, kw_only=True):
    """One tool call of the turn and how far it got."""

    call_id: str
    name: str
    arguments: dict[str, object]
    raw_arguments: str | None
    call_seq: int
    invocation: str | None
    dispatch: ToolDispatch | None = None
    dispatch_seq: int | None = None
    dispatch_run: str | None = None
    outcome_seq: int | None = None
    outcome_error: bool = False
    outcome_digest: str | None = None
    """A digest of the result the model was given (a repeat note on it left out)."""
    repeats: int = 0
    """Successful outcomes in a row, in this run, of the same call with this same result (this
    one included; 0 for a failure): a model looping on a call that tells it nothing new."""
    decision: PermissionDecision | None = None
    recoveries: list[ToolRecovery] = msgspec.field(default_factory=list)
    hooks: dict[tuple[str, str], HookRun] = msgspec.field(default_factory=dict)
    """The committed decisions of the hooks that ran on this call, by (event, hook): they stand
    after a crash, and the hook is not run again. A PreToolUse hook's `updated_input` has already
    replaced `arguments`."""


REPEAT_NOTE = "\n[this exact call has returned the same result "
"""How the note on a repeated result begins (left out of the result's digest)."""


def call_key(call: CallState) -> tuple[str, str]:
    """What makes two calls the same call: the tool, and the canonical arguments (or the same
    unparsable argument text)."""
    if call.raw_arguments is not None:
        return call.name, "raw:" + call.raw_arguments
    return call.name, json.dumps(call.arguments, sort_keys=True, ensure_ascii=False, default=str)


def result_digest(result: str) -> str:
    """The digest of a result as the model was given it, a repeat note on it left out."""
    if result.endswith("]") and REPEAT_NOTE in result:
        result = result[: result.rindex(REPEAT_NOTE)]
    return hashlib.sha256(result.encode("utf-8", "surrogatepass")).hexdigest()


class TurnFold(msgspec.Struct, kw_only=True):
    """The latest turn of a session, as far as the records applied so far say."""

    turn: str | None = None
    open: bool = False
    end_reason: TurnEndReason | None = None
    model: str | None = None
    max_steps: int | None = None
    yes: bool = False
    allow_commands: tuple[str, ...] = ()
    allow_write: tuple[str, ...] = ()
    system_prompt: str | None = None
    context_window: int | None = None
    window_source: str | None = None
    mcp_config: str | None = None
    sandbox: SandboxMode | None = None
    network: bool = False
    pass_env: tuple[str, ...] = ()
    allow_sockets: tuple[str, ...] = ()
    ssh_agent: bool = False
    max_procs: int | None = None
    max_memory: int | None = None
    max_file_size: int | None = None
    max_cost: float | None = None
    deny: tuple[str, ...] = ()
    plan: bool = False
    """A planning turn (or the last turn was one, and its plan is not approved yet)."""
    plan_approved: bool = False
    """The last planning turn's plan was approved since (`PlanApproved`)."""
    step_hooks: dict[tuple[str, str], HookRun] = msgspec.field(default_factory=dict)
    """Hook decisions not tied to a call (Stop …) committed since the last model response."""
    stop_blocks: int = 0
    """How often a Stop hook continued this turn (``stop_hook_active`` once above 0)."""
    turn_cost: float = 0.0
    """What the turn's priced model calls cost so far, in USD (over all its runs)."""
    run: str | None = None
    runs: int = 0
    steps_in_run: int = 0
    model_responses: int = 0
    """Model responses committed in the whole session (the scripted provider's position)."""
    awaiting_model: bool = False
    cut_off: bool = False
    """The latest model response stopped at its output limit (max_tokens)."""
    inflight_request: ModelRequestNote | None = None
    calls: dict[str, CallState] = msgspec.field(default_factory=dict)
    open_calls: list[str] = msgspec.field(default_factory=list)
    last_outcome: CallState | None = None
    """The call whose outcome was folded last (the highest outcome seq of the turn)."""
    unnoticed: list[ToolRecovery] = msgspec.field(default_factory=list)
    """Recovery decisions committed since the last recovery notice (what the next one must name)."""
    dropped_in_a_row: int = 0
    """Recoveries of this turn that dropped an in-flight model call, with no model response
    committed since the first of them: deaths during model calls, back to back."""
    high_water: int = 0
    _last_invocation: str | None = None
    _same: dict[tuple[str, str], CallState] = msgspec.field(default_factory=dict)
    _children: set[str] = msgspec.field(default_factory=set)
    """Sub-agents whose cost is counted in `turn_cost`."""
    """The latest finished call of each (tool, arguments), in this run."""

    def apply(self, r: Record) -> None:
        """Fold one record in (records must come in seq order, each exactly once)."""
        ev = r.event
        self.high_water = r.seq
        c = ev.content
        a = ev.actions
        if isinstance(c, SystemNote):
            self._note(r, c)
        elif isinstance(c, Text) and ev.role == "user" and ev.visibility == "visible":
            if self.open:
                self.awaiting_model = True
        elif ev.role == "model" and ev.turn == self.turn:
            self._model(r, c)
        elif isinstance(c, FunctionResponse):
            st = self.calls.get(c.call_id)
            if st is not None and st.outcome_seq is None:
                st.outcome_seq, st.outcome_error = r.seq, c.is_error
                self._repeated(st, c.result)
                self.last_outcome = st
                if c.call_id in self.open_calls:
                    self.open_calls.remove(c.call_id)
                if not self.open_calls and self.open:
                    self.awaiting_model = True
        if a is not None:
            if a.token_usage is not None and ev.role == "model" and ev.turn == self.turn:
                self.cut_off = a.token_usage.stop_reason == "max_tokens"
                self.turn_cost += a.token_usage.cost_usd or 0.0
            if a.tool_dispatch is not None:
                st = self.calls.get(a.tool_dispatch.call_id)
                if st is not None:
                    st.dispatch, st.dispatch_seq, st.dispatch_run = a.tool_dispatch, r.seq, ev.run
            if a.permission_decision is not None:
                st = self.calls.get(a.permission_decision.call_id)
                if st is not None:
                    st.decision = a.permission_decision
            if a.tool_recovery is not None:
                self.unnoticed.append(a.tool_recovery)
                st = self.calls.get(a.tool_recovery.call_id)
                if st is not None:
                    st.recoveries.append(a.tool_recovery)

    def last_same(self, call: CallState) -> CallState | None:
        """The latest finished call of this run that is the same call as `call`."""
        return self._same.get(call_key(call))

    def _repeated(self, st: CallState, result: str) -> None:
        """Count `st`'s outcome among the same call's identical successful results in a row."""
        st.outcome_digest = result_digest(result)
        key = call_key(st)
        prev = self._same.get(key)
        if st.outcome_error:
            st.repeats = 0
        elif (
            prev is not None and not prev.outcome_error and prev.outcome_digest == st.outcome_digest
        ):
            st.repeats = prev.repeats + 1
        else:
            st.repeats = 1
        self._same[key] = st

    def _note(self, r: Record, c: SystemNote) -> None:
        n = c.note
        if isinstance(n, TurnStarted):
            if r.event.turn != self.turn:
                self.turn_cost = 0.0  # a new turn (a resumed one keeps what it spent)
                self._children = set()
                self.stop_blocks = 0
            self.max_cost = n.max_cost
            self.turn, self.open, self.end_reason = r.event.turn, True, None
            self.model, self.max_steps = n.model, n.max_steps
            self.yes, self.allow_commands = n.yes, tuple(n.allow_commands)
            self.allow_write = tuple(n.allow_write)
            self.system_prompt = n.system_prompt
            self.context_window = n.context_window
            self.window_source = n.window_source
            self.mcp_config = n.mcp_config
            self.sandbox, self.network = n.sandbox, n.network
            self.pass_env = tuple(n.pass_env)
            self.allow_sockets, self.ssh_agent = tuple(n.allow_sockets), n.ssh_agent
            self.max_procs, self.max_memory = n.max_procs, n.max_memory
            self.max_file_size = n.max_file_size
            self.deny, self.plan, self.plan_approved = tuple(n.deny), n.plan, False
            self.step_hooks = {}
            self.calls, self.open_calls, self.last_outcome = {}, [], None
            self._same = {}
            self.awaiting_model, self.inflight_request = True, None
            self.cut_off = False
            self.dropped_in_a_row = 0
        elif isinstance(n, SessionStarted) and n.origin == "import":
            # An imported log's word grants nothing here: the importer's own flags decide what
            # its turn may do without asking, how its commands are confined, which secrets they
            # see and which MCP servers it gets.
            self.yes, self.allow_commands, self.mcp_config = False, (), None
            self.allow_write = ()
            self.sandbox, self.network, self.pass_env = None, False, ()
            self.allow_sockets, self.ssh_agent = (), False
            self.max_procs = self.max_memory = self.max_file_size = None
            for call in self.calls.values():
                call.decision = None  # asked again, of the importer
        elif isinstance(n, TurnEnded):
            self.open, self.end_reason, self.awaiting_model = False, n.reason, False
            self.inflight_request = None
        elif isinstance(n, RunStarted):
            self.run, self.runs, self.steps_in_run = r.event.run, self.runs + 1, 0
            self.inflight_request = None
            self._same = {}  # a new run gives a looping model another chance
        elif isinstance(n, ModelRequestNote):
            self.inflight_request = n
        elif isinstance(n, ChildFinished) and r.event.turn == self.turn and self.open:
            if n.child not in self._children:  # a sub-agent's spend counts in its parent's turn
                self._children.add(n.child)
                self.turn_cost += n.cost_usd
        elif isinstance(n, SummaryChunk):
            self.inflight_request = None  # the summarizer call it answers is over
        elif isinstance(n, WindowLearned):
            self.context_window, self.window_source = n.tokens, n.source
        elif isinstance(n, HookRun):
            self._hook(n)
        elif isinstance(n, PlanApproved):
            self.plan, self.plan_approved = False, True
        elif isinstance(n, Compaction) and n.ok:
            self._retire(n.watermark)
        elif isinstance(n, RecoveryNotice):
            self.unnoticed = []
            if n.dropped_model_calls:
                self.dropped_in_a_row += 1

    def _hook(self, n: HookRun) -> None:
        key = (n.event, n.hook)
        st = self.calls.get(n.call_id) if n.call_id is not None else None
        if st is None:
            self.step_hooks[key] = n
            if n.event == "Stop" and n.decision == "block":
                self.stop_blocks += 1
            return
        st.hooks[key] = n
        if n.updated_input is not None and n.decision in ("none", "allow", "ask"):
            st.arguments = dict(n.updated_input)

    def _retire(self, watermark: int) -> None:
        """Forget the finished calls a checkpoint covers (the model sees only their summary),
        so that a long turn holds its window's calls, not all of them: loops and repeated
        failures are counted among the calls since the last compaction."""
        keep = set(self.open_calls)
        last = self.last_outcome
        done = [
            cid
            for cid, st in self.calls.items()
            if st.outcome_seq is not None
            and st.outcome_seq <= watermark
            and cid not in keep
            and st is not last
        ]
        for cid in done:
            del self.calls[cid]
        for key in [k for k, st in self._same.items() if st.call_id not in self.calls]:
            del self._same[key]

    def _model(self, r: Record, c: object) -> None:
        inv = r.event.invocation
        if inv != self._last_invocation:
            self.step_hooks = {}
            self._last_invocation = inv
            if r.event.author != "host":  # a rewind's restores are the host's calls, not a model's
                self.model_responses += 1
                self.steps_in_run += 1
            self.awaiting_model = False
            self.inflight_request = None
            self.dropped_in_a_row = 0
        if isinstance(c, FunctionCall):
            self.calls[c.call_id] = CallState(
                call_id=c.call_id,
                name=c.name,
                arguments=dict(c.arguments),
                raw_arguments=c.raw_arguments,
                call_seq=r.seq,
                invocation=inv,
            )
            self.open_calls.append(c.call_id)

    def copy(self) -> TurnFold:
        """An independent copy (for folding further without touching this one)."""
        return copy.deepcopy(self)

    @property
    def dangling(self) -> list[CallState]:
        """Calls dispatched (T1) with no outcome (T2): what a crash leaves behind."""
        return [self.calls[c] for c in self.open_calls if self.calls[c].dispatch is not None]

    @property
    def undispatched(self) -> list[CallState]:
        """Calls the model made that have neither dispatch nor outcome yet."""
        return [self.calls[c] for c in self.open_calls if self.calls[c].dispatch is None]


def fold(records: Iterable[Record], start: TurnFold | None = None) -> TurnFold:
    """Fold records into a (copy of) `start`, or into a fresh fold."""
    t = start.copy() if start is not None else TurnFold()
    for r in records:
        t.apply(r)
    return t
