"""What `bubu run` prints for the cases a newcomer meets: a provider that does not stream, text
streamed by an attempt that then failed, results of parallel calls, a failure whose reason is on
its last line, and a recovery's results for calls of the crashed run."""

from __future__ import annotations

import io
from itertools import count

from bubu.cli.render import TerminalObserver
from bubu.events import (
    Author,
    Content,
    Error,
    FunctionCall,
    FunctionResponse,
    Record,
    Role,
    Text,
    make,
)
from bubu.messages import Delta

_seq = count(1)


def _rec(role: Role, content: Content) -> Record:
    author: Author = {"model": "agent", "tool": "tool"}.get(role, "system")  # type: ignore[assignment]
    n = next(_seq)
    return Record(
        seq=n,
        hash=f"{n:064x}",
        event=make(session="s", role=role, author=author, ts=n, content=content),
    )


def _view() -> tuple[TerminalObserver, io.StringIO]:
    out = io.StringIO()
    return TerminalObserver(out, color=False), out


def test_a_provider_that_does_not_stream_has_its_answer_printed() -> None:
    obs, out = _view()
    obs.on_records([_rec("model", Text(text="Hello from a provider that does not stream."))])
    obs.close()
    assert out.getvalue() == "Hello from a provider that does not stream.\n"


def test_streamed_text_is_not_printed_twice() -> None:
    obs, out = _view()
    obs.on_delta(Delta(kind="text", text="Streamed answer."))
    obs.on_records([_rec("model", Text(text="Streamed answer."))])
    obs.on_records([_rec("model", Text(text="A second answer, not streamed."))])
    obs.close()
    assert out.getvalue() == "Streamed answer.\nA second answer, not streamed.\n"


def test_text_of_a_failed_attempt_is_marked_discarded() -> None:
    obs, out = _view()
    obs.on_delta(Delta(kind="text", text="The half ans"))
    obs.on_records(
        [
            _rec(
                "system",
                Error(error_class="stream_incomplete", message="broke off", retryable=True),
            )
        ]
    )
    obs.on_delta(Delta(kind="text", text="The whole answer."))
    obs.on_records([_rec("model", Text(text="The whole answer."))])
    obs.close()
    assert out.getvalue().splitlines() == [
        "The half ans",
        "  ↺ the text above was discarded: that attempt failed",
        "  ! stream_incomplete: broke off",
        "The whole answer.",
    ]


def test_results_of_parallel_calls_name_their_call() -> None:
    obs, out = _view()
    obs.on_records(
        [
            _rec("model", FunctionCall(call_id="c1", name="grep", arguments={"pattern": "x"})),
            _rec("model", FunctionCall(call_id="c2", name="read_file", arguments={"path": "a.py"})),
        ]
    )
    obs.on_records([_rec("tool", FunctionResponse(call_id="c2", name="read_file", result="1 a"))])
    obs.on_records([_rec("tool", FunctionResponse(call_id="c1", name="grep", result="a.py:1: x"))])
    obs.on_records(
        [_rec("model", FunctionCall(call_id="c3", name="grep", arguments={"pattern": "y"}))]
    )
    obs.on_records([_rec("tool", FunctionResponse(call_id="c3", name="grep", result="b.py:2: y"))])
    obs.close()
    assert out.getvalue().splitlines() == [
        "⏺ grep x",
        "⏺ read_file a.py",
        "  ⎿ read_file: 1 a",
        "  ⎿ grep: a.py:1: x",
        "⏺ grep y",
        "  ⎿ b.py:2: y",
    ]


def test_a_failure_shows_its_reason_from_the_last_line() -> None:
    obs, out = _view()
    obs.on_records(
        [
            _rec(
                "model",
                FunctionCall(call_id="c1", name="run_command", arguments={"command": "sleep 9"}),
            ),
            _rec(
                "tool",
                FunctionResponse(
                    call_id="c1",
                    name="run_command",
                    is_error=True,
                    result=(
                        "(no output)\ntimed out after 1s; the command and its processes were killed"
                    ),
                ),
            ),
        ]
    )
    obs.close()
    assert out.getvalue().splitlines()[-1] == (
        "  ✗ (no output) — timed out after 1s; the command and its processes were killed"
    )


def test_results_for_calls_of_a_crashed_run_name_their_tool() -> None:
    obs, out = _view()
    obs.on_records(
        [
            _rec(
                "tool",
                FunctionResponse(call_id="c9", name="edit_file", result="applied before the crash"),
            ),
        ]
    )
    obs.close()
    assert out.getvalue() == "  ⎿ edit_file: applied before the crash\n"
