"""What a run is configured with and shows its host: the types the runner and its parts share.

The runner (`driver`) holds a session's lease and drives its open turn; the model call
(`modelcall`) and the tool calls (`toolcalls`) are written against small views of it, so that
neither imports the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from bubu.context.policy import ContextPolicy
from bubu.engine.backoff import WAIT_CAP_S
from bubu.engine.choices import StopReason
from bubu.engine.loops import DEFAULT_LOOP_LIMIT
from bubu.events import Record
from bubu.providers.base import Delta

if TYPE_CHECKING:
    from bubu.engine.hooks import Hook
    from bubu.events import Actions, Content, Event, Role
    from bubu.log.store import SessionInfo, Store
    from bubu.projections.turn import TurnFold
    from bubu.providers.base import Provider


class Stopped(Exception):
    """Raised inside a run once a stop was asked for; the driver's loop handles it."""


class Observer(Protocol):
    """What a host (CLI, web UI) sees of a running turn."""

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


class RunnerView(Protocol):
    """What every part of the runner (the model call, the tool calls, the compaction) needs of
    it: the session and its turn, and appending to the log. Each part's own view adds the rest."""

    store: Store
    session: SessionInfo
    provider: Provider
    config: RunConfig
    turn: TurnFold

    def append(
        self, events: Sequence[Event], *, durable: bool = ..., blobs: Sequence[bytes] = ...
    ) -> None: ...

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
    ) -> Event: ...

    def note(self, note: Any) -> Event: ...

    def check_stop(self) -> None: ...


__all__ = ["NullObserver", "Observer", "RunConfig", "RunnerView", "StopReason", "Stopped"]
