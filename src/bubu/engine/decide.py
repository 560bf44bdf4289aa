"""The engine's decision: a pure function from the folded turn to the next step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from bubu.events import EndCause, TurnEndReason
from bubu.projections.longrun import LimitHit
from bubu.projections.turn import CallState, TurnFold


@dataclass(frozen=True, slots=True)
class Idle:
    """No open turn: nothing to do."""


@dataclass(frozen=True, slots=True)
class CallModel:
    """Ask the model for the next step."""


@dataclass(frozen=True, slots=True)
class RunTools:
    """Run the calls of the last model response that have not been dispatched yet."""

    calls: tuple[CallState, ...]


@dataclass(frozen=True, slots=True)
class NeedsRecovery:
    """Dispatched calls without an outcome from an earlier run: the recovery plan decides."""

    calls: tuple[CallState, ...]


@dataclass(frozen=True, slots=True)
class EndTurn:
    """Close the turn."""

    reason: TurnEndReason
    message: str | None = None
    step_limit: int | None = None
    cause: EndCause | None = None


CUT_OFF = (
    "the model's answer was cut off at its output limit (max_tokens); "
    'ask it to go on with `bubu run -c "continue"`'
)
"""Why a turn that ended on a cut-off answer says so."""

Step: TypeAlias = Idle | CallModel | RunTools | NeedsRecovery | EndTurn


_RAISE_FLAG: dict[EndCause, str] = {
    "max_steps": "--max-steps N",
    "max_tokens": "--max-tokens N",
    "max_time": "--max-time DURATION",
    "provider_unavailable": "--retry-for DURATION",
}


def decide(t: TurnFold, *, max_steps: int | None = None, limit: LimitHit | None = None) -> Step:
    """The next step of the latest turn.

    `limit` is the turn's limit that has been reached, if any (`LongRunFold.limit_hit`); without
    it the per-run step count is checked against `max_steps`, else the limit recorded at start.
    """
    if not t.open:
        return Idle()
    stale = [c for c in t.dangling if c.dispatch_run != t.run]
    if stale:
        return NeedsRecovery(tuple(stale))
    todo = t.undispatched
    if todo:
        return RunTools(tuple(todo))
    if t.open_calls:
        # Dispatched in this run and still running: the driver is waiting for their outcomes.
        return RunTools(())
    if not t.awaiting_model:
        return EndTurn("completed", CUT_OFF if t.cut_off else None)
    if limit is not None:
        return EndTurn(
            "stopped",
            f"{limit.message}; `bubu resume` continues the turn "
            f"(raise the limit with {_RAISE_FLAG[limit.cause]})",
            step_limit=limit.steps,
            cause=limit.cause,
        )
    steps = max_steps if max_steps is not None else t.max_steps
    if steps is not None and t.steps_in_run >= steps:
        return EndTurn(
            "stopped",
            f"the step limit of {steps} model calls was reached; `bubu resume` continues the task",
            step_limit=steps,
            cause="max_steps",
        )
    if t.max_cost is not None and t.turn_cost >= t.max_cost:
        return EndTurn(
            "stopped",
            f"the cost limit of ${t.max_cost:g} was reached (${t.turn_cost:.4f} spent in this "
            "turn); `bubu resume SESSION --max-cost USD` with a higher limit continues the task",
        )
    return CallModel()
