"""Keeping the next request inside the window: when to compact, building and loading checkpoints.

The decisions are made from the log (compaction notes, token usage). A checkpoint is a hidden
`checkpoint` event committed in the same transaction as its `compaction` note, so the log alone
says what the model was given: a fork or an import reproduces every later request. The derived
view is a cache of that event carrying its digest; a view that disagrees is ignored and rebuilt.

Every summarizer call is traced like a turn call: a `model_request` note (purpose "summary")
before it, and after it a hidden `summary_chunk` note with the answer and its token usage. A span
larger than the summarizer's window is summarized in chunks, in order, each folding the last. A
failed summary keeps the last valid checkpoint and adds the log's fact sheet for the rest.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from bubu import failpoints
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
from bubu.errors import BubuError, ProviderError
from bubu.events import (
    Actions,
    CheckpointBody,
    Compaction,
    Error,
    SummaryChunk,
    SystemNote,
    TokenUsage,
)
from bubu.events import ModelRequest as ModelRequestNote
from bubu.log.codec import sha256_hex
from bubu.log.store import View
from bubu.log.verify import CHECKPOINT_VIEW as VIEW_KIND
from bubu.projections.request import (
    BYTES_PER_TOKEN,
    Calibration,
    RequestFold,
    budget_of,
    over_budget,
    window_of,
)
from bubu.providers.base import Delta, ModelRequest, ModelResponse, TextPart

if TYPE_CHECKING:
    from bubu.engine.driver import Runner

_enc = msgspec.json.Encoder(order="sorted")


class _CallStopped(Exception):
    """Raised into a summarizer call's stream when the run is asked to stop."""


@dataclass(slots=True)
class Compactor:
    """Compaction for one runner: what the log says (checkpoints, facts, calibration) is in the
    runner's `RequestFold`; this carries out what it calls for."""

    policy: ContextPolicy = field(default_factory=ContextPolicy)
    fold: RequestFold = field(default_factory=RequestFold)

    @property
    def calibration(self) -> Calibration:
        """The estimate's calibration, from the log's token usage."""
        return self.fold.calibration

    def cache_views(self, runner: Runner) -> None:
        """Cache each checkpoint the fold took into use as a view (rebuilt when missing or when it
        disagrees with the event; never read for use)."""
        adopted, self.fold.adopted = self.fold.adopted, []
        if runner.lease.epoch < 0:
            return  # an inspecting runner writes nothing
        for seq, body in adopted:
            self._cache(runner, seq, body)

    def _cache(self, runner: Runner, seq: int, body: CheckpointBody) -> None:
        digest = body_digest(body)
        try:
            view = runner.store.get_view(VIEW_KIND, runner.session.id, body.key)
            if (
                view is not None
                and view.source_digest == digest
                and sha256_hex(view.data) == digest
            ):
                return
            runner.store.put_view(
                View(kind=VIEW_KIND, session=runner.session.id, key=body.key,
                     source_high_water=seq, source_digest=digest, data=encode_body(body))
            )  # fmt: skip
        except BubuError:
            return  # a cache that cannot be written is only a cache

    def window(self, runner: Runner) -> int:
        """The model's window in tokens."""
        return window_of(
            configured=runner.config.context_window,
            recorded=runner.turn.context_window,
            model=runner.provider.context_window,
        )

    def budget(self, runner: Runner) -> int:
        """The largest request in tokens: the compaction threshold."""
        return budget_of(self.policy, self.window(runner))

    def over_budget(self, runner: Runner, estimate: int) -> bool:
        """True when the calibrated estimate passes the compaction threshold."""
        return over_budget(self.fold, estimate, self.budget(runner))

    def compact(self, runner: Runner) -> None:
        """Summarize up to a new watermark and commit the checkpoint (or a fallback on the facts)."""
        fold = self.fold
        if fold.pending_rebuild is not None:
            watermark: int | None = fold.pending_rebuild.watermark
            fold.pending_rebuild = None
        else:
            watermark = self._choose_watermark(runner)
        floor = fold.current.watermark if fold.current is not None else 0
        if watermark is None or watermark <= floor:
            return
        previous = fold.valid
        start = previous.watermark if previous is not None else 0
        ctx = fold.context
        facts = fold.facts.render()
        prev_text = checkpoint_text(previous) if previous is not None else None
        max_tokens = min(8192, max(1024, self.window(runner) // 8))
        # Each call must fit the same budget as a turn request; a chunk's "previous summary" is
        # at most one answer long.
        room = int(self.budget(runner) * BYTES_PER_TOKEN * 0.9 / self.calibration.factor)
        fixed = 2048 + len(facts) + max(len(prev_text or ""), max_tokens * BYTES_PER_TOKEN)
        span = runner.blobs_of(ctx.span_blobs(start, watermark))
        chunks = chunk_items(
            render_items(ctx.span_messages(start, watermark, span)), max(room - fixed, room // 4)
        )
        hot = runner.blobs_of(fold.blobs_needed())
        covered = sum(
            size
            for seq, size in ctx.step_sizes(hot, include_covered=True)
            if start < seq <= watermark
        )
        digest = runner.digest_at(watermark)
        calls: list[str] = []
        text = prev_text
        first = 0
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
            calls, text, first = [p.request_digest for p in done], done[-1].text, len(done)
        problem = None
        for i in range(first, len(chunks)):
            request = summary_request(
                text, chunks[i], facts, max_tokens=max_tokens,
                ordinal=runner.turn.model_responses, part=(i + 1, len(chunks)),
            )  # fmt: skip
            answer, problem = self._traced(
                runner,
                request=request,
                span=(start, watermark),
                part=(i + 1, len(chunks)),
                calls=calls,
            )
            if problem is not None:
                break
            text = answer
        failpoints.hit("mid_compaction")
        model = runner.provider.spec
        if problem is None and text is not None:
            body = CheckpointBody(
                key=f"cp-{watermark}-{digest[:12]}", watermark=watermark, source_digest=digest,
                summary=text, facts=facts, model=model, prompt_version=PROMPT_VERSION,
                previous=previous.key if previous is not None else None, covered_bytes=covered,
                summarized_upto=watermark, chunks=len(chunks), calls=calls,
            )  # fmt: skip
            note = Compaction(checkpoint=body.key, watermark=watermark, source_digest=digest,
                              body_digest=body_digest(body), chunks=len(chunks), calls=calls)  # fmt: skip
        else:
            # The goal survives a failed summary: the last valid summary stays, the fact sheet
            # (no model needed) covers the rest, and the next compaction tries the summary again.
            body = CheckpointBody(
                key=f"cp-{watermark}-{digest[:12]}-facts", watermark=watermark, source_digest=digest,
                summary=previous.summary if previous is not None else "", facts=facts, model=model,
                prompt_version=PROMPT_VERSION, previous=previous.key if previous is not None else None,
                covered_bytes=covered, summarized_upto=start, chunks=len(chunks), calls=calls,
            )  # fmt: skip
            note = Compaction(
                checkpoint=body.key, watermark=watermark, source_digest=digest, ok=False,
                message=f"{problem}; kept the last valid checkpoint and the fact sheet for the rest "
                "(the summary is retried at the next compaction)",
                body_digest=body_digest(body), chunks=len(chunks), calls=calls,
            )  # fmt: skip
        # One transaction: the log never holds a checkpoint without its note, or the reverse.
        runner.append([runner.note(body), runner.note(note)])

    def _traced(
        self,
        runner: Runner,
        *,
        request: ModelRequest,
        span: tuple[int, int],
        part: tuple[int, int],
        calls: list[str],
    ) -> tuple[str, str | None]:
        """One summarizer call, traced: its request digest before, its answer and usage after.
        Returns the answer and why it may not be used (None when it may)."""
        model = runner.provider.spec
        encoded = _enc.encode({"model": model, "request": request})
        digest = sha256_hex(encoded)
        estimate = len(encoded) // BYTES_PER_TOKEN
        calls.append(digest)
        runner.append(
            [runner.note(ModelRequestNote(model=model, request_digest=digest,
                                          estimated_tokens=estimate, purpose="summary"))]
        )  # fmt: skip
        try:
            response = _call(runner, request)
        except ProviderError as e:
            runner.append([runner.event("system", "system", Error(
                error_class=e.error_class, message=f"summarizer: {e}", retryable=e.retryable,
                status=e.status), visibility="hidden")])  # fmt: skip
            return "", f"the summarizer failed: {e}"
        text = "".join(p.text for p in response.parts if isinstance(p, TextPart))
        u = response.usage
        usage = TokenUsage(
            model=model, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens, cache_write_tokens=u.cache_write_tokens,
            estimated_input_tokens=estimate, stop_reason=response.stop_reason,
        )  # fmt: skip
        chunk = SummaryChunk(request_digest=digest, start=span[0], watermark=span[1],
                             chunk=part[0], chunks=part[1], text=text)  # fmt: skip
        runner.append([runner.event("system", "system", SystemNote(note=chunk),
                                    Actions(token_usage=usage), visibility="hidden")])  # fmt: skip
        problem = validate(text, self.fold.facts.goal)
        if problem is not None:
            what = "" if part[1] == 1 else f" (part {part[0]} of {part[1]})"
            return text, f"{problem}{what}"
        return text, None

    def _choose_watermark(self, runner: Runner) -> int | None:
        """Keep the newest steps raw (as many as `keep_steps` that fit the tail share)."""
        sizes = self.fold.context.step_sizes(runner.blobs_of(self.fold.blobs_needed()))
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


def _call(runner: Runner, request: ModelRequest) -> ModelResponse:
    """The provider call on a daemon thread, so that a stop ends the wait at once (and the stream
    at its next delta) and never keeps the process alive for an answer nobody will read."""
    box: list[ModelResponse | BaseException] = []
    done = threading.Event()

    def on_delta(_: Delta) -> None:
        if runner._stop is not None:
            raise _CallStopped

    def run() -> None:
        try:
            box.append(runner.provider.complete(request, on_delta))
        except BaseException as e:  # handed to the waiting thread
            box.append(e)
        finally:
            done.set()

    threading.Thread(target=run, name="bubu-summary", daemon=True).start()
    while not done.wait(0.1):
        runner._check_stop()
    runner._check_stop()
    (result,) = box
    if isinstance(result, BaseException):
        raise result
    return result


def compact_now(runner: Runner) -> Compaction | None:
    """Build a checkpoint now, whatever the budget says (`bubu compact`): the same summary,
    validation and fallback as before a model call. Returns the compaction note it committed, or
    None when there was nothing to fold (fewer than two steps after the last checkpoint)."""
    from bubu.engine.driver import _Stop

    beat = threading.Thread(target=runner._beat, name="bubu-lease", daemon=True)
    beat.start()
    start = runner.high_water
    try:
        runner.compactor.compact(runner)
    except _Stop:
        return None  # stopped: whatever was committed stays, the summary is retried later
    finally:
        runner._stop_event.set()
    notes = [
        c.note
        for r in runner.store.read(runner.session.id, after=start, kinds=("compaction",))
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, Compaction)
    ]
    return notes[-1] if notes else None
