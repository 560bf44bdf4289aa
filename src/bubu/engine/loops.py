"""A model stuck repeating one call: a pure decision over the turn's projected calls.

The same call is the same tool with the same canonical arguments (or the same unparsable
argument text). Its failures are counted since it last succeeded. From `WARN_AT` failures on,
the failed result tells the model so; at `STOP_AT` the turn is stopped with that reason, since a
model that has ignored the warning twice will not change course on its own.

A call that succeeds is a loop only when it keeps returning the same result (`CallState.repeats`,
counted per run): from `REPEAT_WARN_AT` on, the result tells the model it has seen it already;
at the loop limit (`loop_limit`, `DEFAULT_LOOP_LIMIT`) the turn is stopped, resumably. Polling
whose results change is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bubu.log import codec
from bubu.projections.turn import REPEAT_NOTE, CallState

WARN_AT = 3
STOP_AT = 5
REPEAT_WARN_AT = 3
DEFAULT_LOOP_LIMIT = 8
"""Identical successful results of one call in a row, in a run, at which the turn stops."""


@dataclass(frozen=True, slots=True)
class GoOn:
    """No call is stuck."""


@dataclass(frozen=True, slots=True)
class Stuck:
    """The last finished call has failed `failures` times in a row with the same arguments."""

    name: str
    failures: int

    @property
    def message(self) -> str:
        """Why the turn stops, as the log records it."""
        return (
            f"stopped: the model called {self.name} with the same arguments {self.failures} times "
            "and it failed every time; rephrase the task, or `bubu resume` to let it try again"
        )


@dataclass(frozen=True, slots=True)
class Looping:
    """The last finished call returned the same result `repeats` times in a row."""

    name: str
    repeats: int

    @property
    def message(self) -> str:
        """Why the turn stops, as the log records it."""
        return (
            f"stopped: the model called {self.name} with the same arguments {self.repeats} times "
            "and got the same result every time (the loop limit, loop_limit); rephrase the task, "
            "or `bubu resume` to let it go on"
        )


Verdict = GoOn | Stuck | Looping


def same_call(call: CallState) -> tuple[str, str]:
    """What makes two calls the same call: the tool, and the canonical arguments."""
    if call.raw_arguments is not None:
        return call.name, "raw:" + call.raw_arguments
    return call.name, codec.args_digest(call.arguments)


def repeat_note(previous: CallState | None, digest: str) -> str | None:
    """The note a successful result ends with when the same call, last finished as `previous`,
    returns the same result (`digest`) again for the `REPEAT_WARN_AT`-th time or more."""
    if previous is None or previous.outcome_error or previous.outcome_digest != digest:
        return None
    repeats = previous.repeats + 1
    if repeats < REPEAT_WARN_AT:
        return None
    return (
        f"{REPEAT_NOTE}{repeats} times in a row; it will not change by asking again: use it, "
        "or change approach]"
    )


def failures_before(calls: Iterable[CallState], call: CallState) -> int:
    """How many times the same call failed, since it last succeeded, among the finished calls
    other than `call`."""
    key = same_call(call)
    count = 0
    for other in sorted(
        (c for c in calls if c.outcome_seq is not None and c.call_id != call.call_id),
        key=lambda c: c.outcome_seq or 0,
    ):
        if same_call(other) == key:
            count = count + 1 if other.outcome_error else 0
    return count


def warning(calls: Iterable[CallState], call: CallState, *, warn_at: int = WARN_AT) -> str | None:
    """The line a failed result of `call` ends with when it is the same call failing again."""
    failures = failures_before(calls, call) + 1
    if failures < warn_at:
        return None
    return f"this exact call has failed {failures} times; change approach"


def verdict(
    calls: Iterable[CallState],
    *,
    after_seq: int = 0,
    stop_at: int = STOP_AT,
    last: CallState | None = None,
    loop_limit: int | None = DEFAULT_LOOP_LIMIT,
) -> Verdict:
    """Whether the turn must stop: its last finished call failed and is the same call failing
    for the `stop_at`-th time, counting the outcomes after `after_seq` (the run's start, so that
    a resumed turn gives the model another chance).

    `last`, when given, is the call finished last (`TurnFold.last_outcome`): a step whose last
    call succeeded is then answered without walking the turn's calls, so a long turn costs the
    same per step at its end as at its start. A last call that succeeded with the same result
    for the `loop_limit`-th time in a row (None or 0: no limit) is `Looping`."""
    if last is not None and not last.outcome_error and last.outcome_seq is not None:
        if loop_limit and last.outcome_seq > after_seq and last.repeats >= loop_limit:
            return Looping(last.name, last.repeats)
        return GoOn()
    if last is not None and (last.outcome_seq is None or last.outcome_seq <= after_seq):
        return GoOn()
    finished = [c for c in calls if c.outcome_seq is not None and c.outcome_seq > after_seq]
    if not finished:
        return GoOn()
    last = max(finished, key=lambda c: c.outcome_seq or 0)
    if not last.outcome_error:
        if loop_limit and last.repeats >= loop_limit:
            return Looping(last.name, last.repeats)
        return GoOn()
    failures = failures_before(finished, last) + 1
    return Stuck(last.name, failures) if failures >= stop_at else GoOn()


__all__ = [
    "DEFAULT_LOOP_LIMIT",
    "REPEAT_WARN_AT",
    "STOP_AT",
    "WARN_AT",
    "GoOn",
    "Looping",
    "Stuck",
    "Verdict",
    "failures_before",
    "repeat_note",
    "same_call",
    "verdict",
    "warning",
]
