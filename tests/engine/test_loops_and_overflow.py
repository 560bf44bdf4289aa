"""The pure decisions beside `decide`: a model stuck on one failing call (loops.py), and what an
overflow or an empty answer leads to (overflow.py)."""

from __future__ import annotations

import pytest

from bubu.engine.loops import GoOn, Stuck, failures_before, verdict, warning
from bubu.engine.overflow import (
    ODD_ANSWER_LIMIT,
    Again,
    Shrink,
    Stop,
    after_overflow,
    empty_response,
)
from bubu.errors import ProviderError
from bubu.messages import ModelResponse, TextPart, ThinkingPart, ToolCallPart
from bubu.projections.turn import CallState, TurnFold


def _call(
    n: int, name: str = "read_file", *, failed: bool = True, raw: str | None = None, **args: object
) -> CallState:
    return CallState(
        call_id=f"c{n}",
        name=name,
        arguments=dict(args or {"path": "x"}),
        raw_arguments=raw,
        call_seq=n * 10,
        invocation=None,
        outcome_seq=n * 10 + 1,
        outcome_error=failed,
    )


def test_the_same_failing_call_is_counted_since_it_last_succeeded() -> None:
    calls = [_call(1), _call(2), _call(3, failed=False), _call(4)]
    assert failures_before(calls, _call(5)) == 1
    assert warning(calls, _call(5)) is None, "the second failure since the success"
    calls.append(_call(5))
    assert warning(calls, _call(6)) == "this exact call has failed 3 times; change approach"


def test_other_arguments_or_another_tool_are_another_call() -> None:
    calls = [_call(1), _call(2, path="y"), _call(3, "list_files"), _call(4, raw="{bad"), _call(5)]
    assert failures_before(calls, _call(6)) == 2
    # Argument order does not make two calls different.
    a = _call(7, path="x", offset=1)
    b = _call(8, offset=1, path="x")
    assert failures_before([a], b) == 1
    assert failures_before([_call(9, raw="{bad")], _call(10, raw="{bad")) == 1


def test_the_turn_stops_at_the_fifth_failure_in_this_run() -> None:
    four = [_call(i) for i in range(1, 5)]
    assert verdict(four) == GoOn()
    five = [*four, _call(5)]
    stuck = verdict(five)
    assert stuck == Stuck("read_file", 5)
    assert isinstance(stuck, Stuck)
    assert "read_file with the same arguments 5 times" in stuck.message
    # A resumed run (started after those outcomes) gives the model its chances again.
    assert verdict(five, after_seq=51) == GoOn()
    # The last call succeeding, or being another call, is no loop.
    assert verdict([*five, _call(6, failed=False)]) == GoOn()
    assert verdict([*five, _call(6, path="other")]) == GoOn()


@pytest.mark.parametrize(
    "calls",
    [
        [_call(i) for i in range(1, 6)],
        [*[_call(i) for i in range(1, 6)], _call(6, failed=False)],
        [*[_call(i) for i in range(1, 6)], _call(6, path="other")],
        [_call(1, failed=False)],
    ],
    ids=["stuck", "then-ok", "then-other", "one-ok"],
)
@pytest.mark.parametrize("after_seq", [0, 31, 51, 61])
def test_the_last_finished_call_given_gives_the_same_verdict(
    calls: list[CallState], after_seq: int
) -> None:
    """The fold's last finished call is a shortcut, never another answer."""
    last = max(calls, key=lambda c: c.outcome_seq or 0)
    assert verdict(calls, after_seq=after_seq, last=last) == verdict(calls, after_seq=after_seq)


def last_of(fold: TurnFold) -> CallState | None:
    """The fold's last finished call, read afresh (each feed changes it)."""
    return fold.last_outcome


def test_the_fold_names_the_call_finished_last() -> None:
    from bubu.events import FunctionCall, FunctionResponse, make
    from bubu.events import Record as Rec

    fold = TurnFold()
    seq = 0

    def feed(**kw: object) -> None:
        nonlocal seq
        seq += 1
        fold.apply(Rec(seq=seq, hash="0" * 64, event=make(session="s", turn=None, ts=0, **kw)))  # type: ignore[arg-type]

    feed(
        role="model",
        author="agent",
        content=FunctionCall(call_id="a", name="read_file", arguments={}),
    )
    feed(role="model", author="agent", content=FunctionCall(call_id="b", name="grep", arguments={}))
    assert last_of(fold) is None
    feed(
        role="tool",
        author="tool",
        content=FunctionResponse(call_id="b", name="grep", result="x", is_error=True),
    )
    feed(
        role="tool",
        author="tool",
        content=FunctionResponse(call_id="a", name="read_file", result="y"),
    )
    last = last_of(fold)
    assert last is not None
    assert (last.call_id, last.outcome_error) == ("a", False)


def _error(error_class: str, window: int | None = None) -> ProviderError:
    e = ProviderError("the server said no", error_class=error_class, status=400)
    e.served_window = window
    return e


def test_an_overflow_that_states_the_window_teaches_it_once() -> None:
    plan = after_overflow(_error("context_length", 4096), in_a_row=1, window=32_768, estimate=5000)
    assert plan == Shrink(window=4096, source="the server's overflow error")
    # After another failure (a 503 first), a stated window is still learned.
    later = after_overflow(_error("context_length", 4096), in_a_row=2, window=32_768, estimate=5000)
    assert isinstance(later, Shrink)
    again = after_overflow(_error("context_length", 4096), in_a_row=2, window=4096, estimate=5000)
    assert isinstance(again, Stop)
    assert (
        "compacting did not make the request fit (about 5,000 tokens for a window of 4,096)"
        in again.message
    )


def test_an_overflow_without_a_figure_takes_the_window_to_be_below_the_request() -> None:
    plan = after_overflow(_error("context_length"), in_a_row=1, window=32_768, estimate=8000)
    assert isinstance(plan, Shrink)
    assert plan.window == 6000
    assert "no figure" in plan.source
    # A request already at the smallest window cannot be helped.
    tiny = after_overflow(_error("context_length"), in_a_row=1, window=2048, estimate=1500)
    assert isinstance(tiny, Stop)


@pytest.mark.parametrize("error_class", ["empty_stream", "empty_response"])
def test_an_odd_answer_is_asked_again_at_once_then_waited_out_then_ends_resumably(
    error_class: str,
) -> None:
    assert after_overflow(_error(error_class), in_a_row=1, window=8192, estimate=100) == Again()
    for n in range(2, ODD_ANSWER_LIMIT):
        # Left to the retry policy: backed off and bounded by the horizon.
        assert after_overflow(_error(error_class), in_a_row=n, window=8192, estimate=100) is None
    stop = after_overflow(_error(error_class), in_a_row=ODD_ANSWER_LIMIT, window=8192, estimate=100)
    assert isinstance(stop, Stop)
    assert stop.cause == "provider_unavailable", "resumable, never failed for good"
    assert f"{ODD_ANSWER_LIMIT} times in a row" in stop.message


def test_other_failures_are_left_to_the_retry_policy() -> None:
    assert after_overflow(_error("rate_limited"), in_a_row=1, window=8192, estimate=100) is None


def test_an_answer_with_neither_text_nor_a_call_is_empty() -> None:
    with pytest.raises(ProviderError) as caught:
        empty_response(
            ModelResponse(parts=(TextPart(text="  \n"), ThinkingPart(text="hm"))), "openai:m"
        )
    assert caught.value.error_class == "empty_response"
    assert str(caught.value) == "openai:m answered with neither text nor a tool call"
    empty_response(ModelResponse(parts=(TextPart(text="ok"),)), "openai:m")
    empty_response(ModelResponse(parts=(ToolCallPart(call_id="c", name="n", arguments={}),)), "m")
    empty_response(
        ModelResponse(parts=(), stop_reason="max_tokens"), "m"
    )  # cut off: said elsewhere
