"""Carrying out a compaction for a runner: the plan comes from `Compactor` (the log's decision);
this makes the summarizer calls, traces each one, and commits the checkpoint with its note.

Every summarizer call is traced like a turn call: a `model_request` note (purpose "summary")
before it, and after it a hidden `summary_chunk` note with the answer and its token usage.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import msgspec

from bubu import failpoints
from bubu.engine.ports import Appender, BlobReader, RunState, Stopped, Stops
from bubu.errors import ProviderError
from bubu.events import (
    Actions,
    Compaction,
    Error,
    ModelRequestNote,
    SummaryChunk,
    SystemNote,
    TokenUsage,
)
from bubu.log import codec
from bubu.log.codec import sha256_hex
from bubu.projections.request import BYTES_PER_TOKEN, window_of
from bubu.providers import windows
from bubu.providers.base import Delta, ModelRequest, ModelResponse, TextPart

if TYPE_CHECKING:
    from bubu.engine.compactor import CompactionPlan, Compactor
    from bubu.engine.hookpoints import HookPoints
    from bubu.log.store import SessionInfo, Store
    from bubu.projections.request import NextRequest


_enc = msgspec.json.Encoder(order="sorted")


class _CallStopped(Exception):
    """Raised into a summarizer call's stream when the run is asked to stop."""


class Compacting:
    """Carries out the runner's compactions: its `window`, `over_budget` and `compact` are what
    the model call uses before each request."""

    def __init__(
        self,
        *,
        state: RunState,
        compactor: Compactor,
        log: Appender,
        stops: Stops,
        blobs: BlobReader,
        hook_points: HookPoints,
        next_request: Callable[[], NextRequest],
    ) -> None:
        self.state, self.compactor, self.log, self.stops = state, compactor, log, stops
        self.blobs, self.hook_points, self.next_request = blobs, hook_points, next_request

    def window(self) -> int:
        """The model's window in tokens: the host's setting, else the turn's, else the model's."""
        t = self.state.turn
        return window_of(
            learned=t.context_window if windows.learned(t.window_source) else None,
            configured=self.state.config.context_window,
            recorded=t.context_window,
            model=self.state.provider.context_window,
        )

    def over_budget(self, estimate: int) -> bool:
        """Whether the next request must be compacted first."""
        return self.compactor.over_budget(estimate, self.window())

    def compact(self, *, trigger: str = "auto") -> None:
        """Summarize up to a new watermark and commit the checkpoint (or a fallback on the facts);
        the PreCompact hooks are told first (`trigger`: "auto", or "manual" for `bubu compact`)."""
        compactor, log = self.compactor, self.log
        size = self.window()
        hot = self.blobs.blobs_of(compactor.fold.blobs_needed())
        steps = sum(n for _, n in compactor.fold.context.step_sizes(hot)) // BYTES_PER_TOKEN
        overhead = max(0, self.next_request().estimate - steps)
        watermark = compactor.target(size, hot, overhead=overhead)
        if watermark is None:
            return
        self.hook_points.pre_compact(trigger)
        start = compactor.fold.valid.watermark if compactor.fold.valid is not None else 0
        span = self.blobs.blobs_of(compactor.fold.context.span_blobs(start, watermark))
        cap = int(compactor.policy.summary_result_share * size * BYTES_PER_TOKEN)
        plan = compactor.plan(
            watermark,
            window=size,
            digest=self._digest_at(watermark),
            span={sha: _head_and_tail(data, cap) for sha, data in span.items()},
            hot=hot,
            ordinal=self.state.turn.model_responses,
        )
        calls = list(plan.calls)
        text = plan.text
        problem = None
        for i in range(plan.first, len(plan.chunks)):
            answer, problem = self._traced(plan, i, text, calls)
            if problem is not None:
                break
            text = answer
        failpoints.hit("mid_compaction")
        body, note = plan.result(text, problem, calls, self.state.provider.spec)
        # One transaction: the log never holds a checkpoint without its note, or the reverse.
        log.append([log.note(body), log.note(note)])

    def _digest_at(self, seq: int) -> str:
        """The chain digest of this session's prefix 1..seq."""
        rows = self.state.store.read(self.state.session.id, after=seq - 1, upto=seq)
        return rows[0].hash if rows else codec.GENESIS.hex()

    def _traced(
        self, plan: CompactionPlan, i: int, text: str | None, calls: list[str]
    ) -> tuple[str, str | None]:
        """One summarizer call, traced: its request digest before, its answer and usage after.
        Returns the answer and why it may not be used (None when it may)."""
        log = self.log
        request = plan.request(i, text)
        model = self.state.provider.spec
        encoded = _enc.encode({"model": model, "request": request})
        digest = sha256_hex(encoded)
        estimate = len(encoded) // BYTES_PER_TOKEN
        calls.append(digest)
        log.append(
            [
                log.note(
                    ModelRequestNote(
                        model=model,
                        request_digest=digest,
                        estimated_tokens=estimate,
                        purpose="summary",
                    )
                )
            ]
        )
        try:
            response = self._call(request)
        except ProviderError as e:
            log.append(
                [
                    log.event(
                        "system",
                        "system",
                        Error(
                            error_class=e.error_class,
                            message=f"summarizer: {e}",
                            retryable=e.retryable,
                            status=e.status,
                        ),
                        visibility="hidden",
                    )
                ]
            )
            return "", f"the summarizer failed: {e}"
        answer = "".join(p.text for p in response.parts if isinstance(p, TextPart))
        u = response.usage
        usage = TokenUsage(
            model=model,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_tokens,
            estimated_input_tokens=estimate,
            stop_reason=response.stop_reason,
        )
        chunk = SummaryChunk(
            request_digest=digest,
            start=plan.start,
            watermark=plan.watermark,
            chunk=i + 1,
            chunks=len(plan.chunks),
            text=answer,
        )
        log.append(
            [
                log.event(
                    "system",
                    "system",
                    SystemNote(note=chunk),
                    Actions(token_usage=usage),
                    visibility="hidden",
                )
            ]
        )
        return answer, plan.problem(answer, i)

    def _call(self, request: ModelRequest) -> ModelResponse:
        """The provider call on a daemon thread, so that a stop ends the wait at once (and the
        stream at its next delta) and never keeps the process alive for an answer nobody reads."""
        box: list[ModelResponse | BaseException] = []
        done = threading.Event()
        stops, provider = self.stops, self.state.provider

        def on_delta(_: Delta) -> None:
            if stops.stop_reason is not None:
                raise _CallStopped

        def run() -> None:
            try:
                box.append(provider.complete(request, on_delta))
            except BaseException as e:  # handed to the waiting thread
                box.append(e)
            finally:
                done.set()

        threading.Thread(target=run, name="bubu-summary", daemon=True).start()
        while not done.wait(0.1):
            stops.check_stop()
        stops.check_stop()
        (result,) = box
        if isinstance(result, BaseException):
            raise result
        return result


def _head_and_tail(data: bytes, cap: int) -> bytes:
    """`data` as the summarizer reads it: whole up to `cap` bytes, else its head and tail."""
    if len(data) <= cap:
        return data
    half = max(1, cap // 2)
    left = len(data) - 2 * half
    mark = f"\n[… {left:,} bytes of this result are left out of the summary's reading …]\n"
    return data[:half] + mark.encode() + data[-half:]


class Manual(Protocol):
    """What a compaction asked for by the user (`bubu compact`, ``/compact``) needs of the
    runner: its compaction, its lease's heartbeat and its stop."""

    compacting: Compacting
    store: Store
    session: SessionInfo
    high_water: int
    stop_event: threading.Event

    def beat(self) -> None: ...


def compact_now(runner: Manual) -> Compaction | None:
    """Build a checkpoint now, whatever the budget says (`bubu compact`): the same summary,
    validation and fallback as before a model call. Returns the compaction note it committed, or
    None when there was nothing to fold (fewer than two steps after the last checkpoint)."""
    beat = threading.Thread(target=runner.beat, name="bubu-lease", daemon=True)
    beat.start()
    start = runner.high_water
    try:
        runner.compacting.compact(trigger="manual")
    except Stopped:
        return None  # stopped: whatever was committed stays, the summary is retried later
    finally:
        runner.stop_event.set()
    notes = [
        c.note
        for r in runner.store.read(runner.session.id, after=start, kinds=("compaction",))
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, Compaction)
    ]
    return notes[-1] if notes else None
