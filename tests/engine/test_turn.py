"""A turn driven by the scripted model, in-process, on a real SQLite file: its events, parallel
calls, calls the engine refuses, the step limit and `resume_turn`, and the script's position across
turns."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bubu.engine.driver import RunConfig
from bubu.engine.session import new_session, resume_turn, start_turn
from bubu.events import (
    Actions,
    EffectClass,
    Record,
    RunStarted,
    StepLimit,
    SystemNote,
    Text,
    TokenUsage,
    TurnStarted,
)
from bubu.log.sqlite import SQLiteStore
from bubu.providers.base import (
    AssistantMessage,
    Delta,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolResultsMessage,
    UserMessage,
)
from bubu.tools.base import ToolContext, ToolResult, WriteIntent

from .helpers import (
    call,
    calls,
    canned,
    dispatches,
    kinds,
    make_host,
    outcomes,
    results_of,
    scripted,
    turn_end,
    write_script,
)


@dataclass
class Batches:
    """An observer that keeps each append's records together, as the driver reports them."""

    appends: list[list[Record]] = field(default_factory=list)

    def on_delta(self, delta: Delta) -> None:
        """Ignore streamed text."""

    def on_records(self, records: Sequence[Record]) -> None:
        """Keep the batch."""
        if records:
            self.appends.append(list(records))

    def on_activity(self, text: str | None) -> None:
        """Ignore."""


def test_a_turn_is_a_sequence_of_appends(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"text": "Reading it.", "tool_calls": [call("read_file", path="a.txt")]},
            {"text": "Done."},
        ],
    )
    provider = scripted(script)
    info = new_session(sqlite_store, task="read a", workspace=ws, model=provider.spec)

    assert start_turn(make_host(sqlite_store, provider), info, "read a") == "completed"

    records = sqlite_store.read(info.id)
    assert kinds(records) == [
        "text",  # the user's request
        "turn_started",
        "run_started",
        "model_request",
        "text",
        "function_call",
        "tool_dispatch",
        "function_response",
        "model_request",
        "text",
        "turn_ended",
    ]
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    turns = {r.event.turn for r in records}
    runs = {r.event.run for r in records}
    assert len(turns) == 1
    assert None not in turns
    assert len(runs) == 1
    assert None not in runs
    first = records[0].event
    assert first.role == "user"
    assert first.content == Text(text="read a")
    started = records[1].event.content
    assert isinstance(started, SystemNote)
    assert isinstance(started.note, TurnStarted)
    assert started.note.model == provider.spec
    run = records[2].event.content
    assert isinstance(run, SystemNote)
    assert isinstance(run.note, RunStarted)
    assert run.note.cause == "new"

    # The model response is one invocation whose last event carries the usage.
    response = [r for r in records if r.event.role == "model"][:2]
    assert response[0].event.invocation == response[1].event.invocation is not None
    last = response[1].event.actions
    assert isinstance(last, Actions)
    assert isinstance(last.token_usage, TokenUsage)
    assert last.end_invocation
    assert response[1].event.status == "completed"

    ((call_seq, fc),) = calls(records)
    dispatch_seq, d = dispatches(records)[fc.call_id]
    ((outcome_seq, out),) = outcomes(records)[fc.call_id]
    assert call_seq < dispatch_seq < outcome_seq
    assert d.tool == "read_file"
    assert d.effect == "read_only"
    assert d.path is None
    assert not out.is_error
    assert "alpha" in out.result
    assert turn_end(records).reason == "completed"
    # The second request carried the committed result.
    assert results_of(provider.requests[1])[0].results[0].content == out.result


def test_parallel_calls_are_dispatched_together_and_paired(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    batch = [call("read_file", path="a.txt"), call("list_files"), call("grep", pattern="beta")]
    script = write_script(
        tmp_path / "s.jsonl", [{"text": "All three.", "tool_calls": batch}, {"text": "Done."}]
    )
    provider = scripted(script)
    observer = Batches()
    host = make_host(sqlite_store, provider)
    host.observer = observer
    info = new_session(sqlite_store, task="look", workspace=ws, model=provider.spec)

    assert start_turn(host, info, "look") == "completed"

    records = sqlite_store.read(info.id)
    call_ids = [c.call_id for _, c in calls(records)]
    assert len(call_ids) == 3
    with_dispatch = [
        a
        for a in observer.appends
        if any(r.event.actions and r.event.actions.tool_dispatch for r in a)
    ]
    assert len(with_dispatch) == 1, "all calls of one response are dispatched in one append"
    (dispatch_append,) = with_dispatch
    assert [
        r.event.actions.tool_dispatch.call_id
        for r in dispatch_append
        if r.event.actions and r.event.actions.tool_dispatch
    ] == call_ids
    first_outcome = min(seq for o in outcomes(records).values() for seq, _ in o)
    assert dispatch_append[-1].seq < first_outcome, "every dispatch is committed before any outcome"
    assert {k: len(v) for k, v in outcomes(records).items()} == dict.fromkeys(call_ids, 1)

    second = provider.requests[1]
    assistant = [m for m in second.messages if isinstance(m, AssistantMessage)]
    assert [p.call_id for p in assistant[0].parts if isinstance(p, ToolCallPart)] == call_ids
    index = second.messages.index(assistant[0])
    following = second.messages[index + 1]
    assert isinstance(following, ToolResultsMessage)
    assert [r.call_id for r in following.results] == call_ids
    assert "beta" in following.results[2].content


def test_unknown_tool_and_bad_json_are_results_the_model_sees(
    sqlite_store: SQLiteStore, ws: Path
) -> None:
    provider = canned(
        [
            ModelResponse(
                parts=(
                    ToolCallPart(call_id="u1", name="frobnicate", arguments={"x": 1}),
                    ToolCallPart(
                        call_id="j1",
                        name="read_file",
                        arguments={},
                        raw_arguments='{"path": "a.t',
                    ),
                    ToolCallPart(call_id="ok", name="read_file", arguments={"path": "a.txt"}),
                ),
                stop_reason="tool_use",
            ),
            ModelResponse(parts=(TextPart(text="I see."),), stop_reason="end_turn"),
        ]
    )
    info = new_session(sqlite_store, task="try", workspace=ws, model=provider.spec)

    assert start_turn(make_host(sqlite_store, provider), info, "try") == "completed"

    records = sqlite_store.read(info.id)
    fc = {c.call_id: c for _, c in calls(records)}
    assert fc["j1"].raw_arguments == '{"path": "a.t'
    d = dispatches(records)
    assert set(d) == {"ok"}, "refused calls never reach a dispatch"
    got = {k: v[0][1] for k, v in outcomes(records).items()}
    assert got["u1"].is_error
    assert "unknown tool 'frobnicate'" in got["u1"].result
    assert "read_file" in got["u1"].result, "the error lists the tools that exist"
    assert got["j1"].is_error
    assert "not valid JSON" in got["j1"].result
    assert not got["ok"].is_error
    (results,) = results_of(provider.requests[1])
    seen = {r.call_id: r for r in results.results}
    assert [r.call_id for r in results.results] == ["u1", "j1", "ok"]
    assert seen["u1"].is_error
    assert seen["u1"].content == got["u1"].result
    assert seen["j1"].is_error
    assert seen["j1"].content == got["j1"].result


def test_step_limit_stops_the_turn_and_resume_continues(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    lines = [
        {"text": f"step {i}", "tool_calls": [call("read_file", path="a.txt")]} for i in range(3)
    ] + [{"text": "finished"}]
    script = write_script(tmp_path / "s.jsonl", lines)
    limited = RunConfig(max_steps=2, backoff_s=0.001)
    provider = scripted(script)
    info = new_session(sqlite_store, task="loop", workspace=ws, model=provider.spec)

    assert start_turn(make_host(sqlite_store, provider, config=limited), info, "loop") == "stopped"

    records = sqlite_store.read(info.id)
    end = turn_end(records)
    assert end.reason == "stopped"
    assert end.message is not None
    assert "step limit" in end.message
    notes = [r.event.content.note for r in records if isinstance(r.event.content, SystemNote)]
    assert StepLimit(steps=2) in notes
    assert list(_model_texts(records)) == ["step 0", "step 1"]
    assert len(provider.requests) == 2

    again = scripted(script)
    assert resume_turn(make_host(sqlite_store, again, config=limited), info) == "completed"

    records = sqlite_store.read(info.id)
    assert _model_texts(records) == ["step 0", "step 1", "step 2", "finished"]
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    causes = [
        n.cause
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(n := c.note, RunStarted)
    ]
    assert causes == ["new", "resume"]
    assert len({r.event.turn for r in records}) == 1, "resume continues the same turn"
    assert turn_end(records).reason == "completed"
    assert {k: len(v) for k, v in outcomes(records).items()} == {
        c.call_id: 1 for _, c in calls(records)
    }


def test_script_position_comes_from_the_log(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"text": "first", "tool_calls": [call("read_file", path="a.txt")]},
            {"text": "second"},
            {"text": "third"},
        ],
    )
    info = new_session(sqlite_store, task="one", workspace=ws, model=f"scripted:{script}")
    assert start_turn(make_host(sqlite_store, scripted(script)), info, "one") == "completed"
    # A new provider instance (as in a new process) knows nothing; the log says where it is.
    fresh = scripted(script)
    assert start_turn(make_host(sqlite_store, fresh), info, "two") == "completed"

    records = sqlite_store.read(info.id)
    assert _model_texts(records) == ["first", "second", "third"]
    assert fresh.requests[0].ordinal == 2
    users = [m for m in fresh.requests[0].messages if isinstance(m, UserMessage)]
    assert [u.text for u in users] == ["one", "two"]
    assert len({r.event.turn for r in records}) == 2


def _model_texts(records: Sequence[Record]) -> list[str]:
    return [
        c.text
        for r in records
        if r.event.role == "model" and isinstance(c := r.event.content, Text) and c.text
    ]


@dataclass
class Probe:
    """A read-only tool that looks, from its own connection, at what the log holds when it runs."""

    db: Path
    session: str
    seen: list[set[str]] = field(default_factory=list)
    name: str = "probe"
    description: str = "Look at the log."
    parameters: dict[str, object] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    effect: EffectClass = "read_only"

    def permission(self, args: dict[str, object], ctx: ToolContext) -> str | None:
        """Never asks."""
        return None

    def prepare(self, args: dict[str, object], ctx: ToolContext) -> WriteIntent | None:
        """Not a write."""
        return None

    def run(
        self, args: dict[str, object], ctx: ToolContext, intent: WriteIntent | None
    ) -> ToolResult:
        """Record the dispatched call ids that are committed now."""
        with SQLiteStore(self.db) as store:
            self.seen.append(set(dispatches(store.read(self.session))))
        return ToolResult(output="looked")


def test_tools_start_only_after_the_dispatch_is_committed(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    batch = [call("probe"), call("write_file", path="new.txt", content="new\n"), call("probe")]
    script = write_script(tmp_path / "s.jsonl", [{"tool_calls": batch}, {"text": "ok"}])
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    probe = Probe(db=tmp_path / "bubu.db", session=info.id)
    host = make_host(sqlite_store, provider)
    host.tools = {**host.tools, "probe": probe}

    assert start_turn(host, info, "t") == "completed"

    records = sqlite_store.read(info.id)
    ids = [c.call_id for _, c in calls(records)]
    assert probe.seen == [set(ids), set(ids)], "each tool saw every dispatch of its batch committed"
    _, write = dispatches(records)[ids[1]]
    assert write.effect == "provable_write"
    assert write.path == str(ws / "new.txt")
    assert write.before_sha256 is None
    assert write.after_sha256 == hashlib.sha256(b"new\n").hexdigest()


def test_an_edit_dispatch_records_the_hashes_before_and_after(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    edit = call("edit_file", path="a.txt", old="alpha", new="omega")
    script = write_script(tmp_path / "s.jsonl", [{"tool_calls": [edit]}, {"text": "ok"}])
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    assert start_turn(make_host(sqlite_store, provider), info, "t") == "completed"

    ((_, d),) = dispatches(sqlite_store.read(info.id)).values()
    assert d.before_sha256 == hashlib.sha256(b"alpha\n").hexdigest()
    assert d.after_sha256 == hashlib.sha256(b"omega\n").hexdigest()
    assert (ws / "a.txt").read_text() == "omega\n"
