"""What a model call that did not fit, or came back empty, leads to: a pure decision.

- A context overflow (`context_length`) whose error states the served window (llama-server's
  `n_ctx`, vLLM's "maximum context length is N") teaches the turn that window: the next request
  is compacted to fit it and sent again. Without a figure (only on the first failure in a row),
  the window is taken to be below the request that overflowed. An overflow that teaches nothing
  new ends the turn: compaction could not help.
- An empty stream (a 200 with nothing in it: llama-cpp-python's overflow, or its answer to a
  streamed tool call) and an empty response (no text and no calls) are odd answers, counted in a
  row on their own (an outage before them does not count): the first is asked again at once, the
  next ones are waited out by the retry policy within the horizon, and `ODD_ANSWER_LIMIT` of them
  in a row end the turn resumably (`provider_unavailable`), never `failed` for good.

Anything else returns None: the ordinary retry policy (`attempts.after_failure`) decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from bubu.errors import ProviderError
from bubu.events import EndCause
from bubu.messages import ModelResponse, TextPart, ToolCallPart
from bubu.projections.longrun import ODD_ANSWERS
from bubu.providers.windows import LEARNED

MIN_LEARNED_WINDOW = 2048
"""The smallest window a guess from an overflow without a figure may set."""
ODD_ANSWER_LIMIT = 6
"""Odd answers (empty stream, empty response) in a row after which the turn ends resumably."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Shrink:
    """Record the failure and that the server serves `window` tokens, then call again (the
    request is compacted to the new window first)."""

    window: int
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Again:
    """Record the failure and call again at once."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Stop:
    """Record the failure and end the turn `failed` with `message` (resumable when `cause`)."""

    message: str
    cause: EndCause | None = None


Plan = Shrink | Again | Stop


def after_overflow(e: ProviderError, *, in_a_row: int, window: int, estimate: int) -> Plan | None:
    """The plan for an overflow or an odd answer that is the `in_a_row`-th of its kind in a row
    (this one included: overflows and odd answers are counted apart from other failures).

    `window` is the window the request was built for, `estimate` its calibrated size in tokens.
    """
    if e.error_class == "context_length":
        stated = e.served_window
        # A stated window below the one assumed can only shrink it: learned whatever came before.
        if stated is not None and stated < window:
            return Shrink(window=stated, source=LEARNED)
        guess = max(MIN_LEARNED_WINDOW, min(window, estimate) * 3 // 4)
        if in_a_row == 1 and guess < window:
            said = f"it states {stated:,}" if stated is not None else "it states no figure"
            return Shrink(window=guess, source=f"{LEARNED}: {said}; below ~{estimate:,} tokens")
        return Stop(
            message=(
                f"{e}; compacting did not make the request fit (about {estimate:,} tokens for a "
                f"window of {window:,}); start a new session, or give the server a larger window"
            )
        )
    if e.error_class in ODD_ANSWERS:
        if in_a_row == 1:
            return Again()
        if in_a_row < ODD_ANSWER_LIMIT:
            return None  # waited out like any transient failure
        return Stop(
            message=(
                f"{e}, {in_a_row} times in a row; if the server's window is smaller than Bubu "
                "assumes, pass --context-window with its size"
            ),
            cause="provider_unavailable",
        )
    return None


def empty_response(response: ModelResponse, spec: str) -> None:
    """Raise `empty_response` for a complete answer with no text and no calls (thinking alone
    does not count: the turn cannot go on from it)."""
    for part in response.parts:
        if isinstance(part, ToolCallPart) or (isinstance(part, TextPart) and part.text.strip()):
            return
    if response.stop_reason == "max_tokens":
        return  # cut off while thinking: the turn says so itself
    raise ProviderError(
        f"{spec} answered with neither text nor a tool call",
        retryable=True,
        error_class="empty_response",
    )


__all__ = [
    "MIN_LEARNED_WINDOW",
    "ODD_ANSWER_LIMIT",
    "Again",
    "Plan",
    "Shrink",
    "Stop",
    "after_overflow",
    "empty_response",
]
