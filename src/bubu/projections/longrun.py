"""What a long turn has used and what it is waiting for, folded from the log.

Three things a person (and the engine) ask of an open turn, all answered from events alone:

- **the budget**: model calls, tokens and running time used since the turn last (re)started,
  against the limits recorded with that start (`TurnStarted`);
- **the wait**: whether the turn is waiting out a provider failure: the attempt that failed, the
  planned delay the failed attempt recorded, since when the provider has been failing;
- **the model**: which model of the turn's chain (primary, then fallbacks) is in use now.

Running time is the sum, over the turn's runs, of the time from a run's start to its last event,
plus the time since the start of the run in progress; time a turn sat stopped, or dead before a
recovery, does not count. Like every projection this never reads the clock: callers pass `now_ms`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeGuard

import msgspec

from bubu.events import (
    ChildFinished,
    EndCause,
    Error,
    ModelRequestNote,
    ModelSwitch,
    Record,
    RunStarted,
    SystemNote,
    TurnEnded,
    TurnStarted,
)

ODD_ANSWERS = frozenset({"empty_stream", "empty_response"})
"""Answers a working server sent that hold nothing to go on (an empty stream, an answer with
neither text nor a call): the server is up, and the next answer is likely fine."""

DEFAULT_RETRY_FOR_S = 6 * 3600.0
"""How long transient provider failures are waited out by default (`bubu.engine.backoff`)."""


class Waiting(msgspec.Struct, frozen=True, kw_only=True):
    """The turn is waiting out a transient provider failure before its next attempt."""

    attempt: int
    """The attempt that failed last; the next one is `attempt + 1`."""
    next_at_ms: int
    since_ms: int
    """When the first failure of this streak happened."""
    model: str
    error_class: str
    message: str
    status: int | None
    in_flight: bool = False
    """The next attempt has been made and has not answered yet."""


class LimitHit(msgspec.Struct, frozen=True, kw_only=True):
    """A limit of the turn that was reached, named for the person who set it."""

    cause: EndCause
    message: str
    steps: int | None = None


class LongRunFold(msgspec.Struct, kw_only=True):
    """The latest turn's budget, failure streak and current model (see the module docstring)."""

    turn: str | None = None
    open: bool = False
    primary: str | None = None
    fallbacks: tuple[str, ...] = ()
    retry_for_s: float | None = None
    max_steps: int | None = None
    token_limit: int | None = None
    time_limit_s: float | None = None
    steps: int = 0
    tokens: int = 0
    run_ms: int = 0
    """Running time of the runs before the current one, since the last (re)start."""
    run_start_ms: int | None = None
    last_ms: int | None = None
    streak: int = 0
    """Failed model attempts in a row (reset by a model response, a (re)start of the turn)."""
    streak_on_model: int = 0
    """Failed attempts in a row on the current model (reset by a switch and by a new run)."""
    since_ms: int | None = None
    last_error: Error | None = None
    last_error_ms: int | None = None
    same_in_a_row: int = 0
    """How many of the streak's last failures were word for word `last_error` (status and
    message)."""
    odd_in_a_row: int = 0
    """How many of the streak's last failures were odd answers (`ODD_ANSWERS`) in a row: counted
    on their own, so an outage before them does not make the first one look repeated."""
    overflows_in_a_row: int = 0
    """How many of the streak's last failures were context overflows in a row."""
    last_attempt: int = 0
    retrying: bool = False
    """An attempt was made after the last failure and has not answered yet."""
    model: str | None = None
    """The model in use now; None until a turn starts."""
    end_cause: EndCause | None = None
    _last_invocation: str | None = None
    _children: set[str] = msgspec.field(default_factory=set)
    """Sub-agents whose spend is counted in `tokens`."""

    def apply(self, r: Record) -> None:
        """Fold one record in (in seq order, each once)."""
        ev = r.event
        c = ev.content
        if isinstance(c, SystemNote):
            n = c.note
            if isinstance(n, TurnStarted):
                self._started(r, n)
            elif isinstance(n, RunStarted):
                self._close_run()
                self.run_start_ms = ev.ts
                self.model, self.streak_on_model = self.primary, 0
            elif isinstance(n, TurnEnded):
                self._close_run()
                self.open, self.end_cause = False, n.cause
            elif isinstance(n, ModelRequestNote):
                self.last_attempt = n.attempt
                self.retrying = self.last_error is not None
            elif isinstance(n, ModelSwitch):
                self.model, self.streak_on_model = n.to_model, 0
            elif self._counts(n, ev.turn):
                self.tokens += n.tokens
        elif isinstance(c, Error) and ev.turn == self.turn and self.open:
            if self.streak == 0:
                self.since_ms = ev.ts
            self.streak += 1
            self.streak_on_model += 1
            last = self.last_error
            same = last is not None and (last.status, last.message) == (c.status, c.message)
            self.same_in_a_row = self.same_in_a_row + 1 if same else 1
            odd = c.error_class in ODD_ANSWERS
            self.odd_in_a_row = self.odd_in_a_row + 1 if odd else 0
            overflow = c.error_class == "context_length"
            self.overflows_in_a_row = self.overflows_in_a_row + 1 if overflow else 0
            self.last_error, self.last_error_ms = c, ev.ts
            self.retrying = False
        a = ev.actions
        if ev.role == "model" and ev.turn == self.turn and self.open:
            if ev.invocation != self._last_invocation:
                self._last_invocation = ev.invocation
                self.steps += 1
                self.streak = self.streak_on_model = 0
                self.since_ms = self.last_error = self.last_error_ms = None
                self.same_in_a_row = self.odd_in_a_row = self.overflows_in_a_row = 0
            if a is not None and a.token_usage is not None:
                self.tokens += a.token_usage.input_tokens + a.token_usage.output_tokens
        if self.run_start_ms is not None:
            self.last_ms = max(self.last_ms or ev.ts, ev.ts)

    def _counts(self, n: object, turn: str | None) -> TypeGuard[ChildFinished]:
        """A sub-agent's end in the open turn, not counted yet (a child read back counts once)."""
        if not isinstance(n, ChildFinished) or turn != self.turn or not self.open:
            return False
        if n.child in self._children:
            return False
        self._children.add(n.child)
        return True

    def _started(self, r: Record, n: TurnStarted) -> None:
        self._close_run()
        self.turn, self.open, self.end_cause = r.event.turn, True, None
        self.primary = self.model = n.model
        self.fallbacks = tuple(n.fallback_models)
        self.retry_for_s, self.max_steps = n.retry_for_s, n.max_steps
        self.token_limit, self.time_limit_s = n.token_limit, n.time_limit_s
        self.steps = self.tokens = self.run_ms = 0
        self._children = set()
        self.run_start_ms = self.last_ms = None
        self.streak = self.streak_on_model = 0
        self.since_ms = self.last_error = self.last_error_ms = None
        self.same_in_a_row = self.odd_in_a_row = self.overflows_in_a_row = 0

    def _close_run(self) -> None:
        if self.run_start_ms is not None and self.last_ms is not None:
            self.run_ms += max(0, self.last_ms - self.run_start_ms)
        self.run_start_ms = self.last_ms = None

    # -- questions --------------------------------------------------------------------------------

    @property
    def chain(self) -> tuple[str, ...]:
        """The turn's models in the order they are tried: the primary, then each fallback."""
        primary = (self.primary,) if self.primary is not None else ()
        return tuple(dict.fromkeys([*primary, *self.fallbacks]))

    def running_ms(self, now_ms: int) -> int:
        """Time the turn has run since its last (re)start, the run in progress counted to now."""
        live = 0
        if self.open and self.run_start_ms is not None:
            live = max(0, now_ms - self.run_start_ms)
        return self.run_ms + live

    def waiting(self) -> Waiting | None:
        """The wait in progress, if the last thing the open turn did was a retryable failure."""
        e = self.last_error
        if not self.open or e is None or e.retry_in_ms is None or self.last_error_ms is None:
            return None
        return Waiting(
            attempt=self.last_attempt - 1 if self.retrying else self.last_attempt,
            in_flight=self.retrying,
            next_at_ms=self.last_error_ms + e.retry_in_ms,
            since_ms=self.since_ms if self.since_ms is not None else self.last_error_ms,
            model=self.model or self.primary or "",
            error_class=e.error_class,
            message=e.message,
            status=e.status,
        )

    def limit_hit(self, now_ms: int) -> LimitHit | None:
        """The first limit of the turn that has been reached, or None."""
        if self.max_steps is not None and self.steps >= self.max_steps:
            return LimitHit(
                cause="max_steps",
                message=f"the step limit of {self.max_steps} model calls was reached",
                steps=self.max_steps,
            )
        if self.token_limit is not None and self.tokens >= self.token_limit:
            return LimitHit(
                cause="max_tokens",
                message=f"the token limit of {self.token_limit:,} was reached "
                f"({self.tokens:,} tokens used)",
            )
        if self.time_limit_s is not None and self.running_ms(now_ms) >= self.time_limit_s * 1000:
            return LimitHit(
                cause="max_time",
                message=f"the time limit of {format_duration(self.time_limit_s)} was reached",
            )
        return None


def fold_longrun(records: Iterable[Record], start: LongRunFold | None = None) -> LongRunFold:
    """Fold `records` into a fresh fold (or into `start`, which is changed)."""
    f = start if start is not None else LongRunFold()
    for r in records:
        f.apply(r)
    return f


def format_duration(seconds: float) -> str:
    """A duration the way people write it: 45s, 12m, 2h30m, 1d6h."""
    total = round(seconds)
    if total < 60:
        return f"{seconds:.1f}s" if seconds < 10 and seconds != total else f"{total}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, total = divmod(total, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts[:2])


__all__ = ["ODD_ANSWERS", "LimitHit", "LongRunFold", "Waiting", "fold_longrun", "format_duration"]
