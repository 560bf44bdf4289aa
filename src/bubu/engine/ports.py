"""The ports of the runner: what a run is configured with, what it shows, and the narrow views
its parts are handed.

The runner (`driver`) holds a session's lease and drives its open turn. Its parts (the model call,
the tool calls, the compaction, the hooks) are each given what they need, as one of these small
Protocols or as the object itself (the `Blobs`, the `Compaction`), so that none imports the driver
or calls back into it beyond them.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from bubu.context.policy import ContextPolicy
from bubu.engine.backoff import WAIT_CAP_S
from bubu.engine.choices import StopReason
from bubu.engine.loops import DEFAULT_LOOP_LIMIT
from bubu.events import Record
from bubu.providers.base import Delta

if TYPE_CHECKING:
    from bubu.engine.hooks import Hook
    from bubu.events import Actions, Content, EndCause, Event, Role, TurnEndReason
    from bubu.log.store import SessionInfo, Store
    from bubu.projections.longrun import LongRunFold
    from bubu.projections.turn import TurnFold
    from bubu.providers.base import Provider

T = TypeVar("T")


class Stopped(Exception):
    """Raised inside a run once a stop was asked for; the driver's loop handles it."""


class Observer(Protocol):
    """What the user's front end (CLI, web UI) sees of a running turn."""

    def on_delta(self, delta: Delta) -> None:
        """A streamed fragment of model text or thinking (not yet committed)."""

    def on_records(self, records: Sequence[Record]) -> None:
        """Records just committed, in seq order."""

    def on_activity(self, text: str | None) -> None:
        """What is running now (a tool, the model), or None when idle."""


class NullObserver:
    """An observer that ignores everything."""

    def on_delta(self, delta: Delta) -> None:
        """Ignore."""

    def on_records(self, records: Sequence[Record]) -> None:
        """Ignore."""

    def on_activity(self, text: str | None) -> None:
        """Ignore."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """Knobs of a run."""

    max_steps: int | None = None
    max_cost: float | None = None
    tool_timeout_s: float = 600.0
    model_attempts: int | None = None
    """A cap on the attempts of one model call (None: only the retry horizon bounds them)."""
    backoff_s: float = 1.0
    backoff_max_s: float = WAIT_CAP_S
    retry_for_s: float | None = None
    """How long transient provider failures are waited out (None: the turn's, else the default)."""
    fallback_models: tuple[str, ...] = ()
    token_limit: int | None = None
    time_limit_s: float | None = None
    lease_ttl_s: float = 30.0
    max_tokens: int | None = None
    """The cap on tokens one call may produce (None: the provider's `--max-output-tokens`)."""
    context_window: int | None = None
    context: ContextPolicy = field(default_factory=ContextPolicy)
    project_instructions: bool = True
    """Whether the turns this host starts give the model the workspace's AGENTS.md files."""
    loop_limit: int | None = DEFAULT_LOOP_LIMIT
    """Identical successful results of one call in a row at which the turn stops (loops.py)."""
    hooks: tuple[Hook, ...] = ()
    """The user's hooks (`bubu.engine.hooks`), run at the points of each turn."""
    plan: bool = False
    """Turns this host starts plan (``--plan``, ``/plan``) until the plan is approved."""
    max_background: int = 4
    """Background processes a session may run at once (`bubu.tools.background`)."""


class RunState(Protocol):
    """The session and its run as the log folds them: what every part of the runner reads.

    The runner keeps it (it folds each commit in, and may refold the log afresh, so a part reads
    these through it rather than keeping a fold of its own); the model call moves `provider` to
    a fallback and back."""

    store: Store
    session: SessionInfo
    config: RunConfig
    provider: Provider
    turn: TurnFold
    longrun: LongRunFold
    run: str | None
    run_seq: int
    """The seq this run started at."""


class Appender(Protocol):
    """Appending to the session's log through its lease (the `Runner` is one)."""

    def append(
        self, events: Sequence[Event], *, durable: bool = ..., blobs: Sequence[bytes] = ...
    ) -> None:
        """Commit `events` (after whatever is staged), fold them in and show them."""

    def stage(self, events: Sequence[Event], *, after: str | None = ...) -> None:
        """Fold `events` now and commit them with the next append."""

    def flush(self) -> None:
        """Commit what is staged now."""

    def event(
        self,
        role: Role,
        author: Literal["user", "host", "agent", "tool", "system"],
        content: Content | None = ...,
        actions: Actions | None = ...,
        *,
        invocation: str | None = ...,
        visibility: Literal["visible", "hidden"] = ...,
        status: Literal["completed", "failed", "aborted", "cancelled"] | None = ...,
    ) -> Event:
        """A new event of the current turn and run."""

    def note(self, note: Any) -> Event:
        """A hidden system note."""


class Stops(Protocol):
    """A run's stop: asked for from anywhere (Ctrl-C, SIGTERM, a lost lease), noticed at once."""

    stop_event: threading.Event
    """Set once a stop is asked for: a running tool's cancel signal."""
    stop_reason: StopReason | None

    def check_stop(self) -> None:
        """Raise `Stopped` once a stop was asked for."""

    def stopped_by(self) -> str:
        """Who stopped the run, in the words a cut-off tool result uses."""

    def wait(self, fut: cf.Future[T]) -> T:
        """The future's result, waited for so that a stop is noticed at once."""

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`, or until a stop is asked for."""


class BlobReader(Protocol):
    """The bytes of the session's offloaded results."""

    def blobs_of(self, shas: Sequence[str]) -> dict[str, bytes]:
        """The bytes of these results, as far as the store has them."""

    def read_blob(self, handle: str) -> bytes | None:
        """The bytes of one of the session's results, by sha-256 or a unique prefix."""


class EndTurn(Protocol):
    """Ending the open turn (once: a turn that has ended is left as it is)."""

    def __call__(
        self,
        reason: TurnEndReason,
        message: str | None = ...,
        *,
        extra: Sequence[Event] = ...,
        cause: EndCause | None = ...,
    ) -> None: ...


__all__ = [
    "Appender",
    "BlobReader",
    "EndTurn",
    "NullObserver",
    "Observer",
    "RunConfig",
    "RunState",
    "StopReason",
    "Stopped",
    "Stops",
]
