"""Looking at a session: what its next model request would be, without running anything.

`bubu context`, the web UI's context tab and the API all use it, so they show exactly what a real
run would send: the same pure projection (`projections.request`) the runner uses, with the same
checkpoint, placeholders and digest. It reads the log and the hot blobs, then folds and builds;
it takes no lease, starts no thread, appends nothing and calls no model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from bubu import windowfacts as windows
from bubu.context.policy import ContextPolicy
from bubu.engine.prompt import system_prompt
from bubu.events import Record
from bubu.log.store import SessionInfo, Store
from bubu.projections import turn as turns
from bubu.projections.instructions import InstructionsFold, with_instructions
from bubu.projections.request import (
    Declared,
    NextRequest,
    Prefix,
    RequestFold,
    budget_of,
    build,
    fold_request,
    tool_specs,
)

DEFAULT_WINDOW = 200_000


class Offered(Declared, Protocol):
    """A tool as the next request offers it: what `tool_specs` lists and its effect."""

    @property
    def effect(self) -> str: ...


class Inspection(msgspec.Struct, frozen=True, kw_only=True):
    """The next request of a session and what it was projected from."""

    model: str
    next: NextRequest
    fold: RequestFold
    records: list[Record]
    window: int
    window_source: str
    """Where `window` came from (`bubu context` says it)."""
    instructions: InstructionsFold
    """The session's project instructions, as the log records them."""
    budget: int

    @property
    def calibration(self) -> float:
        """The factor the estimate is multiplied by to predict the provider's count."""
        return self.fold.calibration.factor

    @property
    def high_water(self) -> int:
        """The seq of the last record the request was projected from."""
        return self.records[-1].seq if self.records else 0


def model_window(spec: str) -> int:
    """The model's own window, if its provider can be built here (no key needed to inspect)."""
    from bubu.errors import BubuError

    if spec.partition(":")[0] == "scripted":  # the scripted model's, without the providers
        return windows.SCRIPTED_WINDOW
    from bubu.providers import resolve

    try:
        return resolve(spec).context_window
    except BubuError:
        return DEFAULT_WINDOW


def inspect_request(
    store: Store,
    info: SessionInfo,
    *,
    context_window: int | None = None,
    policy: ContextPolicy | None = None,
) -> Inspection:
    """The next request of `info`'s session as a run on this host would build it."""
    from bubu.toolspecs import host_declarations

    records = store.read(info.id)
    turn = turns.fold(records)
    fold = fold_request(records, policy)
    blobs = {sha: data for sha in fold.blobs_needed() if (data := store.blob(sha)) is not None}
    spec = info.model or "scripted:-"
    instructions = InstructionsFold()
    for r in records:
        instructions.apply(r)
    base = turn.system_prompt if turn.system_prompt is not None else system_prompt(info.workspace)
    system = with_instructions(base, instructions)
    offered: Sequence[Offered] | None = host_declarations()  # the built-ins alone: as recorded
    if offered is None:  # MCP servers or plugins may add tools: load them, as a run does
        from bubu.tools import host_tools

        offered = list(host_tools(None).values())
    if turn.plan:  # a planning turn is offered only the tools that read
        offered = [t for t in offered if t.effect == "read_only"]
    prefix = Prefix(model=spec, system=system, tools=tool_specs(offered), session_id=info.id)
    # A window the server's overflow error stated wins; the model's own only when neither the
    # caller nor the turn gives one (lazily: it may try to build the provider).
    learned = turn.context_window if windows.learned(turn.window_source) else None
    window = learned or context_window or turn.context_window or model_window(spec)
    if learned:
        source = turn.window_source or windows.LEARNED
    elif context_window:
        source = windows.USER
    elif turn.context_window:  # an older Bubu recorded only a user's window
        source = turn.window_source or windows.USER
    else:
        source = "default: the turn recorded none"
    return Inspection(
        model=spec,
        next=build(fold, prefix, ordinal=turn.model_responses, blobs=blobs),
        fold=fold,
        records=records,
        window=window,
        window_source=source,
        instructions=instructions,
        budget=budget_of(fold.policy, window),
    )
