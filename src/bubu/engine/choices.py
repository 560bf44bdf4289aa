"""The driver's smaller decisions, as pure functions beside `decide`: what a tool's outcome looks
like in the log (offloaded, inline, or cut when the disk is full), how a permission question is
settled, whether the next request must be compacted first, what a stop does to the turn and which
records of another process a running session tolerates.

The driver carries them out; nothing here reads storage, the clock or randomness.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias, assert_never

from bubu.events import PermissionDecision, Record, SystemNote

# -- offload ------------------------------------------------------------------------------------

PAGING_TOOLS = frozenset({"read_result", "search_result", "query_result"})
"""Tools that page through an offloaded result: a page of one is never offloaded again."""

OutcomeForm: TypeAlias = Literal["offloaded", "inline", "cut"]
"""How an outcome is committed: a large result as a blob with a placeholder; the result inline;
what the tool kept for the model, saying that the whole could not be stored (a full disk)."""


def may_offload(tool: str) -> bool:
    """Whether a large result of `tool` may be stored as a blob behind a placeholder."""
    return tool not in PAGING_TOOLS


def next_form(form: OutcomeForm) -> OutcomeForm | None:
    """What to commit when committing outcomes in `form` failed for lack of storage (None: give up).

    Never a reference to bytes that are not there: a blob that cannot be stored makes the result
    inline; an inline result that does not fit either keeps what the tool kept for the model.
    """
    match form:
        case "offloaded":
            return "inline"
        case "inline":
            return "cut"
        case "cut":
            return None
        case _:
            assert_never(form)


def cut_note(size: int) -> str:
    """The line added to a result whose whole output could not be stored."""
    return f"\n[the complete output ({size:,} bytes) could not be stored: the disk is full]"


# -- permissions --------------------------------------------------------------------------------

Answer: TypeAlias = Literal["allow", "deny"]
By: TypeAlias = Literal["user", "flag", "nobody"]


@dataclass(frozen=True, slots=True)
class Settled:
    """Decided without asking anyone now (recorded before a crash, or allowed by the policy)."""

    answer: Answer
    record: bool = False
    """Whether the request and decision still have to be written (a flag's approval is)."""
    by: By | None = None


@dataclass(frozen=True, slots=True)
class Ask:
    """Write the request durably, then ask the person at the host."""


Permission: TypeAlias = Settled | Ask


def permission(
    recorded: PermissionDecision | None,
    *,
    protected: bool,
    allowed_by_policy: bool,
    yes: bool,
) -> Permission:
    """How a call that needs permission is settled.

    A decision recorded before a crash is kept (never ask twice, never assume), except that a
    protected target is approved by a person only. A command the policy allows runs without a
    question; `--yes` approves anything but a protected target (recorded as by the flag).
    """
    if recorded is not None:
        if protected and recorded.by != "user":
            return Settled("deny")  # approved by a flag, before the target became protected
        return Settled(recorded.decision)
    if allowed_by_policy:
        return Settled("allow")
    if yes and not protected:
        return Settled("allow", record=True, by="flag")
    return Ask()


def answered(got: Answer | None) -> tuple[Answer, By]:
    """The decision of an asked question: the person's answer, or deny when nobody answered."""
    return (got, "user") if got is not None else ("deny", "nobody")


# -- compaction ---------------------------------------------------------------------------------

COMPACTION_PASSES = 3
"""At most this many compactions before one model call (a second helps when the kept tail was
too big)."""


def compact_again(*, over_budget: bool, passes: int, before: int | None, after: int) -> bool:
    """Whether to compact (again) before the model call: the request is over its budget, the
    passes are not used up, and the last pass moved the watermark (`before` None: no pass yet)."""
    if not over_budget or passes >= COMPACTION_PASSES:
        return False
    return before is None or after != before


# -- stops --------------------------------------------------------------------------------------

StopReason: TypeAlias = Literal["stopped", "suspended", "lease_lost"]
"""Why a run stops: the user (Ctrl-C, `bubu stop`), an orderly shutdown (SIGTERM), or another
runner that took the session over."""


@dataclass(frozen=True, slots=True)
class Leave:
    """The run ends and the turn stays open: its lease is lost (another runner has it)."""


@dataclass(frozen=True, slots=True)
class Ended:
    """The turn had ended before the stop took effect: it stays as it ended."""


@dataclass(frozen=True, slots=True)
class EndStopped:
    """End the turn for the stop: what was cut off or never run says so."""

    reason: Literal["stopped", "suspended"]


AfterStop: TypeAlias = Leave | Ended | EndStopped


def after_stop(reason: StopReason | None, *, turn_open: bool) -> AfterStop:
    """What a run that was told to stop does with its turn."""
    match reason:
        case "lease_lost" | None:
            return Leave()
        case "stopped" | "suspended":
            return EndStopped(reason) if turn_open else Ended()
        case _:
            assert_never(reason)


# -- conflicts ----------------------------------------------------------------------------------

BENIGN_NOTES = frozenset(
    {
        "NoticeDismissed",
        "MemoryForgotten",
        "MemoryAccepted",
        "ProcessStarted",
        "ProcessOutput",
        "ProcessEnded",
    }
)
"""The notes another process may append to a running session (and a background process's reader
thread, beside the runner)."""


def benign(records: Sequence[Record]) -> bool:
    """Whether the records another process appended before ours are ones to fold in and append
    after (notice dismissals, forgotten notes); anything else is a real conflict."""
    return bool(records) and all(
        isinstance(c := r.event.content, SystemNote) and type(c.note).__name__ in BENIGN_NOTES
        for r in records
    )


__all__ = [
    "BENIGN_NOTES",
    "COMPACTION_PASSES",
    "PAGING_TOOLS",
    "AfterStop",
    "Ask",
    "EndStopped",
    "Ended",
    "Leave",
    "OutcomeForm",
    "Permission",
    "Settled",
    "StopReason",
    "after_stop",
    "answered",
    "benign",
    "compact_again",
    "cut_note",
    "may_offload",
    "next_form",
    "permission",
]
