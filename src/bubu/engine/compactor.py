"""Keeping the next request inside the window: when to compact, building and loading checkpoints.

The decisions are made from the log (compaction notes, token usage); the checkpoint itself lives in
the derived-views table, stored before any model call uses it, and is rebuilt when it is missing or
its source digest no longer matches the log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from bubu import failpoints
from bubu.context.compaction import (
    PROMPT_VERSION,
    VIEW_KIND,
    CheckpointData,
    checkpoint_text,
    render_span,
    summary_request,
    validate,
)
from bubu.context.policy import ContextPolicy
from bubu.errors import ProviderError
from bubu.events import Compaction, Record, SystemNote, TokenUsage
from bubu.log.store import View
from bubu.projections.context import Checkpoint
from bubu.projections.facts import Facts
from bubu.providers.base import ModelRequest, ModelResponse, TextPart

if TYPE_CHECKING:
    from bubu.engine.driver import Runner

BYTES_PER_TOKEN = 4


@dataclass(slots=True)
class Calibration:
    """Reported prompt tokens over estimated ones, from the last calls' token usage."""

    pairs: list[tuple[int, int]] = field(default_factory=list)

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


@dataclass(slots=True)
class Compactor:
    """Compaction for one runner."""

    policy: ContextPolicy = field(default_factory=ContextPolicy)
    facts: Facts = field(default_factory=Facts)
    calibration: Calibration = field(default_factory=Calibration)
    pending_rebuild: Compaction | None = None
    hashes: dict[int, str] = field(default_factory=dict)

    def apply(self, runner: Runner, r: Record) -> None:
        """Fold a record in: facts, calibration, and checkpoints recorded in the log."""
        self.facts.apply(r)
        a, c = r.event.actions, r.event.content
        if a is not None and a.token_usage is not None:
            self.calibration.apply(a.token_usage)
        if isinstance(c, SystemNote) and isinstance(c.note, Compaction):
            n = c.note
            if not n.ok:
                runner.context.set_checkpoint(None)
                runner.context.omitted_before = n.watermark
            elif (cp := self._load(runner, n)) is not None:
                runner.context.set_checkpoint(cp)
                self.pending_rebuild = None
            else:
                self.pending_rebuild = n

    def _load(self, runner: Runner, n: Compaction) -> Checkpoint | None:
        view = runner.store.get_view(VIEW_KIND, runner.session.id, n.checkpoint or "")
        if view is None or view.source_digest != n.source_digest:
            return None
        try:
            data = msgspec.json.decode(view.data, type=CheckpointData)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        if data.watermark != n.watermark or data.source_digest != n.source_digest:
            return None
        return Checkpoint(
            key=data.key,
            watermark=data.watermark,
            source_digest=data.source_digest,
            text=checkpoint_text(data),
        )

    def window(self, runner: Runner) -> int:
        """The model's window in tokens."""
        return (
            runner.config.context_window
            or runner.turn.context_window
            or runner.provider.context_window
        )

    def over_budget(self, runner: Runner, estimate: int) -> bool:
        """True when the calibrated estimate passes the compaction threshold."""
        window = self.window(runner)
        limit = min(self.policy.compact_at * window, window - self.policy.reserve(window))
        return estimate * self.calibration.factor > limit or self.pending_rebuild is not None

    def compact(self, runner: Runner, complete: Callable[[ModelRequest], ModelResponse]) -> None:
        """Build, validate and store a checkpoint (or record why not and fall back)."""
        ctx = runner.context
        watermark: int | None
        if self.pending_rebuild is not None:
            watermark = self.pending_rebuild.watermark
            self.pending_rebuild = None
        else:
            watermark = self._choose_watermark(runner)
        if watermark is None:
            return
        previous = ctx.checkpoint
        start = previous.watermark if previous is not None else 0
        if watermark <= start:
            return
        span_msgs = ctx.span_messages(start, watermark)
        window = self.window(runner)
        span = render_span(span_msgs, limit=int(window * BYTES_PER_TOKEN * 0.5))
        covered = sum(
            size for seq, size in ctx.step_sizes(include_covered=True) if start < seq <= watermark
        )
        digest = runner.digest_at(watermark)
        key = f"cp-{watermark}-{digest[:12]}"
        facts = self.facts.render()
        request = summary_request(
            previous.text if previous is not None else None, span, facts,
            max_tokens=min(8192, max(1024, window // 8)), ordinal=runner.turn.model_responses,
        )  # fmt: skip
        problem = None
        summary = ""
        try:
            response = complete(request)
            summary = "".join(p.text for p in response.parts if isinstance(p, TextPart))
            problem = validate(summary, covered)
        except ProviderError as e:
            problem = f"the summarizer failed: {e}"
        failpoints.hit("mid_compaction")
        if problem is not None:
            runner.append([runner.note(Compaction(checkpoint=None, watermark=watermark, source_digest=digest,
                                                  ok=False, message=f"{problem}; using the raw history"))])  # fmt: skip
            return
        data = CheckpointData(
            key=key, watermark=watermark, source_digest=digest, summary=summary, facts=facts,
            model=runner.provider.spec, prompt_version=PROMPT_VERSION,
            previous=previous.key if previous is not None else None, covered_bytes=covered,
        )  # fmt: skip
        runner.store.put_view(
            View(kind=VIEW_KIND, session=runner.session.id, key=key, source_high_water=watermark,
                 source_digest=digest, data=msgspec.json.encode(data))
        )  # fmt: skip
        runner.append(
            [runner.note(Compaction(checkpoint=key, watermark=watermark, source_digest=digest))]
        )

    def _choose_watermark(self, runner: Runner) -> int | None:
        """Keep the newest steps raw (as many as `keep_steps` that fit the tail share)."""
        sizes = runner.context.step_sizes()
        if len(sizes) < 2:
            return None
        # Sized in the provider's own count: a model that counts more tokens per byte keeps less.
        budget = (
            self.policy.tail_share * self.window(runner) * BYTES_PER_TOKEN / self.calibration.factor
        )
        kept = 0
        used = 0
        for _, size in reversed(sizes):
            if kept >= self.policy.keep_steps or (kept >= 1 and used + size > budget):
                break
            kept += 1
            used += size
        if kept >= len(sizes):
            kept = len(sizes) - 1
        first_kept = sizes[len(sizes) - kept][0]
        return first_kept - 1
