"""What a failed model attempt leads to: the facts to record, and whether to wait or to end.

Pure (the clock and the random source are passed in): the driver records what `after_failure`
returns and, when it says to wait, sleeps interruptibly for `delay_s`. The wait is recorded on the
failed attempt's `error` event (`retry_in_ms`), so anyone reading the log sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from bubu.engine.backoff import DEFAULT_RETRY_FOR_S, GiveUp, plan_retry
from bubu.errors import ProviderError
from bubu.events import EndCause, Error, ModelSwitch
from bubu.projections.longrun import LongRunFold, format_duration

SAME_ANSWER_LIMIT = 3
"""Identical answers in a row to one request after which a server fault that repeats for the
request (`ProviderError.repeats_for_the_request`) ends the turn instead of being waited out --
once the server has shown it is up, or the answers have gone on for `SAME_ANSWER_WINDOW_S`."""
SAME_ANSWER_WINDOW_S = 900.0
"""How long the same answer must go on, from a server not shown up, before it counts as this
request being broken rather than an outage."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """Record `error` (and `switch`), wait `delay_s`, then make the next attempt."""

    error: Error
    delay_s: float
    switch: ModelSwitch | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class End:
    """Record `error`, then end the turn `failed` with `message` (and `cause` when resumable)."""

    error: Error
    message: str
    cause: EndCause | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Knobs:
    """The host's retry settings (`RunConfig`); the turn's recorded horizon wins over these."""

    retry_for_s: float | None = None
    base_s: float = 1.0
    cap_s: float = 300.0
    max_attempts: int | None = None


def wanted_model(fold: LongRunFold, primary: str) -> str | None:
    """The model the log says the turn is on, or None for the primary (this host's provider,
    even where the turn recorded another spec: a model given on resume, a fork run elsewhere)."""
    want = fold.model
    if want is None or want in (fold.primary, primary):
        return None
    return want


def after_failure(
    e: ProviderError,
    *,
    attempt: int,
    fold: LongRunFold,
    knobs: Knobs,
    primary: str,
    current: str,
    now_ms: int,
    session: str,
    rand: Callable[[], float],
) -> Retry | End:
    """What the `attempt`-th failure in a row (not yet folded into `fold`) leads to."""
    error = Error(error_class=e.error_class, message=str(e), retryable=e.retryable, status=e.status)
    if not e.retryable:
        return End(error=error, message=str(e))
    last = fold.last_error
    since = fold.since_ms if fold.streak and fold.since_ms is not None else now_ms
    if (
        e.repeats_for_the_request
        and last is not None
        and (last.status, last.message) == (e.status, str(e))
        and fold.same_in_a_row + 1 >= SAME_ANSWER_LIMIT
        # Never during an outage: only a server that answers other requests, or a long window.
        and (e.server_up or now_ms - since >= SAME_ANSWER_WINDOW_S * 1000)
    ):
        message = (
            f"{e}; the server gave this same answer {fold.same_in_a_row + 1} times in a row to "
            f"the same request, so waiting will not change it; `bubu resume {session}` asks again"
        )
        return End(error=error, message=message, cause="provider_unavailable")
    horizon = fold.retry_for_s or knobs.retry_for_s or DEFAULT_RETRY_FOR_S
    plan = plan_retry(
        attempt=attempt,
        retry_after_s=e.retry_after,
        since_ms=since,
        now_ms=now_ms,
        retry_for_s=horizon,
        chain=tuple(dict.fromkeys([primary, *fold.fallbacks])),
        model=current,
        failures_on_model=fold.streak_on_model + 1,
        rand=rand,
        base_s=knobs.base_s,
        cap_s=knobs.cap_s,
        max_attempts=knobs.max_attempts,
    )
    if isinstance(plan, GiveUp):
        message = (
            f"gave up waiting for the provider after {attempt} attempts over "
            f"{format_duration(plan.waited_s)} (the retry horizon is {format_duration(horizon)}, "
            f"--retry-for); the last error: {e}; `bubu resume {session}` continues the turn"
        )
        return End(error=error, message=message, cause="provider_unavailable")
    delay = plan.delay_s
    if fold.time_limit_s is not None:
        # Never wait past the turn's time limit: the loop stops the turn there instead.
        left_ms = fold.time_limit_s * 1000 - fold.running_ms(now_ms)
        delay = min(delay, max(0.0, left_ms / 1000))
    switch = None
    if plan.switched:
        switch = ModelSwitch(
            from_model=current,
            to_model=plan.model,
            failures=fold.streak_on_model + 1,
            reason=f"{e.error_class}: {e}",
        )
    recorded = msgspec.structs.replace(error, retry_in_ms=round(delay * 1000))
    return Retry(error=recorded, delay_s=delay, switch=switch)


__all__ = [
    "SAME_ANSWER_LIMIT",
    "SAME_ANSWER_WINDOW_S",
    "End",
    "Knobs",
    "Retry",
    "after_failure",
    "wanted_model",
]
