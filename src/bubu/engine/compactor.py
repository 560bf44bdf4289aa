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
    VIEW_KIND,
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
    Record,
    SummaryChunk,
    SystemNote,
    TokenUsage,
)
from bubu.events import ModelRequest as ModelRequestNote
from bubu.log.codec import sha256_hex
from bubu.log.store import View
from bubu.projections.context import Checkpoint
from bubu.projections.facts import Facts
from bubu.providers import windows
from bubu.providers.base import Delta, ModelRequest, ModelResponse, TextPart

if TYPE_CHECKING:
    from bubu.engine.driver import Runner

BYTES_PER_TOKEN = 4
_enc = msgspec.json.Encoder(order="sorted")


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


class _CallStopped(Exception):
    """Raised into a summarizer call's stream when the run is asked to stop."""


@dataclass(slots=True)
class Compactor:
    """Compaction for one runner."""

    policy: ContextPolicy = field(default_factory=ContextPolicy)
    facts: Facts = field(default_factory=Facts)
    calibration: Calibration = field(default_factory=Calibration)
    pending_rebuild: Compaction | None = None
    """A checkpoint an older Bubu stored only as a view: rebuilt as an event before use."""
    current: CheckpointBody | None = None
    """The checkpoint the requests use (a valid summary, or a fallback on the fact sheet)."""
    valid: CheckpointBody | None = None
    """The newest checkpoint whose summary covers its whole range: what the next summary folds."""
    progress: list[SummaryChunk] = field(default_factory=list)
    """Chunk answers committed since the last compaction note (a compaction cut by a crash)."""
    _bodies: dict[str, tuple[int, CheckpointBody]] = field(default_factory=dict)

    def apply(self, runner: Runner, r: Record) -> None:
        """Fold a record in: facts, calibration, and checkpoints recorded in the log."""
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
                self._use(runner, found[0], found[1])
                self.pending_rebuild = None

    def _use(self, runner: Runner, seq: int, body: CheckpointBody) -> None:
        self.current = body
        if body.summarized_upto >= body.watermark:
            self.valid = body
        runner.context.set_checkpoint(
            Checkpoint(
                key=body.key,
                watermark=body.watermark,
                source_digest=body.source_digest,
                text=checkpoint_text(body),
            )
        )
        self._cache(runner, seq, body)

    def _cache(self, runner: Runner, seq: int, body: CheckpointBody) -> None:
        """Rebuild the view from the event when it is missing or disagrees (never read for use)."""
        if runner.lease.epoch < 0:
            return  # an inspecting runner writes nothing
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
        """The model's window in tokens (one the server's overflow error stated wins)."""
        t = runner.turn
        if t.context_window and windows.learned(t.window_source):
            return t.context_window
        return (
            runner.config.context_window
            or runner.turn.context_window
            or runner.provider.context_window
        )

    def budget(self, runner: Runner) -> int:
        """The largest request in tokens: the compaction threshold."""
        window = self.window(runner)
        return int(min(self.policy.compact_at * window, window - self.policy.reserve(window)))

    def over_budget(self, runner: Runner, estimate: int) -> bool:
        """True when the calibrated estimate passes the compaction threshold."""
        return (
            estimate * self.calibration.factor > self.budget(runner)
            or self.pending_rebuild is not None
        )

    def compact(self, runner: Runner) -> None:
        """Summarize up to a new watermark and commit the checkpoint (or a fallback on the facts)."""
        if self.pending_rebuild is not None:
            watermark: int | None = self.pending_rebuild.watermark
            self.pending_rebuild = None
        else:
            watermark = self._choose_watermark(runner)
        floor = self.current.watermark if self.current is not None else 0
        if watermark is None or watermark <= floor:
            return
        previous = self.valid
        start = previous.watermark if previous is not None else 0
        ctx = runner.context
        facts = self.facts.render()
        prev_text = checkpoint_text(previous) if previous is not None else None
        max_tokens = min(8192, max(1024, self.window(runner) // 8))
        # Each call must fit the same budget as a turn request; a chunk's "previous summary" is
        # at most one answer long.
        room = int(self.budget(runner) * BYTES_PER_TOKEN * 0.9 / self.calibration.factor)
        fixed = 2048 + len(facts) + max(len(prev_text or ""), max_tokens * BYTES_PER_TOKEN)
        chunks = chunk_items(
            render_items(ctx.span_messages(start, watermark)), max(room - fixed, room // 4)
        )
        covered = sum(
            size for seq, size in ctx.step_sizes(include_covered=True) if start < seq <= watermark
        )
        digest = runner.digest_at(watermark)
        calls: list[str] = []
        text = prev_text
        first = 0
        done = [
            p
            for p in self.progress
            if (p.start, p.watermark, p.chunks) == (start, watermark, len(chunks))
        ]
        if (
            done
            and [p.chunk for p in done] == list(range(1, len(done) + 1))
            and all(validate(p.text, self.facts.goal) is None for p in done)
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
        problem = validate(text, self.facts.goal)
        if problem is not None:
            what = "" if part[1] == 1 else f" (part {part[0]} of {part[1]})"
            return text, f"{problem}{what}"
        return text, None

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
