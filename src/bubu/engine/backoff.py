"""How long to wait before the next model attempt, and when to give up or switch models (pure).

Transient failures (connection errors, stalls, 408/409/425/429/5xx, "overloaded") are retried with
exponential backoff and full jitter: the n-th wait is uniform in [0, min(cap, base · 2^(n-1))],
which spreads many clients over the whole window instead of having them knock together. A server
that says when to come back (`Retry-After`, `retry-after-ms`) is obeyed instead, within the same
cap. Attempts continue until the turn's horizon (`--retry-for`, default `DEFAULT_RETRY_FOR_S`)
has passed since the first failure of the streak; the last wait is cut so that the final attempt
falls on the horizon rather than after it.

The horizon: a provider incident typically lasts minutes and sometimes a few hours. Six hours
rides out nearly all of them for a task left alone over a morning or a night, while a task whose
provider is gone for longer ends in a state a person (or a worker, later) picks up again. With
waits capped at five minutes the provider is asked on average every 2.5 minutes at worst.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from bubu.projections.longrun import DEFAULT_RETRY_FOR_S

WAIT_CAP_S = 300.0
"""The longest single wait between two attempts."""
BASE_S = 1.0
"""The first wait's upper bound; it doubles with every failure of the streak."""
FALLBACK_AFTER = 3
"""Consecutive transient failures of one model after which the next model of the chain is tried."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """Wait `delay_s`, then try again, with `model` (the same or the next of the chain)."""

    delay_s: float
    model: str
    switched: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class GiveUp:
    """The horizon has passed (or the attempt cap was reached): end the turn, resumable."""

    waited_s: float


Plan: TypeAlias = Retry | GiveUp


def full_jitter(attempt: int, *, base_s: float, cap_s: float, rand: Callable[[], float]) -> float:
    """The wait after the `attempt`-th failure: uniform in [0, min(cap, base · 2^(attempt-1))]."""
    ceiling = min(cap_s, base_s * 2.0 ** min(attempt - 1, 60))
    return ceiling * rand()


def plan_retry(
    *,
    attempt: int,
    retry_after_s: float | None,
    since_ms: int,
    now_ms: int,
    retry_for_s: float,
    chain: tuple[str, ...],
    model: str,
    failures_on_model: int,
    rand: Callable[[], float],
    base_s: float = BASE_S,
    cap_s: float = WAIT_CAP_S,
    max_attempts: int | None = None,
) -> Plan:
    """What to do after the `attempt`-th transient failure in a row (the failure is counted in
    `failures_on_model`): wait and retry, switching to the next model of `chain` after
    `FALLBACK_AFTER` failures of the current one, or give up once `retry_for_s` has passed."""
    waited_s = max(0.0, (now_ms - since_ms) / 1000)
    left_s = retry_for_s - waited_s
    if left_s <= 0 or (max_attempts is not None and attempt >= max_attempts):
        return GiveUp(waited_s=waited_s)
    if len(chain) > 1 and failures_on_model >= FALLBACK_AFTER:
        # Another model is likely up: try it at once.
        at = chain.index(model) if model in chain else -1
        return Retry(delay_s=0.0, model=chain[(at + 1) % len(chain)], switched=True)
    if retry_after_s is not None:
        delay = min(cap_s, retry_after_s)
    else:
        delay = full_jitter(attempt, base_s=base_s, cap_s=cap_s, rand=rand)
    return Retry(delay_s=min(delay, left_s), model=model)


__all__ = [
    "BASE_S",
    "DEFAULT_RETRY_FOR_S",
    "FALLBACK_AFTER",
    "WAIT_CAP_S",
    "GiveUp",
    "Plan",
    "Retry",
    "full_jitter",
    "plan_retry",
]
