"""The model call: project the next request, compact it to fit, call the model, commit its answer.

One attempt per call of `call`; a transient failure is recorded and waited out here, and the
driver's loop makes the next attempt after `decide` has looked at the limits again. What the
call needs of the runner is `ModelHost`; nothing here imports the driver.
"""

from __future__ import annotations

import concurrent.futures as cf
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, assert_never

from bubu import clock, failpoints, ids, pricing
from bubu.engine import choices
from bubu.engine.attempts import End, Knobs, after_failure, wanted_model
from bubu.engine.callids import CallIds, unique_call_id
from bubu.engine.compactor import Compactor
from bubu.engine.host import Observer, RunnerView
from bubu.engine.instructions import Instructions
from bubu.engine.loops import GoOn, Looping, Stuck, verdict
from bubu.engine.overflow import Again, Shrink, Stop, after_overflow, empty_response
from bubu.engine.prompt import system_prompt
from bubu.errors import ProviderError
from bubu.events import (
    Actions,
    Content,
    EndCause,
    Error,
    Event,
    FunctionCall,
    ServerNote,
    Text,
    Thinking,
    TokenUsage,
    TurnEndReason,
    WindowLearned,
)
from bubu.events import ModelRequest as ModelRequestNote
from bubu.log import codec
from bubu.projections.context import ContextFold
from bubu.projections.longrun import LongRunFold, format_duration
from bubu.projections.request import NextRequest, Prefix, RequestFold, build
from bubu.providers.base import (
    Delta,
    ModelRequest,
    ModelResponse,
    Provider,
    TextPart,
    ThinkingPart,
    ToolSpec,
    Usage,
)

T = TypeVar("T")


class ModelHost(RunnerView, Protocol):
    """What the model call needs of the runner."""

    provider: Provider
    """The provider of the model the turn is on now (the call switches it to a fallback)."""
    fallbacks: dict[str, Provider]
    observer: Observer
    prompt: str | None
    longrun: LongRunFold
    requests: RequestFold
    instructions: Instructions
    compactor: Compactor
    call_ids: CallIds
    """Every call id of the session (they must be unique)."""
    run_seq: int
    """The seq this run started at."""
    pool: cf.ThreadPoolExecutor

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """The tools the model is offered."""

    @property
    def context(self) -> ContextFold: ...

    def stage(self, events: Sequence[Event], *, after: str | None = ...) -> None: ...

    def end_turn(
        self,
        reason: TurnEndReason,
        message: str | None = ...,
        *,
        extra: Sequence[Event] = ...,
        cause: EndCause | None = ...,
    ) -> None: ...

    def wait(self, fut: cf.Future[T]) -> T: ...

    def sleep(self, seconds: float) -> None: ...

    def window(self) -> int: ...

    def over_budget(self, estimate: int) -> bool: ...

    def compact(self) -> None: ...


def sanitize(value: Any) -> Any:
    """Replace lone surrogates in every string of a JSON value (provider text is not trusted)."""
    if isinstance(value, str):
        return codec.sanitize_text(value)
    if isinstance(value, dict):
        return {codec.sanitize_text(str(k)): sanitize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize(v) for v in value]
    return value


class _PastLimit(Exception):
    """A limit of the turn was reached while a model call ran: the call is cancelled."""

    def __init__(self, *, cause: EndCause | None, message: str) -> None:
        super().__init__(message)
        self.cause, self.message = cause, message


@dataclass(slots=True, kw_only=True)
class _Budget:
    """What the model call in flight has used so far, as its stream shows it."""

    estimate: int
    chars: int = 0
    cancelled: bool = False


def _on_daemon(
    fn: Callable[[ModelRequest], ModelResponse], request: ModelRequest
) -> cf.Future[ModelResponse]:
    """`fn(request)` on a thread of its own that the interpreter does not wait for at exit: a
    model call has no side effect, so one cut short (a stop, a limit) is left behind, and the
    process ends when the turn does, not when a silent server finally answers."""
    fut: cf.Future[ModelResponse] = cf.Future()

    def run() -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn(request))
        except BaseException as e:  # broad: the caller re-raises it from the future
            fut.set_exception(e)

    threading.Thread(target=run, name="bubu-model", daemon=True).start()
    return fut


class ModelCaller:
    """Makes the runner's model calls."""

    def __init__(self, host: ModelHost) -> None:
        self.host = host
        self._budget = _Budget(estimate=0)
        self.primary = host.provider
        """The provider the runner was made with (the turn's own model)."""
        self.hot: dict[str, bytes] = {}
        """The hot offloaded results' bytes (content-addressed)."""

    @property
    def system(self) -> str:
        """The system prompt: stable for the session, part of the cacheable prefix."""
        h = self.host
        if h.prompt is not None:
            base = h.prompt
        elif h.turn.system_prompt is not None:
            base = h.turn.system_prompt
        else:
            base = system_prompt(h.session.workspace)
        return h.instructions.system(base)

    def blobs_of(self, shas: Sequence[str]) -> dict[str, bytes]:
        """The bytes of these offloaded results, as far as the store has them."""
        out: dict[str, bytes] = {}
        for sha in shas:
            data = self.hot.get(sha)
            if data is None:
                data = self.host.store.blob(sha)
            if data is not None:
                out[sha] = data
        return out

    def next_request(self) -> NextRequest:
        """The next model request, its digest and estimate: the pure projection of the log
        (`projections.request`), given the prefix and the hot blobs' bytes read here."""
        h = self.host
        self.hot = self.blobs_of(h.requests.blobs_needed())
        prefix = Prefix(
            model=h.provider.spec,
            system=self.system,
            tools=h.tool_specs,
            max_tokens=h.config.max_tokens,
            session_id=h.session.id,
        )
        return build(h.requests, prefix, ordinal=h.turn.model_responses, blobs=self.hot)

    def digest_at(self, seq: int) -> str:
        """The chain digest of this session's prefix 1..seq."""
        rows = self.host.store.read(self.host.session.id, after=seq - 1, upto=seq)
        return rows[0].hash if rows else codec.GENESIS.hex()

    def call(self) -> None:
        """One attempt of the next model call; a transient failure plans (and waits out) the next
        attempt, which the loop makes after `decide` has looked at the limits again."""
        h = self.host
        self._select_model()
        nxt = self.next_request()
        # Compact until the request fits, while a pass still folds something (choices.py).
        passes, before, after = 0, None, self._watermark()
        while choices.compact_again(
            over_budget=h.over_budget(nxt.estimate),
            passes=passes, before=before, after=after,
        ):  # fmt: skip
            before = after
            h.compact()
            nxt = self.next_request()
            passes, after = passes + 1, self._watermark()
        request, digest, estimate, checkpoint = (
            nxt.request,
            nxt.digest,
            nxt.estimate,
            nxt.checkpoint,
        )
        attempt = h.longrun.streak + 1
        h.append(
            [h.note(ModelRequestNote(model=h.provider.spec, request_digest=digest, checkpoint=checkpoint,
                                     estimated_tokens=estimate, attempt=attempt))]
        )  # fmt: skip
        failpoints.hit("before_model_call")
        h.observer.on_activity("thinking")
        h.check_stop()  # a stop asked for by now (a draining worker) comes before the call
        self._budget = _Budget(estimate=estimate)
        try:
            response = self._wait(_on_daemon(self._complete, request))
            empty_response(response, h.provider.spec)
        except ProviderError as e:
            if not self._overflowed(e, estimate):
                self._failed_attempt(e, attempt)
            return
        except _PastLimit as over:
            h.end_turn("stopped", over.message, cause=over.cause)
            return
        self._commit_response(response, estimate)

    def _wait(self, fut: cf.Future[ModelResponse]) -> ModelResponse:
        """The call's response, or `_PastLimit` once the turn's time limit passes while it runs
        (the call is cancelled: its stream is dropped at its next fragment)."""
        lr = self.host.longrun
        if lr.time_limit_s is None:
            return self.host.wait(fut)
        left_s = lr.time_limit_s - lr.running_ms(clock.now_ms()) / 1000
        deadline = clock.monotonic() + max(0.0, left_s)
        while True:
            try:
                return fut.result(timeout=max(0.0, min(0.1, deadline - clock.monotonic())))
            except cf.TimeoutError:
                self.host.check_stop()
                if clock.monotonic() >= deadline:
                    self._budget.cancelled = True
                    raise _PastLimit(
                        cause="max_time",
                        message=(
                            f"the time limit of {format_duration(lr.time_limit_s)} was reached "
                            "during a model call, which was cancelled; `bubu resume` continues "
                            "the turn (raise the limit with --max-time DURATION)"
                        ),
                    ) from None

    def _over_in_stream(self, d: Delta) -> None:
        """Cancel the call once what it has streamed takes the turn past its token or cost limit
        (output counted at about four characters a token, the request at its estimate)."""
        b, h = self._budget, self.host
        if b.cancelled:
            raise _PastLimit(cause="max_time", message="cancelled")
        b.chars += len(d.text)
        out = b.chars // 4
        lr = h.longrun
        if lr.token_limit is not None and lr.tokens + b.estimate + out >= lr.token_limit:
            raise _PastLimit(
                cause="max_tokens",
                message=(
                    f"the token limit of {lr.token_limit:,} was reached during a model call "
                    f"(about {lr.tokens + b.estimate + out:,} tokens with what it streamed), "
                    "which was cancelled; `bubu resume` continues the turn (raise the limit with "
                    "--max-tokens N)"
                ),
            )
        t = h.turn
        if t.max_cost is not None:
            spent = pricing.usage_cost(
                h.provider.spec, Usage(input_tokens=b.estimate, output_tokens=out),
                official=getattr(h.provider, "official", True),
            )  # fmt: skip
            if spent is not None and t.turn_cost + spent >= t.max_cost:
                raise _PastLimit(
                    cause=None,
                    message=(
                        f"the cost limit of ${t.max_cost:g} was reached during a model call "
                        f"(about ${t.turn_cost + spent:.4f} with what it streamed), which was "
                        "cancelled; `bubu resume SESSION --max-cost USD` with a higher limit "
                        "continues the task"
                    ),
                )

    def stuck(self) -> bool:
        """End the turn when the model keeps repeating one failing call, or one call that keeps
        returning the same result (loops.py)."""
        t = self.host.turn
        v = verdict(t.calls.values(), after_seq=self.host.run_seq, last=t.last_outcome,
                    loop_limit=self.host.config.loop_limit)  # fmt: skip
        match v:
            case GoOn():
                return False
            case Stuck() | Looping():
                self.host.end_turn("stopped", v.message)
                return True
            case _:
                assert_never(v)

    def _overflowed(self, e: ProviderError, estimate: int) -> bool:
        """Handle an overflow or an empty answer (overflow.py); False: the retry policy decides."""
        h = self.host
        window = h.window()
        calibrated = int(estimate * h.compactor.calibration.factor)
        lr = h.longrun
        in_a_row = 1 + (
            lr.overflows_in_a_row if e.error_class == "context_length" else lr.odd_in_a_row
        )
        plan = after_overflow(e, in_a_row=in_a_row, window=window, estimate=calibrated)
        if plan is None:
            return False
        error = Error(
            error_class=e.error_class,
            message=str(e),
            retryable=not isinstance(plan, Stop) or plan.cause is not None,
            status=e.status,
        )
        match plan:
            case Shrink(window=tokens, source=source):
                h.append(
                    [
                        h.event("system", "system", error),
                        h.note(WindowLearned(tokens=tokens, source=source)),
                    ]
                )
            case Again():
                h.append([h.event("system", "system", error)])
            case Stop(message=message, cause=cause):
                h.append([h.event("system", "system", error)])
                if cause is not None:
                    message += f"; `bubu resume {h.session.id}` asks again"
                h.end_turn("failed", message, cause=cause)
            case _:
                assert_never(plan)
        return True

    def _watermark(self) -> int:
        checkpoint = self.host.context.checkpoint
        return checkpoint.watermark if checkpoint else 0

    def _select_model(self) -> None:
        """Use the provider of the model the log says the turn is on (a fallback, or the primary)."""
        h = self.host
        want = wanted_model(h.longrun, self.primary.spec)
        if want is None:
            h.provider = self.primary
        elif want != h.provider.spec:
            if want not in h.fallbacks:
                from bubu.providers import resolve

                h.fallbacks[want] = resolve(want)
            h.provider = h.fallbacks[want]

    def _failed_attempt(self, e: ProviderError, attempt: int) -> None:
        """Record a failed attempt; end the turn, or wait (interruptibly) before the next one."""
        h = self.host
        c = h.config
        then = after_failure(
            e, attempt=attempt, fold=h.longrun, primary=self.primary.spec,
            knobs=Knobs(retry_for_s=c.retry_for_s, base_s=c.backoff_s, cap_s=c.backoff_max_s,
                        max_attempts=c.model_attempts),
            current=h.provider.spec, now_ms=clock.now_ms(), session=h.session.id,
            rand=random.random,
        )  # fmt: skip
        events = [h.event("system", "system", then.error)]
        if isinstance(then, End):
            h.append(events)
            h.end_turn("failed", then.message, cause=then.cause)
            return
        if then.switch is not None:
            events.append(h.note(then.switch))
        h.append(events)
        h.observer.on_activity(f"retrying in {then.delay_s:.1f}s ({e.error_class})")
        h.sleep(then.delay_s)

    def _complete(self, request: ModelRequest) -> ModelResponse:
        fired = False
        h = self.host

        def on_delta(d: Delta) -> None:
            nonlocal fired
            if not fired:
                fired = True
                failpoints.hit("mid_model_call")
            h.check_stop()
            self._over_in_stream(d)
            h.observer.on_delta(d)

        response = h.provider.complete(request, on_delta)
        if not fired:
            failpoints.hit("mid_model_call")
        return response

    def _commit_response(self, response: ModelResponse, estimate: int) -> None:
        h = self.host
        inv = ids.invocation_id()
        contents: list[Content] = []
        for p in response.parts:
            if isinstance(p, TextPart):
                contents.append(Text(text=codec.sanitize_text(p.text), native=sanitize(p.native)))
            elif isinstance(p, ThinkingPart):
                contents.append(
                    Thinking(
                        text=codec.sanitize_text(p.text),
                        signature=p.signature,
                        redacted=p.redacted,
                        native=sanitize(p.native),
                    )
                )
            else:
                cid = unique_call_id(p.call_id, h.call_ids)
                h.call_ids.add(cid)
                contents.append(FunctionCall(
                    call_id=cid, provider_id=None if cid == p.call_id else p.call_id, name=codec.sanitize_text(p.name), arguments=sanitize(p.arguments),
                    raw_arguments=None if p.raw_arguments is None else codec.sanitize_text(p.raw_arguments),
                    native=sanitize(p.native)))  # fmt: skip
        if not contents:
            contents.append(Text(text=""))
        u = response.usage
        usage = TokenUsage(
            model=h.provider.spec, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens, cache_write_tokens=u.cache_write_tokens,
            reasoning_tokens=u.reasoning_tokens,
            estimated_input_tokens=estimate, stop_reason=response.stop_reason,
            served_model=codec.sanitize_text(response.model)[:200] or None, usage_unknown=not u.reported,
            cost_usd=pricing.usage_cost(h.provider.spec, u, official=getattr(h.provider, "official", True)),
        )  # fmt: skip
        events = (
            [h.note(ServerNote(text=codec.sanitize_text(response.notice)))]
            if response.notice
            else []
        )
        events += [h.event("model", "agent", c, invocation=inv) for c in contents[:-1]]
        events.append(h.event("model", "agent", contents[-1], Actions(token_usage=usage, end_invocation=True),
                              invocation=inv, status="completed"))  # fmt: skip
        # Committed with the dispatches of its calls (or the turn's end): one transaction.
        h.stage(events, after="after_model_response")


__all__ = ["ModelCaller", "ModelHost", "sanitize"]
