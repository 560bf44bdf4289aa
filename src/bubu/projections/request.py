"""The next model request, a pure function of the log (DESIGN §6).

    next request = build(fold of the records, prefix, ordinal, hot blobs)

`RequestFold` folds records (in seq order) into what the request is made of: the conversation
(`ContextFold`), the checkpoint in use (a `checkpoint` event paired with the `compaction` note
whose body digest it matches), the fact sheet and the calibration of the estimate. `build` turns
it into the `ModelRequest` and the digest that names it, given the parts the log does not hold:
the model, the system prompt and the tool definitions (`Prefix`), and the bytes of the offloaded
results shown whole (`RequestFold.blobs_needed`, read by the caller and passed in as data).

Nothing here reads storage, the clock or randomness: the runner, `bubu context`, the web UI and
the API all call it, and a fold of the same records with the same inputs gives the same bytes.
The per-entry renderings `ContextFold` keeps are a memo only: a fold built in one go and one built
step by step give the same request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Protocol

import msgspec

from bubu.context.compaction import body_digest, checkpoint_text
from bubu.context.policy import ContextPolicy
from bubu.events import CheckpointBody, Compaction, Record, SummaryChunk, SystemNote, TokenUsage
from bubu.messages import ModelRequest, ToolSpec
from bubu.projections.context import Blobs, Checkpoint, ContextFold
from bubu.projections.facts import Facts

BYTES_PER_TOKEN = 4
_encoder = msgspec.json.Encoder(order="sorted")


class Calibration(msgspec.Struct):
    """Reported prompt tokens over estimated ones, from the last calls' token usage."""

    pairs: list[tuple[int, int]] = msgspec.field(default_factory=list)

    def apply(self, usage: TokenUsage) -> None:
        """Fold one model call's usage in."""
        if usage.estimated_input_tokens and usage.input_tokens:
            self.pairs = [*self.pairs[-19:], (usage.input_tokens, usage.estimated_input_tokens)]

    @property
    def factor(self) -> float:
        """Multiply an estimate by this to predict the provider's count (1.0 until known)."""
        if not self.pairs:
            return 1.0
        return max(0.25, min(4.0, sum(a for a, _ in self.pairs) / sum(b for _, b in self.pairs)))


class Declared(Protocol):
    """A tool as far as the request needs it."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def parameters(self) -> Any: ...


def tool_specs(tools: Iterable[Declared]) -> tuple[ToolSpec, ...]:
    """The tool definitions a request offers, in name order (part of the stable prefix)."""
    return tuple(
        ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
        for t in sorted(tools, key=lambda t: t.name)
    )


class Prefix(msgspec.Struct, frozen=True, kw_only=True):
    """What a request holds that the log does not: the stable, cacheable prefix."""

    model: str
    system: str
    tools: tuple[ToolSpec, ...]
    max_tokens: int | None = None
    """The request's output cap (None: the provider's own default)."""
    session_id: str = ""
    """The session the request belongs to: a provider's cache key (not part of the digest)."""


class NextRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The next request, the digest naming it, its estimated tokens and the checkpoint it uses."""

    request: ModelRequest
    digest: str
    estimate: int
    checkpoint: str | None


class RequestFold(msgspec.Struct, kw_only=True):
    """Everything of the log the next request is made of, folded incrementally.

    Its context fold is made for its policy when it is built (`RequestFold(policy=p)`); one given
    with it (a snapshot read back) is kept."""

    policy: ContextPolicy = msgspec.field(default_factory=ContextPolicy)
    context: ContextFold = msgspec.field(default_factory=ContextFold)
    facts: Facts = msgspec.field(default_factory=Facts)
    calibration: Calibration = msgspec.field(default_factory=Calibration)
    pending_rebuild: Compaction | None = None
    """A checkpoint an older Bubu stored only as a view: rebuilt as an event before use."""
    current: CheckpointBody | None = None
    """The checkpoint the requests use (a valid summary, or a fallback on the fact sheet)."""
    valid: CheckpointBody | None = None
    """The newest checkpoint whose summary covers its whole range: what the next summary folds."""
    progress: list[SummaryChunk] = msgspec.field(default_factory=list)
    """Chunk answers committed since the last compaction note (a compaction cut by a crash)."""
    adopted: list[tuple[int, CheckpointBody]] = msgspec.field(default_factory=list)
    """Checkpoints taken into use, with their seq, for a writer to cache as views (it drains it)."""
    _bodies: dict[str, tuple[int, CheckpointBody]] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.context.policy is not self.policy:  # a new fold: the context fold of its policy
            self.context = ContextFold(policy=self.policy)

    @property
    def high_water(self) -> int:
        """The seq of the last record folded in."""
        return self.context.high_water

    def apply(self, r: Record) -> None:
        """Fold one record in."""
        self.context.apply(r)
        self.facts.apply(r)
        a, c = r.event.actions, r.event.content
        n = c.note if isinstance(c, SystemNote) else None
        # Turn calls only: a compaction cut short (a fork, a crash) must resume with the same
        # calibration it started with, so that it cuts the same chunks.
        if a is not None and a.token_usage is not None and not isinstance(n, SummaryChunk):
            self.calibration.apply(a.token_usage)
        if isinstance(n, CheckpointBody):
            self._bodies[n.key] = (r.seq, n)
        elif isinstance(n, SummaryChunk):
            self.progress.append(n)
        elif isinstance(n, Compaction):
            self.progress = []
            found = self._bodies.pop(n.checkpoint or "", None)
            if n.body_digest is None:
                # An older Bubu kept the text in the view alone: rebuild it into the log.
                self.pending_rebuild = n if n.ok else None
            elif found is not None and body_digest(found[1]) == n.body_digest:
                self._use(found[0], found[1])
                self.pending_rebuild = None

    def _use(self, seq: int, body: CheckpointBody) -> None:
        self.current = body
        if body.summarized_upto >= body.watermark:
            self.valid = body
            # Every later summary starts at the valid one's watermark: what it covers is done.
            self.context.forget_upto(body.watermark)
        self.context.set_checkpoint(
            Checkpoint(
                key=body.key,
                watermark=body.watermark,
                source_digest=body.source_digest,
                text=checkpoint_text(body),
            )
        )
        self.adopted.append((seq, body))

    def blobs_needed(self) -> list[str]:
        """The sha-256 of each offloaded result the next request shows whole."""
        return self.context.hot_blobs()


def fold_request(records: Iterable[Record], policy: ContextPolicy | None = None) -> RequestFold:
    """A fresh fold of `records`."""
    fold = RequestFold(policy=policy if policy is not None else ContextPolicy())
    for r in records:
        fold.apply(r)
    return fold


def header(prefix: Prefix, *, ordinal: int, purpose: str = "turn") -> bytes:
    """The canonical bytes of everything in a request but its messages."""
    return _encoder.encode(
        {
            "model": prefix.model,
            "system": prefix.system,
            "tools": prefix.tools,
            "max_tokens": prefix.max_tokens,
            "ordinal": ordinal,
            "purpose": purpose,
        }
    )


def build(fold: RequestFold, prefix: Prefix, *, ordinal: int, blobs: Blobs) -> NextRequest:
    """The next request of `fold`, and its digest and estimated tokens (bytes / 4).

    `ordinal` is the number of model responses of the session so far (`TurnFold.model_responses`);
    `blobs` holds the bytes of (at least) `fold.blobs_needed()`. The digest is sha-256 over the
    canonical header followed by the per-message digests of `ContextFold.fingerprint`, so it costs
    what changed since the last request, yet changes with any byte of the request.
    """
    ctx = fold.context
    request = ModelRequest(
        system=prefix.system,
        tools=prefix.tools,
        messages=ctx.messages(blobs),
        max_tokens=prefix.max_tokens,
        ordinal=ordinal,
        session_id=prefix.session_id,
    )
    head = header(prefix, ordinal=ordinal)
    messages, size = ctx.fingerprint(blobs)
    digest = hashlib.sha256(head + bytes.fromhex(messages)).hexdigest()
    checkpoint = ctx.checkpoint.key if ctx.checkpoint is not None else None
    return NextRequest(
        request=request,
        digest=digest,
        estimate=(len(head) + size) // BYTES_PER_TOKEN,
        checkpoint=checkpoint,
    )


def window_of(
    *, configured: int | None, recorded: int | None, model: int, learned: int | None = None
) -> int:
    """The model's window in tokens: one the server's overflow error stated (`learned`), else the
    host's setting, else the turn's, else the model's own."""
    return learned or configured or recorded or model


def budget_of(policy: ContextPolicy, window: int) -> int:
    """The largest request in tokens: the compaction threshold."""
    return int(min(policy.compact_at * window, window - policy.reserve(window)))


def over_budget(fold: RequestFold, estimate: int, budget: int) -> bool:
    """True when the next request must be compacted first: its calibrated estimate passes the
    threshold, or an older checkpoint waits to be rebuilt into the log."""
    return estimate * fold.calibration.factor > budget or fold.pending_rebuild is not None


__all__ = [
    "BYTES_PER_TOKEN",
    "Calibration",
    "NextRequest",
    "Prefix",
    "RequestFold",
    "budget_of",
    "build",
    "fold_request",
    "header",
    "over_budget",
    "tool_specs",
    "window_of",
]
