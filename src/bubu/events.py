"""The vocabulary of the log: every fact a task can produce.

An `Event` is an envelope (ids, role, author, status, visibility, time, schema version) with at most
one `content` and optional `actions`. Content and system-note kinds are tagged unions: the tag is
the fixed string in `kind` (content) or `note` (system notes), never a Python class path. The
canonical bytes of an event are produced by `bubu.log.codec` alone.

Readers accept every older schema version (upgraded on read by the codec); writers only ever write
`SCHEMA_VERSION`.
"""

# No `from __future__ import annotations` here: with the annotations as objects, building the
# codec's decoder does not parse hundreds of annotation strings, a few milliseconds of every
# command's start.
from typing import Any, Literal, TypeAlias

import msgspec

SCHEMA_VERSION = 1

Role = Literal["user", "model", "tool", "system"]
Author = Literal["user", "host", "agent", "tool", "system"]
Status = Literal["completed", "failed", "aborted", "cancelled"]
Visibility = Literal["visible", "hidden"]
EffectClass = Literal["read_only", "provable_write", "side_effecting"]
TurnEndReason = Literal["completed", "failed", "stopped", "suspended"]
EndCause = Literal["provider_unavailable", "max_steps", "max_tokens", "max_time"]
"""Why a turn that can be resumed ended: the provider stayed unavailable (reason `failed`), or a
limit of the turn was reached (reason `stopped`)."""
SandboxMode = Literal["workspace-write", "read-only", "off"]

JSON: TypeAlias = Any
"""An arbitrary JSON value (tool arguments, provider-native payloads). Finite numbers only."""


class _Base(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=False
):
    pass


# ---------------------------------------------------------------------------------------------
# Content kinds
# ---------------------------------------------------------------------------------------------


class ImageRef(_Base, frozen=True, kw_only=True):
    """An image kept in the blob table (content-addressed), shown to models that accept images."""

    sha256: str
    size: int
    media_type: str


class Text(_Base, frozen=True, kw_only=True, tag="text", tag_field="kind"):
    """Plain text: the user's request, or what the model said; `images` attached to a request."""

    text: str
    images: list[ImageRef] = msgspec.field(default_factory=list)
    native: JSON | None = None
    """A provider's own content behind model text (a server-side web search's call or results),
    replayed to that provider verbatim; `text` says what it was."""


class Thinking(_Base, frozen=True, kw_only=True, tag="thinking", tag_field="kind"):
    """Model reasoning; `signature` (or `redacted` data) is replayed to the provider verbatim."""

    text: str
    signature: str | None = None
    redacted: str | None = None
    native: JSON | None = None
    """The provider's own reasoning item (OpenAI Responses), replayed to it verbatim."""


class FunctionCall(_Base, frozen=True, kw_only=True, tag="function_call", tag_field="kind"):
    """A tool call the model asked for. `raw_arguments` keeps text that was not valid JSON."""

    call_id: str
    name: str
    arguments: dict[str, JSON] = msgspec.field(default_factory=dict)
    raw_arguments: str | None = None
    provider_id: str | None = None
    """The provider's own id when it was not unique in the session (the log knows the call by
    `call_id`, which replaces it in every request)."""
    native: JSON | None = None
    """The provider's own call item (OpenAI Responses `function_call`), replayed verbatim."""


class BlobRef(_Base, frozen=True, kw_only=True):
    """A reference to offloaded bytes in the blob table (content-addressed)."""

    sha256: str
    size: int
    lines: int


class WorkspaceSnapshot(_Base, frozen=True, kw_only=True):
    """The workspace as a step left it: the sha-256 of its root tree object in the store (None
    when none could be stored), what it holds, and what it had to leave out.

    `partial` says why the snapshot is incomplete (a full disk, a cap, a permission); such a
    snapshot never blocks or fails the step that took it."""

    tree: str | None
    files: int = 0
    bytes: int = 0
    skipped: int = 0
    partial: str | None = None


class FunctionResponse(_Base, frozen=True, kw_only=True, tag="function_response", tag_field="kind"):
    """The committed outcome of a tool call, paired to the call by `call_id`.

    `result` is what the model sees; when the whole output was offloaded, `blob` names it and
    `result` holds the text that stays inline. `native` is a provider-native form, if any.
    """

    call_id: str
    name: str
    result: str
    is_error: bool = False
    native: JSON | None = None
    blob: BlobRef | None = None
    duration_ms: int | None = None
    images: list[ImageRef] = msgspec.field(default_factory=list)
    snapshot: WorkspaceSnapshot | None = None
    """The workspace after a step that may have changed it (never part of a model request)."""
    """Images the result shows the model (`read_file` on an image), kept as blobs."""


class Error(_Base, frozen=True, kw_only=True, tag="error", tag_field="kind"):
    """A failure recorded as a fact (a failed model attempt, a refused step …)."""

    error_class: str
    message: str
    retryable: bool = False
    status: int | None = None
    retry_in_ms: int | None = None
    """The wait planned before the next attempt (None: no further attempt), so that "waiting for
    the provider, next in N s" is a projection of the log."""


# ---- system notes: hidden from the model -----------------------------------------------------


class _Note(_Base, frozen=True, kw_only=True, tag_field="note"):
    pass


class TurnStarted(_Note, frozen=True, kw_only=True, tag="turn_started"):
    """A turn opened: the session now has an open turn until a `TurnEnded`.

    The permission policy the user gave the turn (`yes`, `allow_commands`), a custom system
    prompt and the MCP configuration are recorded so that a recovery after a crash runs the same
    way, not under whatever the next command says.
    """

    model: str
    max_steps: int | None = None
    yes: bool = False
    allow_commands: list[str] = msgspec.field(default_factory=list)
    allow_write: list[str] = msgspec.field(default_factory=list)
    """Paths outside the workspace the user allowed the file tools to write (``--allow-write``)."""
    system_prompt: str | None = None
    """A custom system prompt (None: Bubu's own), so a recovered run asks the model the same way."""
    project_instructions: bool = True
    """Whether the workspace's AGENTS.md / CLAUDE.md files are given to the model."""
    context_window: int | None = None
    """The window the turn's budgets use: the user's, else the model's as found when the turn
    started (None: an older Bubu, which recorded only a user's), so a recovery uses the same."""
    window_source: str | None = None
    """Where `context_window` came from (``--context-window``, ``llama.cpp /props`` …)."""
    mcp_config: str | None = None
    """The MCP configuration file the turn's tools came from (its path, never its contents, which
    may hold credentials), so a recovery offers the same tools."""
    retry_for_s: float | None = None
    """How long transient provider failures are waited out before the turn gives up (None: the
    default horizon)."""
    fallback_models: list[str] = msgspec.field(default_factory=list)
    """Models (provider:model) to switch to, in order, while the primary keeps failing."""
    token_limit: int | None = None
    """Total tokens (in + out) the turn may use from this start on (None: no limit)."""
    time_limit_s: float | None = None
    """Seconds the turn may run, summed over its runs, from this start on (None: no limit)."""
    sandbox: SandboxMode | None = None
    """How the turn's commands are confined (None: recorded before there was a sandbox)."""
    network: bool = False
    """Whether the turn's sandboxed commands may use the network."""
    pass_env: list[str] = msgspec.field(default_factory=list)
    """The secret environment variables the user passed on to commands (``--env NAME``): names
    only, never values, so a recovered turn passes on the same ones."""
    allow_sockets: list[str] = msgspec.field(default_factory=list)
    """Host Unix sockets (or directories of them) the turn's sandboxed commands may reach
    (``--allow-socket``), so a recovered or resumed turn reaches the same ones and no others."""
    ssh_agent: bool = False
    """Whether the turn's sandboxed commands may use the SSH agent (``--ssh-agent``)."""
    max_procs: int | None = None
    """Processes and threads one sandboxed command may have (None: the default)."""
    max_memory: int | None = None
    """Bytes of memory one sandboxed command may use (None: the default share of the machine)."""
    max_file_size: int | None = None
    """The largest file in bytes a sandboxed command may write (None: the default)."""
    base_url: str | None = None
    """The model server the turn talked to (its official API included), without any credentials
    in it, so a recovery asks the same server and never another one (None: a provider with no
    server, or an older Bubu)."""
    stall_timeout: float | None = None
    """Seconds without a byte from the server before a model call is retried (None: default)."""
    thinking_budget: int | None = None
    """The extended-thinking budget in tokens (None: no thinking)."""
    reasoning_effort: str | None = None
    """The reasoning effort asked of an OpenAI reasoning model (None: the model's default)."""
    max_output_tokens: int | None = None
    """The cap on tokens one model call may produce, reasoning included (None: the default)."""
    cache_ttl: str | None = None
    """How long Anthropic keeps the prompt cache ("5m", "1h"; None: the default 5 minutes)."""
    tool_timeout: float | None = None
    """Seconds per tool call (None: the default)."""
    workspace: str | None = None
    """The session's workspace, where this turn's tools act: under the chain, unlike the sessions
    table (None: an older Bubu, whose table alone says)."""
    title: str | None = None
    """The session's title as this turn knew it (None: an older Bubu)."""
    max_cost: float | None = None
    """The turn's spending limit in USD (None: no limit)."""
    native_tools: bool | None = None
    """Whether the file and command tools were offered in the provider's own shapes (None: the
    default, which offers them at the provider's own API only)."""
    deny: list[str] = msgspec.field(default_factory=list)
    """Deny rules (``--deny``, ``deny = [...]``): commands and paths refused without asking, so a
    recovered or resumed turn refuses the same ones."""
    plan: bool = False
    """A planning turn (``--plan``, ``/plan``): only read-only tools, every write or command
    refused, until the plan is approved (`PlanApproved`)."""


class TurnEnded(_Note, frozen=True, kw_only=True, tag="turn_ended"):
    """The turn closed, with why."""

    reason: TurnEndReason
    message: str | None = None
    cause: EndCause | None = None
    """Set when the turn can be resumed: a limit was reached, or the provider stayed away."""


class RunStarted(_Note, frozen=True, kw_only=True, tag="run_started"):
    """A process began (or resumed) executing the turn."""

    cause: Literal["new", "resume", "recovery"]
    pid: int | None = None
    host: str | None = None
    owner: str | None = None
    epoch: int | None = None
    """The lease (owner, epoch) that fences this run's appends: the epochs of successive runs
    prove that no two runners ever wrote to the session at once."""
    proc_start: str | None = None
    """When the process `pid` started (boot id and start ticks, where the system tells), so a
    later process that reuses the pid is not taken for this run's."""


class StepLimit(_Note, frozen=True, kw_only=True, tag="step_limit"):
    """The turn reached its step limit."""

    steps: int


class ModelSwitch(_Note, frozen=True, kw_only=True, tag="model_switch"):
    """The turn moved to another model (a fallback, or back) after transient failures."""

    from_model: str
    to_model: str
    failures: int
    reason: str


class ModelRequestNote(_Note, frozen=True, kw_only=True, tag="model_request"):
    """What the next model call was asked, committed before the call."""

    model: str
    request_digest: str
    estimated_tokens: int
    checkpoint: str | None = None
    attempt: int = 1
    purpose: Literal["turn", "summary"] = "turn"
    """"summary" for a call that builds a compaction checkpoint (traced like any other call)."""


class RecoveryNotice(_Note, frozen=True, kw_only=True, tag="recovery_notice"):
    """What recovery did, shown to the user until dismissed."""

    status: Literal["ready", "blocked"]
    silent_retries: list[str] = msgspec.field(default_factory=list)
    verified_applied: list[str] = msgspec.field(default_factory=list)
    pending_review: list[str] = msgspec.field(default_factory=list)
    dropped_model_calls: int = 0
    reason: str | None = None
    leftovers: list[str] = msgspec.field(default_factory=list)
    """Processes of the dead run that were still running and were killed (one line each)."""
    workspace_changes: list[str] = msgspec.field(default_factory=list)
    """What each interrupted call changed in the workspace, from its snapshots (`call: line`)."""
    forced: str | None = None
    """The block the user overrode with `bubu recover --force` (its reason), if any."""


class NoticeDismissed(_Note, frozen=True, kw_only=True, tag="notice_dismissed"):
    """The user dismissed the recovery notice at `notice_seq`."""

    notice_seq: int


class Compaction(_Note, frozen=True, kw_only=True, tag="compaction"):
    """A compaction checkpoint was built (or failed and the raw history is used)."""

    checkpoint: str | None
    watermark: int
    source_digest: str
    ok: bool = True
    message: str | None = None
    body_digest: str | None = None
    """The sha-256 of the `checkpoint` note committed with this one (what the view caches)."""
    chunks: int = 0
    """Summarizer calls the span took (it is summarized in chunks that fit the window)."""
    calls: list[str] = msgspec.field(default_factory=list)
    """The request digests of the summarizer calls that built the checkpoint, in order."""


class CheckpointBody(_Note, frozen=True, kw_only=True, tag="checkpoint"):
    """A checkpoint's text, committed with its `compaction` note: the log, not the view, holds it.

    `summarized_upto` is the watermark of the newest valid model summary folded in; when it is below
    `watermark` (a failed summary) the fact sheet alone covers the events in between.
    """

    key: str
    watermark: int
    source_digest: str
    summary: str
    facts: str
    model: str = ""
    prompt_version: str = ""
    previous: str | None = None
    covered_bytes: int = 0
    summarized_upto: int = 0
    chunks: int = 0
    calls: list[str] = msgspec.field(default_factory=list)


class SummaryChunk(_Note, frozen=True, kw_only=True, tag="summary_chunk"):
    """The answer of one summarizer call: chunk `chunk` of `chunks` of events `start+1..watermark`,
    folded with everything before it (the call's token usage rides on the same event)."""

    request_digest: str
    start: int
    watermark: int
    chunk: int
    chunks: int
    text: str


class WindowLearned(_Note, frozen=True, kw_only=True, tag="window_learned"):
    """The server said (in an overflow error) that it serves a window other than the one the
    turn assumed: the turn's budgets use `tokens` from here on."""

    tokens: int
    source: str


class ServerNote(_Note, frozen=True, kw_only=True, tag="server_note"):
    """What the model server turned out not to do, and what Bubu does instead (one line, e.g.
    "the server at … cannot call tools (…); the model answers in text only")."""

    text: str


class Info(_Note, frozen=True, kw_only=True, tag="info"):
    """A free-form diagnostic line for people."""

    text: str


class SessionStarted(_Note, frozen=True, kw_only=True, tag="session_started"):
    """The session's own facts where it was copied (an import, a fork), under the hash chain: its
    workspace, title and model, and where it came from. A session that was imported or forked is
    never continued by itself. (A session's own turns record its workspace and title too.)"""

    workspace: str
    title: str
    model: str | None = None
    origin: Literal["new", "import", "fork"] = "new"
    source: str | None = None
    """The session it was copied from (import, fork)."""
    source_seq: int | None = None
    source_digest: str | None = None
    """The source's chain digest at `source_seq`, the last event copied."""
    parent: str | None = None
    """The session that started this one as a sub-agent (its `delegate` call is `parent_call`):
    such a session is recovered with its parent, never by itself."""
    parent_call: str | None = None


class InstructionFile(_Base, frozen=True, kw_only=True):
    """One project instruction file as it was read: the bytes' hash and size, and the text the
    model is given (cut at the size cap); `skipped` says why a file found is not given."""

    path: str
    """Workspace-relative, with '/' (e.g. "AGENTS.md", "api/CLAUDE.md")."""
    sha256: str = ""
    """Of the file's bytes ("": the file no longer exists)."""
    size: int = 0
    text: str = ""
    truncated: bool = False
    skipped: str | None = None


class ProjectInstructions(_Note, frozen=True, kw_only=True, tag="project_instructions"):
    """AGENTS.md / CLAUDE.md files read for the model (see bubu.projections.instructions).

    `start` (hidden) is the session's first read, part of the stable prefix; `directory` and
    `changed` are visible: the model reads them in the history, so the prefix never changes.
    """

    cause: Literal["start", "directory", "changed"]
    files: list[InstructionFile] = msgspec.field(default_factory=list)


class SkillEntry(_Base, frozen=True, kw_only=True):
    """One skill as the model is told of it: its name, what it is for, where it lives, and the
    hash of its SKILL.md when it was listed."""

    name: str
    description: str
    where: str
    sha256: str = ""


class SkillsListed(_Note, frozen=True, kw_only=True, tag="skills_listed"):
    """The skills found when the session's first turn started (hidden): their names and
    descriptions are part of the stable prefix; the model reads a body with the `skill` tool."""

    skills: list[SkillEntry] = msgspec.field(default_factory=list)


class MemoryForgotten(_Note, frozen=True, kw_only=True, tag="memory_forgotten"):
    """`bubu memory forget KEY`: the workspace's note `key` is no longer recalled."""

    key: str


class TaskHeld(_Note, frozen=True, kw_only=True, tag="task_held"):
    """A fleet worker held the queued request at `request_seq`: its policy asks for more than the
    worker's ceiling allows (`reasons`, one per loosening). It waits for a person's approval."""

    request_seq: int
    reasons: list[str] = msgspec.field(default_factory=list)
    worker: str = ""
    """The lease owner of the worker that held it."""


class TaskApproved(_Note, frozen=True, kw_only=True, tag="task_approved"):
    """A person approved the held request at `request_seq` (`bubu approve-task`): a worker runs it
    under the policy it was submitted with, above its own ceiling."""

    request_seq: int
    reasons: list[str] = msgspec.field(default_factory=list)
    """What was approved: the reasons of the hold."""
    by: str = ""


class MemoryAccepted(_Note, frozen=True, kw_only=True, tag="memory_accepted"):
    """`bubu memory accept KEY`: the imported note `key`, with text hash `sha256`, written in
    session `source`, is recalled as the workspace's own from now on."""

    key: str
    sha256: str
    source: str


class WorkspaceTaken(_Note, frozen=True, kw_only=True, tag="workspace_snapshot"):
    """A snapshot of the workspace taken outside a step: the directory a task was submitted
    from (`bubu submit --snapshot`), for the worker that materializes it."""

    snapshot: WorkspaceSnapshot
    source: str
    """The directory it was taken from."""


class ChildStarted(_Note, frozen=True, kw_only=True, tag="child_started"):
    """The `delegate` call `call_id` started (or resumed) the child session `child`."""

    child: str
    call_id: str
    agent: str | None = None
    model: str = ""
    branch: str | None = None
    """The git branch of the child's own worktree (`isolation = "worktree"`), if it has one."""
    base: str | None = None
    """The commit that worktree started from."""
    resumed: bool = False
    """The child existed already (a recovery): it was continued, never started again."""


class ChildFinished(_Note, frozen=True, kw_only=True, tag="child_finished"):
    """The child session `child` of the call `call_id` ended; what it spent counts in this turn."""

    child: str
    call_id: str
    reason: str
    """How the child's turn ended (completed, failed, stopped …, or blocked)."""
    tokens: int = 0
    cost_usd: float = 0.0
    read_back: bool = False
    """The child had already finished (a recovery): its result was read back from its log."""


HookEvent = Literal[
    "PreToolUse",
    "PostToolUse",
    "UserPromptSubmit",
    "Stop",
    "SessionStart",
    "PreCompact",
    "Notification",
]
"""When a hook runs (the names Claude Code's hooks use)."""
HookDecision = Literal["none", "allow", "deny", "ask", "block"]


class HookRun(_Note, frozen=True, kw_only=True, tag="hook_run"):
    """A hook ran, and what it decided: committed before its decision takes effect, so after a
    crash the decision stands and the hook is not run again (`hook` and `call_id` name it)."""

    event: HookEvent
    hook: str
    """The hook's command line, as configured."""
    call_id: str | None = None
    """The tool call it decided on (PreToolUse, PostToolUse)."""
    decision: HookDecision = "none"
    reason: str | None = None
    """Why, in the hook's words (what the model or the person is told)."""
    updated_input: dict[str, JSON] | None = None
    """The arguments the tool runs with instead of the model's (PreToolUse)."""
    context: str | None = None
    """Text the hook adds for the model (``additionalContext``)."""
    stop: bool = False
    """The hook asked to end the turn (``"continue": false``); `reason` holds its stopReason."""
    exit_code: int | None = None
    failure: str | None = None
    """Why the hook failed (a timeout, a crash, bad JSON); its `on_error` policy decided then."""
    duration_ms: int | None = None


class PlanApproved(_Note, frozen=True, kw_only=True, tag="plan_approved"):
    """The plan of the session's planning turn was approved: from here on it acts (the switch
    from plan mode to acting, `bubu approve-plan`, `/approve` in the chat)."""

    plan: list[str] = msgspec.field(default_factory=list)
    """The steps approved (the update_plan state of the moment)."""
    by: str = "user"


ProcessKeep = Literal["turn", "session"]
"""How long a background process may run: until its turn ends, or until its session ends."""
ProcessEnd = Literal["exited", "killed", "died"]
"""How a background process ended: by itself, stopped by Bubu, or with the Bubu that ran it."""


class ProcessStarted(_Note, frozen=True, kw_only=True, tag="process_started"):
    """A background process (`run_command` with `background`) started as `handle`; `restarts`
    counts how often a restartable one was started again after a crash."""

    handle: str
    call_id: str
    command: str
    pid: int | None = None
    keep: ProcessKeep = "turn"
    restart: bool = False
    restarts: int = 0


class ProcessOutput(_Note, frozen=True, kw_only=True, tag="process_output"):
    """The next chunk of a background process's output (stdout and stderr together), stored as
    a blob in the same transaction; `offset` is where it starts in the whole output."""

    handle: str
    offset: int
    chunk: BlobRef


class ProcessEnded(_Note, frozen=True, kw_only=True, tag="process_ended"):
    """A background process ended (`code`: its exit code, when known). One that `died` with the
    Bubu that ran it is a visible note: the model is told, with its last output (`tail`), and
    whether it was started again (`restarted`)."""

    handle: str
    how: ProcessEnd
    command: str | None = None
    code: int | None = None
    reason: str | None = None
    tail: str | None = None
    restarted: bool = False


Note: TypeAlias = (
    TurnStarted
    | TurnEnded
    | RunStarted
    | StepLimit
    | ModelSwitch
    | ModelRequestNote
    | RecoveryNotice
    | NoticeDismissed
    | Compaction
    | Info
    | WindowLearned
    | ServerNote
    | SessionStarted
    | CheckpointBody
    | SummaryChunk
    | MemoryForgotten
    | MemoryAccepted
    | ProjectInstructions
    | SkillsListed
    | TaskHeld
    | TaskApproved
    | WorkspaceTaken
    | ChildStarted
    | ChildFinished
    | HookRun
    | PlanApproved
    | ProcessStarted
    | ProcessOutput
    | ProcessEnded
)


class SystemNote(_Base, frozen=True, kw_only=True, tag="system_note", tag_field="kind"):
    """A boundary or bookkeeping fact; never sent to the model."""

    note: Note


Content: TypeAlias = Text | Thinking | FunctionCall | FunctionResponse | Error | SystemNote


# ---------------------------------------------------------------------------------------------
# Actions
# ---------------------------------------------------------------------------------------------


class PermissionRequest(_Base, frozen=True, kw_only=True):
    """The agent asks whether it may run a tool call."""

    request_id: str
    call_id: str
    tool: str
    summary: str
    reason: str
    protected: bool = False
    """The call writes a protected path: only a person's answer approves it, never `--yes`."""


class PermissionDecision(_Base, frozen=True, kw_only=True):
    """The answer to a permission request; `by` says who decided."""

    request_id: str
    call_id: str
    decision: Literal["allow", "deny"]
    by: Literal["user", "policy", "flag", "nobody"]
    remember: bool = False


class TokenUsage(_Base, frozen=True, kw_only=True):
    """One model call's accounting."""

    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    """How many of `output_tokens` were reasoning, where the provider says."""
    estimated_input_tokens: int | None = None
    stop_reason: str | None = None
    cost_usd: float | None = None
    """What the call cost in USD at the prices of its time (None: the price is unknown)."""
    served_model: str | None = None
    """The model the server said answered (`model` in its response), when it said one."""
    usage_unknown: bool = False
    """The server reported no token usage: the token counts are 0 because nothing is known,
    and every view says "unknown" rather than 0."""


class ToolDispatch(_Base, frozen=True, kw_only=True):
    """T1: the call is about to run. Committed (and synced) before the tool starts.

    For a provable write `path`, `before_sha256` (None when the file did not exist) and
    `after_sha256` let recovery prove whether the write happened.
    """

    call_id: str
    tool: str
    effect: EffectClass
    args_digest: str
    path: str | None = None
    before_sha256: str | None = None
    after_sha256: str | None = None
    snapshot: WorkspaceSnapshot | None = None
    """The workspace before the turn's first call that may change it."""


RecoveryDecision = Literal["rerun", "applied", "rerun_not_applied", "interrupted", "resume"]
"""``resume``: a `delegate` call whose child session is continued (or its result read back)."""


class ToolRecovery(_Base, frozen=True, kw_only=True):
    """What recovery decided for one dangling call, and why."""

    call_id: str
    tool: str
    decision: RecoveryDecision
    reason: str
    dispatch_seq: int


class Actions(_Base, frozen=True, kw_only=True):
    """Control facts carried beside (or instead of) content."""

    state_delta: dict[str, JSON] | None = None
    permission_request: PermissionRequest | None = None
    permission_decision: PermissionDecision | None = None
    token_usage: TokenUsage | None = None
    tool_dispatch: ToolDispatch | None = None
    tool_recovery: ToolRecovery | None = None
    end_invocation: bool = False


# ---------------------------------------------------------------------------------------------
# The envelope
# ---------------------------------------------------------------------------------------------


class Event(_Base, frozen=True, kw_only=True):
    """One immutable fact. `seq` and the chain hash live beside it in the store, not inside it.

    `v` is the schema version the event was written with; it has no default so that it is always
    part of the canonical bytes (build events with `bubu.events.make`).
    """

    v: int
    id: str
    session: str
    turn: str | None = None
    run: str | None = None
    invocation: str | None = None
    role: Role
    author: Author
    status: Status | None = None
    visibility: Visibility = "visible"
    ts: int
    content: Content | None = None
    actions: Actions | None = None


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """An event as stored: its position in the session, its chain hash and the event."""

    seq: int
    hash: str
    event: Event


_PLAIN_KINDS: dict[type, str] = {
    t: str(t.__struct_config__.tag) for t in (Text, Thinking, FunctionCall, FunctionResponse, Error)
}


def kind_of(event: Event) -> str:
    """A short label for an event: the content kind, the note kind, or the first action."""
    c = event.content
    kind = _PLAIN_KINDS.get(type(c))  # every append asks: answer the common kinds from a table
    if kind is not None:
        return kind
    if isinstance(c, SystemNote):
        return str(type(c.note).__struct_config__.tag)
    if c is not None:
        return str(c.__struct_config__.tag)
    a = event.actions
    if a is not None:
        for name in Actions.__struct_fields__:
            value = getattr(a, name)
            if value not in (None, False):
                return name
    return "empty"


def make(
    *,
    session: str,
    role: Role,
    author: Author,
    ts: int,
    content: Content | None = None,
    actions: Actions | None = None,
    id: str | None = None,
    turn: str | None = None,
    run: str | None = None,
    invocation: str | None = None,
    status: Status | None = None,
    visibility: Visibility = "visible",
) -> Event:
    """A new event of the current schema version (a fresh id unless one is given)."""
    from bubu.ids import event_id

    return Event(
        v=SCHEMA_VERSION,
        id=id or event_id(),
        session=session,
        turn=turn,
        run=run,
        invocation=invocation,
        role=role,
        author=author,
        status=status,
        visibility=visibility,
        ts=ts,
        content=content,
        actions=actions,
    )
