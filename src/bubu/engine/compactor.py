"""Keeping the next request inside the window: when to compact, building and loading checkpoints.

The decisions are made from the log (compaction notes, token usage). A checkpoint is a hidden
`checkpoint` event committed in the same transaction as its `compaction` note, so the log alone
says what the model was given: a fork or an import reproduces every later request. The derived
view is a cache of that event carrying its digest; a view that disagrees is ignored and rebuilt.

This module decides and plans (`Compactor`, `CompactionPlan`); `bubu.engine.compacting` carries
a plan out for a runner. Every summarizer call is traced like a turn call: a `model_request` note
(purpose "summary") before it, and after it a hidden `summary_chunk` note with the answer and its
token usage. A span larger than the summarizer's window is summarized in chunks, in order, each
folding the last. A failed summary keeps the last valid checkpoint and adds the log's fact sheet for
the rest.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bubu.context.compaction import (
    PROMPT_VERSION,
    body_digest,
    checkpoint_text,
    chunk_items,
    encode_body,
    render_items,
    summary_request,
    validate,
)
from bubu.context.policy import ContextPolicy
from bubu.errors import BubuError
from bubu.events import CheckpointBody, Compaction
from bubu.log.codec import sha256_hex
from bubu.log.store import Store, View
from bubu.log.verify import CHECKPOINT_VIEW as VIEW_KIND
from bubu.messages import ModelRequest
from bubu.projections.context import Blobs
from bubu.projections.request import (
    BYTES_PER_TOKEN,
    Calibration,
    RequestFold,
    budget_of,
    over_budget,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionPlan:
    """A compaction to carry out: the span (start, watermark] to summarize in `chunks`, from chunk
    `first` on (a compaction cut by a crash goes on after the answers already in the log)."""

    start: int
    watermark: int
    source_digest: str
    previous: CheckpointBody | None
    facts: str
    goal: str | None
    chunks: tuple[str, ...]
    covered: int
    max_tokens: int
    ordinal: int
    first: int = 0
    calls: tuple[str, ...] = ()
    """The request digests of the chunk answers already in the log."""
    text: str | None = None
    """The summary so far: the previous one, or the last answer already in the log."""

    def request(self, i: int, text: str | None) -> ModelRequest:
        """The summarizer request for chunk `i`, folding `text` (the summary so far)."""
        return summary_request(
            text,
            self.chunks[i],
            self.facts,
            max_tokens=self.max_tokens,
            ordinal=self.ordinal,
            part=(i + 1, len(self.chunks)),
        )

    def problem(self, answer: str, i: int) -> str | None:
        """Why the answer to chunk `i` may not be used (None when it may)."""
        problem = validate(answer, self.goal)
        if problem is None:
            return None
        n = len(self.chunks)
        return f"{problem}{'' if n == 1 else f' (part {i + 1} of {n})'}"

    def result(
        self, text: str | None, problem: str | None, calls: list[str], model: str
    ) -> tuple[CheckpointBody, Compaction]:
        """The checkpoint and its note: the summary, or (it failed) the last valid summary and the
        fact sheet for the rest. They are committed in one transaction."""
        watermark, digest, previous, n = (
            self.watermark,
            self.source_digest,
            self.previous,
            len(self.chunks),
        )
        if problem is None and text is not None:
            body = CheckpointBody(
                key=f"cp-{watermark}-{digest[:12]}",
                watermark=watermark,
                source_digest=digest,
                summary=text,
                facts=self.facts,
                model=model,
                prompt_version=PROMPT_VERSION,
                previous=previous.key if previous is not None else None,
                covered_bytes=self.covered,
                summarized_upto=watermark,
                chunks=n,
                calls=calls,
            )
            return body, Compaction(
                checkpoint=body.key,
                watermark=watermark,
                source_digest=digest,
                body_digest=body_digest(body),
                chunks=n,
                calls=calls,
            )
        # The goal survives a failed summary: the last valid summary stays, the fact sheet
        # (no model needed) covers the rest, and the next compaction tries the summary again.
        body = CheckpointBody(
            key=f"cp-{watermark}-{digest[:12]}-facts",
            watermark=watermark,
            source_digest=digest,
            summary=previous.summary if previous is not None else "",
            facts=self.facts,
            model=model,
            prompt_version=PROMPT_VERSION,
            previous=previous.key if previous is not None else None,
            covered_bytes=self.covered,
            summarized_upto=self.start,
            chunks=n,
            calls=calls,
        )
        return body, Compaction(
            checkpoint=body.key,
            watermark=watermark,
            source_digest=digest,
            ok=False,
            message=f"{problem}; kept the last valid checkpoint and the fact sheet for the rest "
            "(the summary is retried at the next compaction)",
            body_digest=body_digest(body),
            chunks=n,
            calls=calls,
        )


@dataclass(slots=True)
class Compactor:
    """Compaction decisions: what the log says (checkpoints, facts, calibration) is in the
    `RequestFold`; this chooses the watermark and plans the summary. It never touches the runner:
    `bubu.engine.compacting` carries a plan out (the summarizer calls and the appends)."""

    policy: ContextPolicy = field(default_factory=ContextPolicy)
    fold: RequestFold = field(default_factory=RequestFold)

    @property
    def calibration(self) -> Calibration:
        """The estimate's calibration, from the log's token usage."""
        return self.fold.calibration

    def budget(self, window: int) -> int:
        """The largest request in tokens: the compaction threshold."""
        return budget_of(self.policy, window)

    def over_budget(self, estimate: int, window: int) -> bool:
        """True when the calibrated estimate passes the compaction threshold."""
        return over_budget(self.fold, estimate, self.budget(window))

    def target(self, window: int, hot: Blobs, *, overhead: int | None = None) -> int | None:
        """The watermark to compact up to (an older checkpoint to rebuild first), or None when
        there is nothing to fold. Takes the pending rebuild. `overhead` is the estimated tokens
        of the request besides its steps (system, tools, summary, goal): what the raw tail must
        leave room for under `compact_to`."""
        fold = self.fold
        if fold.pending_rebuild is not None:
            watermark: int | None = fold.pending_rebuild.watermark
            fold.pending_rebuild = None
        else:
            watermark = self._choose_watermark(window, hot, overhead)
        floor = fold.current.watermark if fold.current is not None else 0
        if watermark is None or watermark <= floor:
            return None
        return watermark

    def plan(
        self, watermark: int, *, window: int, digest: str, span: Blobs, hot: Blobs, ordinal: int
    ) -> CompactionPlan:
        """The summary of (last valid checkpoint, watermark]: its chunks, each sized to fit the
        same budget as a turn request. `digest` names the prefix 1..watermark; `span` holds the
        span's offloaded results (`ContextFold.span_blobs`), `hot` the hot ones."""
        fold = self.fold
        previous = fold.valid
        start = previous.watermark if previous is not None else 0
        ctx = fold.context
        facts = fold.facts.render()
        prev_text = checkpoint_text(previous) if previous is not None else None
        max_tokens = min(8192, max(1024, window // 8))
        # Each call must fit the same budget as a turn request; a chunk's "previous summary" is
        # at most one answer long.
        room = int(self.budget(window) * BYTES_PER_TOKEN * 0.9 / self.calibration.factor)
        fixed = 2048 + len(facts) + max(len(prev_text or ""), max_tokens * BYTES_PER_TOKEN)
        chunks = chunk_items(
            render_items(ctx.span_messages(start, watermark, span)), max(room - fixed, room // 4)
        )
        covered = sum(
            size
            for seq, size in ctx.step_sizes(hot, include_covered=True)
            if start < seq <= watermark
        )
        plan = CompactionPlan(
            start=start,
            watermark=watermark,
            source_digest=digest,
            previous=previous,
            facts=facts,
            goal=fold.facts.goal,
            chunks=tuple(chunks),
            covered=covered,
            max_tokens=max_tokens,
            ordinal=ordinal,
            text=prev_text,
        )
        done = [
            p
            for p in fold.progress
            if (p.start, p.watermark, p.chunks) == (start, watermark, len(chunks))
        ]
        if (
            done
            and [p.chunk for p in done] == list(range(1, len(done) + 1))
            and all(validate(p.text, fold.facts.goal) is None for p in done)
        ):
            # A run cut during this very compaction: its answers are in the log, go on after them.
            return dataclasses.replace(
                plan,
                calls=tuple(p.request_digest for p in done),
                text=done[-1].text,
                first=len(done),
            )
        return plan

    def _choose_watermark(self, window: int, hot: Blobs, overhead: int | None) -> int | None:
        """Keep the newest steps raw (as many as `keep_steps` that fit the tail share, and that
        leave the request at `compact_to` of the window with the summary in it)."""
        sizes = self.fold.context.step_sizes(hot)
        if len(sizes) < 2:
            return None
        factor = self.calibration.factor
        tail = self.policy.tail_share * window
        if overhead is not None:
            summary = min(8192, max(1024, window // 8))  # the summary's answer room (`plan`)
            room = self.policy.compact_to * window - overhead * factor - summary
            tail = min(tail, max(0.0, room))
        # Sized in the provider's own count: a model that counts more tokens per byte keeps less.
        budget = tail * BYTES_PER_TOKEN / factor
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


def cache_view(store: Store, session: str, seq: int, body: CheckpointBody) -> None:
    """Cache a checkpoint as a view, rebuilt when missing or when it disagrees with the event
    (never read for use; a cache that cannot be written is only a cache)."""
    digest = body_digest(body)
    try:
        view = store.get_view(VIEW_KIND, session, body.key)
        if view is not None and view.source_digest == digest and sha256_hex(view.data) == digest:
            return
        store.put_view(
            View(
                kind=VIEW_KIND,
                session=session,
                key=body.key,
                source_high_water=seq,
                source_digest=digest,
                data=encode_body(body),
            )
        )
    except BubuError:
        return


__all__ = ["BYTES_PER_TOKEN", "Calibration", "CompactionPlan", "Compactor", "cache_view"]
