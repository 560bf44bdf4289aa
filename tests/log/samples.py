"""A realistic session that uses every content kind, every note kind and every action.

The fixture generator and several tests share it; the coverage helpers below let a test prove,
from the vocabulary itself, that a list of events really does cover all of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import get_args

from bubu.events import (
    Actions,
    Author,
    BlobRef,
    CheckpointBody,
    ChildFinished,
    ChildStarted,
    Compaction,
    Content,
    Error,
    Event,
    FunctionCall,
    FunctionResponse,
    HookRun,
    Info,
    InstructionFile,
    MemoryForgotten,
    ModelRequestNote,
    Note,
    NoticeDismissed,
    PermissionDecision,
    PermissionRequest,
    PlanApproved,
    ProcessEnded,
    ProcessOutput,
    ProcessStarted,
    ProjectInstructions,
    RecoveryNotice,
    Role,
    RunStarted,
    ServerNote,
    SkillEntry,
    SkillsListed,
    Status,
    StepLimit,
    SummaryChunk,
    SystemNote,
    Text,
    Thinking,
    TokenUsage,
    ToolDispatch,
    ToolRecovery,
    TurnEnded,
    TurnStarted,
    WindowLearned,
    WorkspaceSnapshot,
    WorkspaceTaken,
    make,
)
from bubu.log import codec

CONTENT_KINDS = frozenset(str(c.__struct_config__.tag) for c in get_args(Content))
NOTE_KINDS = frozenset(str(n.__struct_config__.tag) for n in get_args(Note))
ACTION_NAMES = frozenset(Actions.__struct_fields__)
LATER_NOTE_KINDS = frozenset(
    {
        "checkpoint",
        "summary_chunk",
        "session_started",
        "model_switch",
        "memory_forgotten",
        "project_instructions",
        "window_learned",
        "server_note",
        "task_held",
        "task_approved",
        "workspace_snapshot",
        "memory_accepted",
        "child_started",
        "child_finished",
        "skills_listed",
        "hook_run",
        "plan_approved",
        "process_started",
        "process_output",
        "process_ended",
    }
)
"""Note kinds added to schema 1 after its fixture was written: all their fields but the ones
they are built from have defaults, and older logs (the fixture) simply do not hold them."""

BLOB = ("line of tool output that was too long to keep inline\n" * 400).encode()
"""The offloaded bytes the sample function_response refers to."""

_TS = 1_700_000_000_000
_SHA_BEFORE = "0" * 64
_SHA_AFTER = codec.sha256_hex(b"print('hello')\n")


def coverage(events: Iterable[Event]) -> tuple[set[str], set[str], set[str]]:
    """The content kinds, note kinds and action names that occur in `events`."""
    contents: set[str] = set()
    notes: set[str] = set()
    actions: set[str] = set()
    for ev in events:
        if ev.content is not None:
            contents.add(str(ev.content.__struct_config__.tag))
            if isinstance(ev.content, SystemNote):
                notes.add(str(ev.content.note.__struct_config__.tag))
        if ev.actions is not None:
            actions.update(
                name
                for name in Actions.__struct_fields__
                if getattr(ev.actions, name) not in (None, False)
            )
    return contents, notes, actions


def session_events(
    session: str, *, id_prefix: str = "evt_sample", offload: bool = True
) -> list[Event]:
    """One turn of a session, in order, touching every kind; deterministic ids and times.

    With `offload`, one function_response refers to `BLOB`, which must be appended with it.
    """
    turn, run, run2 = "trn_sample", "run_sample1", "run_sample2"
    events: list[Event] = []

    def add(
        role: Role,
        author: Author,
        content: Content | None = None,
        actions: Actions | None = None,
        *,
        run_id: str = run,
        invocation: str | None = None,
        hidden: bool = False,
        status: Status | None = None,
    ) -> None:
        n = len(events) + 1
        events.append(
            make(
                session=session,
                role=role,
                author=author,
                ts=_TS + n,
                content=content,
                actions=actions,
                id=f"{id_prefix}_{n:03d}",
                turn=turn,
                run=run_id,
                invocation=invocation,
                status=status,
                visibility="hidden" if hidden else "visible",
            )
        )

    note = SystemNote
    add(
        "system",
        "host",
        note(
            note=TurnStarted(
                model="scripted:demo.jsonl", max_steps=50, yes=True, allow_commands=["pytest -q"]
            )
        ),
        hidden=True,
    )
    add("system", "host", note(note=RunStarted(cause="new", pid=4242, host="box")), hidden=True)
    add("user", "user", Text(text="Write hello.py — and say « bonjour » 👋"))
    add(
        "system",
        "host",
        note(
            note=ModelRequestNote(
                model="scripted:demo", request_digest="ab" * 32, estimated_tokens=812
            )
        ),
        hidden=True,
        invocation="inv_1",
    )
    add(
        "model",
        "agent",
        Thinking(text="I should write the file.", signature="sig-123"),
        invocation="inv_1",
    )
    add("model", "agent", Thinking(text="", redacted="cmVkYWN0ZWQ="), invocation="inv_1")
    add(
        "model",
        "agent",
        FunctionCall(
            call_id="call_1",
            name="write_file",
            arguments={"path": "hello.py", "content": "print('hello')\n", "mode": None, "n": 1.5},
        ),
        Actions(
            token_usage=TokenUsage(
                model="scripted:demo",
                input_tokens=812,
                output_tokens=40,
                cache_read_tokens=600,
                cache_write_tokens=12,
                estimated_input_tokens=800,
                stop_reason="tool_use",
            ),
            tool_dispatch=ToolDispatch(
                call_id="call_1",
                tool="write_file",
                effect="provable_write",
                args_digest=codec.args_digest({"path": "hello.py"}),
                path="hello.py",
                before_sha256=None,
                after_sha256=_SHA_AFTER,
            ),
            end_invocation=True,
        ),
        invocation="inv_1",
    )
    add(
        "system",
        "agent",
        actions=Actions(
            permission_request=PermissionRequest(
                request_id="perm_1",
                call_id="call_1",
                tool="write_file",
                summary="write hello.py",
                reason="writes a file",
            )
        ),
        hidden=True,
    )
    add(
        "user",
        "user",
        actions=Actions(
            permission_decision=PermissionDecision(
                request_id="perm_1", call_id="call_1", decision="allow", by="user", remember=True
            )
        ),
        hidden=True,
    )
    add(
        "tool",
        "tool",
        FunctionResponse(
            call_id="call_1",
            name="write_file",
            result="wrote hello.py (15 bytes)",
            native={"type": "tool_result", "content": [{"type": "text", "text": "ok"}]},
            duration_ms=3,
        ),
        invocation="inv_2",
        status="completed",
    )
    add(
        "tool",
        "tool",
        FunctionResponse(
            call_id="call_2",
            name="run_command",
            result="line of tool output … (20000 bytes offloaded)",
            is_error=True,
            blob=(
                BlobRef(sha256=codec.sha256_hex(BLOB), size=len(BLOB), lines=BLOB.count(b"\n"))
                if offload
                else None
            ),
        ),
        invocation="inv_3",
    )
    add(
        "model",
        "host",
        Error(
            error_class="rate_limited", message="429 Too Many Requests", retryable=True, status=429
        ),
        hidden=True,
    )
    add("system", "host", note(note=StepLimit(steps=50)), hidden=True)
    add(
        "system",
        "host",
        note(
            note=Compaction(
                checkpoint="ckpt_1",
                watermark=10,
                source_digest="cd" * 32,
                ok=True,
                message="folded",
            )
        ),
        hidden=True,
    )
    add("system", "host", note(note=RunStarted(cause="recovery")), run_id=run2, hidden=True)
    add(
        "system",
        "host",
        actions=Actions(
            tool_recovery=ToolRecovery(
                call_id="call_2",
                tool="run_command",
                decision="interrupted",
                reason="a command may or may not have run",
                dispatch_seq=7,
            ),
            state_delta={"cwd": "/work", "plan": ["write", "test"], "budget": {"steps": 49}},
        ),
        run_id=run2,
        hidden=True,
    )
    add(
        "system",
        "host",
        note(
            note=RecoveryNotice(
                status="ready",
                silent_retries=["call_3"],
                verified_applied=["call_1"],
                pending_review=["call_2"],
                dropped_model_calls=1,
                reason=None,
            )
        ),
        run_id=run2,
        hidden=True,
    )
    add("user", "user", note(note=NoticeDismissed(notice_seq=17)), run_id=run2, hidden=True)
    add("model", "agent", Text(text="Done: hello.py prints hello."), run_id=run2)
    add("system", "host", note(note=Info(text="tokens: 852")), run_id=run2, hidden=True)
    add(
        "system",
        "host",
        note(note=TurnEnded(reason="completed", message="ok")),
        run_id=run2,
        status="completed",
        hidden=True,
    )
    # Kinds added to schema 1 after its fixture was written (LATER_NOTE_KINDS).
    add(
        "system",
        "system",
        note(
            note=SummaryChunk(
                request_digest="ef" * 32,
                start=0,
                watermark=10,
                chunk=1,
                chunks=1,
                text="## Goal\nWrite hello.py",
            )
        ),
        run_id=run2,
        hidden=True,
    )
    add(
        "system",
        "system",
        note(
            note=CheckpointBody(
                key="ckpt_2",
                watermark=10,
                source_digest="cd" * 32,
                summary="## Goal\nWrite hello.py",
                facts="## Facts",
                summarized_upto=10,
                chunks=1,
                calls=["ef" * 32],
            )
        ),
        run_id=run2,
        hidden=True,
    )
    add("system", "user", note(note=MemoryForgotten(key="build")), hidden=True)
    add(
        "system",
        "system",
        note(
            note=ProjectInstructions(
                cause="directory",
                files=[
                    InstructionFile(
                        path="pkg/AGENTS.md", sha256="ab" * 32, size=12, text="Use tabs.\n"
                    )
                ],
            )
        ),
    )
    add(
        "system",
        "system",
        note(
            note=SkillsListed(
                skills=[
                    SkillEntry(
                        name="release",
                        description="Cut a release.",
                        where=".bubu/skills/release",
                        sha256="cd" * 32,
                    )
                ]
            )
        ),
        hidden=True,
    )
    add(
        "system",
        "system",
        note(note=WindowLearned(tokens=4096, source="learned: the server's overflow error")),
    )
    add(
        "system",
        "system",
        note(note=ServerNote(text="the server cannot call tools; the model answers in text only")),
    )
    add(
        "system",
        "host",
        note(
            note=WorkspaceTaken(
                source="/w",
                snapshot=WorkspaceSnapshot(
                    tree=None, partial="the snapshot failed: No space left on device"
                ),
            )
        ),
        hidden=True,
    )
    add(
        "system",
        "system",
        note(
            note=ChildStarted(
                child="ses_child",
                call_id="call_9",
                agent="reviewer",
                model="scripted:/k.jsonl",
                branch="bubu/ses_child",
                base="ab" * 20,
            )
        ),
        hidden=True,
    )
    add(
        "system",
        "system",
        note(
            note=ChildFinished(
                child="ses_child", call_id="call_9", reason="completed", tokens=120, cost_usd=0.01
            )
        ),
        hidden=True,
    )
    add(
        "system",
        "host",
        note(
            note=HookRun(
                event="PreToolUse",
                hook="./no-rm.sh",
                call_id="call_2",
                decision="deny",
                reason="rm is not allowed",
                exit_code=2,
                duration_ms=12,
            )
        ),
        hidden=True,
    )
    add("system", "user", note(note=PlanApproved(plan=["read the code", "fix it"])), hidden=True)
    add(
        "system",
        "tool",
        note(
            note=ProcessStarted(
                handle="bg-1",
                call_id="call_9",
                command="python3 -m http.server",
                pid=4242,
                keep="session",
                restart=True,
            )
        ),
        hidden=True,
    )
    add(
        "system",
        "tool",
        note(
            note=ProcessOutput(
                handle="bg-1",
                offset=0,
                chunk=BlobRef(
                    sha256=codec.sha256_hex(BLOB), size=len(BLOB), lines=BLOB.count(b"\n")
                ),
            )
        ),
        hidden=True,
    )
    add(
        "system",
        "tool",
        note(
            note=ProcessEnded(
                handle="bg-1",
                how="died",
                command="python3 -m http.server",
                reason="Bubu stopped while it ran",
                tail="GET / 200",
                restarted=True,
            )
        ),
    )
    return events
