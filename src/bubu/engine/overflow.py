"""What a model call that did not fit, or came back empty, leads to: a pure decision.

- A context overflow (`context_length`) whose error states the served window (llama-server's
  `n_ctx`, vLLM's "maximum context length is N") teaches the turn that window: the next request
  is compacted to fit it and sent again. Without a figure (only on the first failure in a row),
  the window is taken to be below the request that overflowed. An overflow that teaches nothing
  new ends the turn: compaction could not help.
- An empty stream (a 200 with nothing in it: llama-cpp-python's overflow) and an empty response
  (no text and no calls) are tried once more, then end the turn with that reason.

Anything else returns None: the ordinary retry policy (`attempts.after_failure`) decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from bubu.errors import ProviderError
from bubu.messages import ModelResponse, TextPart, ToolCallPart
from bubu.providers.windows import LEARNED

MIN_LEARNED_WINDOW = 2048
"""The smallest window a guess from an overflow without a figure may set."""


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
    """Record the failure and end the turn `failed` with `message`."""

    message: str


Plan = Shrink | Again | Stop


def after_overflow(e: ProviderError, *, attempt: int, window: int, estimate: int) -> Plan | None:
    """The plan for the `attempt`-th failure in a row when it is an overflow or an empty answer.

    `window` is the window the request was built for, `estimate` its calibrated size in tokens.
    """
    if e.error_class == "context_length":
        stated = e.served_window
        # A stated window below the one assumed can only shrink it: learned whatever came before.
        if stated is not None and stated < window:
            return Shrink(window=stated, source=LEARNED)
        guess = max(MIN_LEARNED_WINDOW, min(window, estimate) * 3 // 4)
        if attempt == 1 and guess < window:
            said = f"it states {stated:,}" if stated is not None else "it states no figure"
            return Shrink(window=guess, source=f"{LEARNED}: {said}; below ~{estimate:,} tokens")
        return Stop(
            message=(
                f"{e}; compacting did not make the request fit (about {estimate:,} tokens for a "
                f"window of {window:,}); start a new session, or give the server a larger window"
            )
        )
    if e.error_class in ("empty_stream", "empty_response"):
        if attempt == 1:
            return Again()
        return Stop(
            message=(
                f"{e}, {attempt} times in a row; if the server's window is smaller than Bubu "
                "assumes, pass --context-window with its size"
            )
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
    "Again",
    "Plan",
    "Shrink",
    "Stop",
    "after_overflow",
    "empty_response",
]
