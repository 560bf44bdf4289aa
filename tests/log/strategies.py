"""Hypothesis strategies for the whole event vocabulary, built with `st.builds` over its Structs.

`CONTENT` and `NOTES` are keyed by class so a test can check that every member of the `Content`
and `Note` unions has a strategy: a kind added to the vocabulary fails that test until it is here.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import strategies as st

from bubu.events import (
    SCHEMA_VERSION as V,
)
from bubu.events import (
    Actions,
    BlobRef,
    CheckpointBody,
    ChildFinished,
    ChildStarted,
    Compaction,
    Error,
    Event,
    FunctionCall,
    FunctionResponse,
    HookRun,
    Info,
    InstructionFile,
    MemoryAccepted,
    MemoryForgotten,
    ModelRequestNote,
    ModelSwitch,
    NoticeDismissed,
    PermissionDecision,
    PermissionRequest,
    PlanApproved,
    ProcessEnded,
    ProcessOutput,
    ProcessStarted,
    ProjectInstructions,
    RecoveryNotice,
    RunStarted,
    ServerNote,
    SessionStarted,
    SkillEntry,
    SkillsListed,
    StepLimit,
    SummaryChunk,
    SystemNote,
    TaskApproved,
    TaskHeld,
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
)

# Any Unicode scalar value UTF-8 can carry (no lone surrogates: those are refused, see bad input).
texts = st.text(st.characters(codec="utf-8"), max_size=30)
short = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
opt_texts = st.none() | texts
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
counts = st.integers(min_value=0, max_value=2**31)
shas = st.binary(min_size=32, max_size=32).map(bytes.hex)
opt_shas = st.none() | shas

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | ints | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(texts, json_values, max_size=5)

NOTES: dict[type[msgspec.Struct], st.SearchStrategy[Any]] = {
    TurnStarted: st.builds(
        TurnStarted,
        model=short,
        max_steps=st.none() | counts,
        yes=st.booleans(),
        allow_commands=st.lists(short, max_size=3),
        base_url=opt_texts,
        stall_timeout=st.none() | st.floats(min_value=0.001, max_value=1e6),
        thinking_budget=st.none() | counts,
        tool_timeout=st.none() | st.floats(min_value=0.001, max_value=1e6),
        workspace=opt_texts,
        title=opt_texts,
        retry_for_s=st.none() | st.floats(min_value=0.001, max_value=1e7),
        fallback_models=st.lists(short, max_size=2),
        token_limit=st.none() | counts,
        time_limit_s=st.none() | st.floats(min_value=0.001, max_value=1e7),
        project_instructions=st.booleans(),
    ),
    TurnEnded: st.builds(
        TurnEnded,
        reason=st.sampled_from(["completed", "failed", "stopped", "suspended"]),
        message=opt_texts,
        cause=st.none()
        | st.sampled_from(["provider_unavailable", "max_steps", "max_tokens", "max_time"]),
    ),
    RunStarted: st.builds(
        RunStarted,
        cause=st.sampled_from(["new", "resume", "recovery"]),
        pid=st.none() | counts,
        host=opt_texts,
        proc_start=opt_texts,
    ),
    StepLimit: st.builds(StepLimit, steps=counts),
    ModelSwitch: st.builds(
        ModelSwitch, from_model=short, to_model=short, failures=counts, reason=texts
    ),
    ModelRequestNote: st.builds(
        ModelRequestNote,
        model=short,
        request_digest=shas,
        estimated_tokens=counts,
        checkpoint=opt_texts,
        attempt=st.integers(min_value=1, max_value=9),
        purpose=st.sampled_from(["turn", "summary"]),
    ),
    RecoveryNotice: st.builds(
        RecoveryNotice,
        status=st.sampled_from(["ready", "blocked"]),
        silent_retries=st.lists(short, max_size=3),
        verified_applied=st.lists(short, max_size=3),
        pending_review=st.lists(short, max_size=3),
        dropped_model_calls=counts,
        reason=opt_texts,
    ),
    NoticeDismissed: st.builds(NoticeDismissed, notice_seq=counts),
    Compaction: st.builds(
        Compaction,
        checkpoint=opt_texts,
        watermark=counts,
        source_digest=shas,
        ok=st.booleans(),
        message=opt_texts,
        body_digest=opt_shas,
        chunks=counts,
        calls=st.lists(shas, max_size=3),
    ),
    CheckpointBody: st.builds(
        CheckpointBody,
        key=short,
        watermark=counts,
        source_digest=shas,
        summary=texts,
        facts=texts,
        model=texts,
        previous=opt_texts,
        covered_bytes=counts,
        summarized_upto=counts,
        chunks=counts,
        calls=st.lists(shas, max_size=3),
    ),
    SummaryChunk: st.builds(
        SummaryChunk,
        request_digest=shas,
        start=counts,
        watermark=counts,
        chunk=counts,
        chunks=counts,
        text=texts,
    ),
    Info: st.builds(Info, text=texts),
    SessionStarted: st.builds(
        SessionStarted,
        workspace=texts,
        title=texts,
        model=opt_texts,
        origin=st.sampled_from(["new", "import", "fork"]),
        source=opt_texts,
        source_seq=st.none() | counts,
        source_digest=opt_shas,
        parent=opt_texts,
        parent_call=opt_texts,
    ),
    ChildStarted: st.builds(
        ChildStarted,
        child=texts,
        call_id=texts,
        agent=opt_texts,
        model=texts,
        branch=opt_texts,
        base=opt_shas,
        resumed=st.booleans(),
    ),
    ChildFinished: st.builds(
        ChildFinished,
        child=texts,
        call_id=texts,
        reason=texts,
        tokens=counts,
        cost_usd=st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False),
        read_back=st.booleans(),
    ),
    MemoryForgotten: st.builds(MemoryForgotten, key=texts),
    TaskHeld: st.builds(
        TaskHeld, request_seq=counts, reasons=st.lists(texts, max_size=3), worker=texts
    ),
    TaskApproved: st.builds(
        TaskApproved, request_seq=counts, reasons=st.lists(texts, max_size=3), by=texts
    ),
    MemoryAccepted: st.builds(MemoryAccepted, key=texts, sha256=shas, source=texts),
    WindowLearned: st.builds(WindowLearned, tokens=counts, source=texts),
    ServerNote: st.builds(ServerNote, text=texts),
    HookRun: st.builds(
        HookRun,
        event=st.sampled_from(["PreToolUse", "Stop"]),
        hook=texts,
        call_id=opt_texts,
        decision=st.sampled_from(["none", "allow", "deny", "ask", "block"]),
        reason=opt_texts,
        context=opt_texts,
        exit_code=st.none() | counts,
    ),
    PlanApproved: st.builds(PlanApproved, plan=st.lists(texts, max_size=3), by=texts),
    ProcessStarted: st.builds(
        ProcessStarted,
        handle=texts,
        call_id=texts,
        command=texts,
        pid=st.none() | counts,
        keep=st.sampled_from(["turn", "session"]),
        restart=st.booleans(),
        restarts=counts,
    ),
    ProcessOutput: st.builds(
        ProcessOutput,
        handle=texts,
        offset=counts,
        chunk=st.builds(BlobRef, sha256=shas, size=counts, lines=counts),
    ),
    ProcessEnded: st.builds(
        ProcessEnded,
        handle=texts,
        how=st.sampled_from(["exited", "killed", "died"]),
        command=opt_texts,
        code=st.none() | st.integers(min_value=-64, max_value=255),
        reason=opt_texts,
        tail=opt_texts,
        restarted=st.booleans(),
    ),
    WorkspaceTaken: st.builds(
        WorkspaceTaken,
        source=texts,
        snapshot=st.builds(
            WorkspaceSnapshot,
            tree=st.none(),  # a random log names no stored object (verify would miss it)
            files=counts,
            bytes=counts,
            skipped=counts,
            partial=opt_texts,
        ),
    ),
    SkillsListed: st.builds(
        SkillsListed,
        skills=st.lists(
            st.builds(SkillEntry, name=texts, description=texts, where=texts, sha256=shas),
            max_size=3,
        ),
    ),
    ProjectInstructions: st.builds(
        ProjectInstructions,
        cause=st.sampled_from(["start", "directory", "changed"]),
        files=st.lists(
            st.builds(
                InstructionFile,
                path=texts,
                sha256=st.just("") | shas,
                size=counts,
                text=texts,
                truncated=st.booleans(),
                skipped=opt_texts,
            ),
            max_size=3,
        ),
    ),
}

notes = st.one_of(*NOTES.values())

blob_refs = st.builds(BlobRef, sha256=shas, size=counts, lines=counts)

CONTENT: dict[type[msgspec.Struct], st.SearchStrategy[Any]] = {
    Text: st.builds(Text, text=texts),
    Thinking: st.builds(Thinking, text=texts, signature=opt_texts, redacted=opt_texts),
    FunctionCall: st.builds(
        FunctionCall,
        call_id=short,
        name=short,
        arguments=json_objects,
        raw_arguments=opt_texts,
    ),
    FunctionResponse: st.builds(
        FunctionResponse,
        call_id=short,
        name=short,
        result=texts,
        is_error=st.booleans(),
        native=json_values,
        blob=st.none() | blob_refs,
        duration_ms=st.none() | counts,
    ),
    Error: st.builds(
        Error,
        error_class=short,
        message=texts,
        retryable=st.booleans(),
        status=st.none() | st.integers(min_value=100, max_value=599),
        retry_in_ms=st.none() | counts,
    ),
    SystemNote: st.builds(SystemNote, note=notes),
}

contents = st.one_of(*CONTENT.values())

ACTIONS: dict[str, st.SearchStrategy[Any]] = {
    "state_delta": json_objects,
    "permission_request": st.builds(
        PermissionRequest, request_id=short, call_id=short, tool=short, summary=texts, reason=texts
    ),
    "permission_decision": st.builds(
        PermissionDecision,
        request_id=short,
        call_id=short,
        decision=st.sampled_from(["allow", "deny"]),
        by=st.sampled_from(["user", "policy", "flag", "nobody"]),
        remember=st.booleans(),
    ),
    "token_usage": st.builds(
        TokenUsage,
        model=short,
        input_tokens=counts,
        output_tokens=counts,
        cache_read_tokens=counts,
        cache_write_tokens=counts,
        estimated_input_tokens=st.none() | counts,
        stop_reason=opt_texts,
    ),
    "tool_dispatch": st.builds(
        ToolDispatch,
        call_id=short,
        tool=short,
        effect=st.sampled_from(["read_only", "provable_write", "side_effecting"]),
        args_digest=shas,
        path=opt_texts,
        before_sha256=opt_shas,
        after_sha256=opt_shas,
    ),
    "tool_recovery": st.builds(
        ToolRecovery,
        call_id=short,
        tool=short,
        decision=st.sampled_from(["rerun", "applied", "rerun_not_applied", "interrupted"]),
        reason=texts,
        dispatch_seq=counts,
    ),
    "end_invocation": st.booleans(),
}


@st.composite
def _actions(draw: st.DrawFn) -> Actions:
    chosen = draw(st.sets(st.sampled_from(sorted(ACTIONS)), min_size=1))
    return Actions(**{name: draw(ACTIONS[name]) for name in sorted(chosen)})


actions = _actions()
"""An `Actions` with a non-empty random subset of the action fields set."""

ids = st.none() | st.text("0123456789abcdefghjkmnpqrstvwxyz", min_size=1, max_size=16)


def events(session: str = "ses_hypothesis") -> st.SearchStrategy[Event]:
    """Any event of the current schema for `session`: some content, some actions, or both."""
    return st.builds(
        Event,
        v=st.just(V),
        id=st.text("0123456789abcdefghjkmnpqrstvwxyz", min_size=1, max_size=20).map("evt_".__add__),
        session=st.just(session),
        turn=ids,
        run=ids,
        invocation=ids,
        role=st.sampled_from(["user", "model", "tool", "system"]),
        author=st.sampled_from(["user", "host", "agent", "tool", "system"]),
        status=st.none() | st.sampled_from(["completed", "failed", "aborted", "cancelled"]),
        visibility=st.sampled_from(["visible", "hidden"]),
        ts=st.integers(min_value=0, max_value=2**48),
        content=st.none() | contents,
        actions=st.none() | actions,
    )
