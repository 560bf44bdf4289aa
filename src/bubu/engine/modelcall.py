"""The model call: project the next request, compact it to fit, call the model, commit its answer.

One attempt per call of `call`; a transient failure is recorded and waited out here, and the
driver's loop makes the next attempt after `decide` has looked at the limits again. What the
call reads of the run is `ModelState`; it is handed the rest (the log's appender, the stop, the
request builder, the compaction) and imports no driver.
"""

from __future__ import annotations

import concurrent.futures as cf
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, assert_never

from bubu import clock, failpoints, ids, pricing
from bubu.engine import choices
from bubu.engine.attempts import End, Knobs, after_failure, wanted_model
from bubu.engine.blobs import Blobs
from bubu.engine.callids import CallIds, unique_call_id
from bubu.engine.compacting import Compacting
from bubu.engine.instructions import Instructions
from bubu.engine.loops import GoOn, Looping, Stuck, verdict
from bubu.engine.overflow import Again, Shrink, Stop, after_overflow, empty_response
from bubu.engine.ports import Appender, EndTurn, Observer, RunState, Stops
from bubu.engine.prompt import system_prompt
from bubu.errors import ProviderError
from bubu.events import (
    Actions,
    Content,
    EndCause,
    Error,
    FunctionCall,
    ModelRequestNote,
    ServerNote,
    Text,
    Thinking,
    TokenUsage,
    WindowLearned,
)
from bubu.log import codec
from bubu.projections.longrun import format_duration
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


class ModelState(RunState, Protocol):
    """The run's state and the folds the model call reads besides (the runner keeps them)."""

    requests: RequestFold
    call_ids: CallIds
    """Every call id of the session (they must be unique)."""


class RequestBuilder:
    """Projects the next model request from the log: the system prompt, the tools offered and
    the bytes of the offloaded results it shows."""

    def __init__(
        self,
        state: ModelState,
        blobs: Blobs,
        instructions: Instructions,
        *,
        prompt: str | None,
        tools: tuple[ToolSpec, ...],
        plan_tools: tuple[ToolSpec, ...],
    ) -> None:
        self.state, self.blobs, self.instructions, self.prompt = state, blobs, instructions, prompt
        self.tools, self.plan_tools = tools, plan_tools

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """The tools the model is offered: in a planning turn, only those that read."""
        return self.plan_tools if self.state.turn.plan else self.tools

    @property
    def system(self) -> str:
        """The system prompt: stable for the session, part of the cacheable prefix."""
        s = self.state
        if self.prompt is not None:
            base = self.prompt
        elif s.turn.system_prompt is not None:
            base = s.turn.system_prompt
        else:
            base = system_prompt(s.session.workspace)
        return self.instructions.system(base)

    def next(self) -> NextRequest:
        """The next model request with the digest naming it and its estimate: the pure projection
        of the log (`projections.request`), given the prefix and the hot blobs' bytes read here."""
        s = self.state
        hot = self.blobs.keep_hot(s.requests.blobs_needed())
        prefix = Prefix(
            model=s.provider.spec,
            system=self.system,
            tools=self.tool_specs,
            max_tokens=s.config.max_tokens,
            session_id=s.session.id,
        )
        return build(s.requests, prefix, ordinal=s.turn.model_responses, blobs=hot)


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

    def __init__(
        self,
        *,
        state: ModelState,
        log: Appender,
        stops: Stops,
        end_turn: EndTurn,
        requests: RequestBuilder,
        compacting: Compacting,
        observer: Observer,
        fallbacks: dict[str, Provider],
    ) -> None:
        self.state, self.log, self.stops, self.end_turn = state, log, stops, end_turn
        self.requests, self.compacting, self.observer = requests, compacting, observer
        self.fallbacks = fallbacks
        """Providers for the turn's fallback models, by spec (others are resolved when needed)."""
        self._budget = _Budget(estimate=0)
        self.primary = state.provider
        """The provider the runner was made with (the turn's own model)."""

    def call(self) -> None:
        """One attempt of the next model call; a transient failure plans (and waits out) the next
        attempt, which the loop makes after `decide` has looked at the limits again."""
        self._select_model()
        nxt = self.requests.next()
        # Compact until the request fits, while a pass still folds something (choices.py).
        passes, before, after = 0, None, self._watermark()
        while choices.compact_again(
            over_budget=self.compacting.over_budget(nxt.estimate),
            passes=passes,
            before=before,
            after=after,
        ):
            before = after
            self.compacting.compact()
            nxt = self.requests.next()
            passes, after = passes + 1, self._watermark()
        request, digest, estimate, checkpoint = (
            nxt.request,
            nxt.digest,
            nxt.estimate,
            nxt.checkpoint,
        )
        attempt = self.state.longrun.streak + 1
        self.log.append(
            [
                self.log.note(
                    ModelRequestNote(
                        model=self.state.provider.spec,
                        request_digest=digest,
                        checkpoint=checkpoint,
                        estimated_tokens=estimate,
                        attempt=attempt,
                    )
                )
            ]
        )
        failpoints.hit("before_model_call")
        self.observer.on_activity("thinking")
        self.stops.check_stop()  # a stop asked for by now (a draining worker) comes before the call
        self._budget = _Budget(estimate=estimate)
        try:
            response = self._wait(_on_daemon(self._complete, request))
            empty_response(response, self.state.provider.spec)
        except ProviderError as e:
            if not self._overflowed(e, estimate):
                self._failed_attempt(e, attempt)
            return
        except _PastLimit as over:
            self.end_turn("stopped", over.message, cause=over.cause)
            return
        self._commit_response(response, estimate)

    def _wait(self, fut: cf.Future[ModelResponse]) -> ModelResponse:
        """The call's response, or `_PastLimit` once the turn's time limit passes while it runs
        (the call is cancelled: its stream is dropped at its next fragment)."""
        lr = self.state.longrun
        if lr.time_limit_s is None:
            return self.stops.wait(fut)
        left_s = lr.time_limit_s - lr.running_ms(clock.now_ms()) / 1000
        deadline = clock.monotonic() + max(0.0, left_s)
        while True:
            try:
                return fut.result(timeout=max(0.0, min(0.1, deadline - clock.monotonic())))
            except cf.TimeoutError:
                self.stops.check_stop()
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
        b = self._budget
        if b.cancelled:
            raise _PastLimit(cause="max_time", message="cancelled")
        b.chars += len(d.text)
        out = b.chars // 4
        lr = self.state.longrun
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
        t = self.state.turn
        if t.max_cost is not None:
            spent = pricing.usage_cost(
                self.state.provider.spec,
                Usage(input_tokens=b.estimate, output_tokens=out),
                official=getattr(self.state.provider, "official", True),
            )
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
        t = self.state.turn
        v = verdict(
            t.calls.values(),
            after_seq=self.state.run_seq,
            last=t.last_outcome,
            loop_limit=self.state.config.loop_limit,
        )
        match v:
            case GoOn():
                return False
            case Stuck() | Looping():
                self.end_turn("stopped", v.message)
                return True
            case _:
                assert_never(v)

    def _overflowed(self, e: ProviderError, estimate: int) -> bool:
        """Handle an overflow or an empty answer (overflow.py); False: the retry policy decides."""
        window = self.compacting.window()
        calibrated = int(estimate * self.compacting.compactor.calibration.factor)
        lr = self.state.longrun
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
                self.log.append(
                    [
                        self.log.event("system", "system", error),
                        self.log.note(WindowLearned(tokens=tokens, source=source)),
                    ]
                )
            case Again():
                self.log.append([self.log.event("system", "system", error)])
            case Stop(message=message, cause=cause):
                self.log.append([self.log.event("system", "system", error)])
                if cause is not None:
                    message += f"; `bubu resume {self.state.session.id}` asks again"
                self.end_turn("failed", message, cause=cause)
            case _:
                assert_never(plan)
        return True

    def _watermark(self) -> int:
        checkpoint = self.state.requests.context.checkpoint
        return checkpoint.watermark if checkpoint else 0

    def _select_model(self) -> None:
        """Use the provider of the model the log says the turn is on (a fallback, or the
        primary)."""
        want = wanted_model(self.state.longrun, self.primary.spec)
        if want is None:
            self.state.provider = self.primary
        elif want != self.state.provider.spec:
            if want not in self.fallbacks:
                from bubu.providers import resolve

                self.fallbacks[want] = resolve(want)
            self.state.provider = self.fallbacks[want]

    def _failed_attempt(self, e: ProviderError, attempt: int) -> None:
        """Record a failed attempt; end the turn, or wait (interruptibly) before the next one."""
        c = self.state.config
        then = after_failure(
            e,
            attempt=attempt,
            fold=self.state.longrun,
            primary=self.primary.spec,
            knobs=Knobs(
                retry_for_s=c.retry_for_s,
                base_s=c.backoff_s,
                cap_s=c.backoff_max_s,
                max_attempts=c.model_attempts,
            ),
            current=self.state.provider.spec,
            now_ms=clock.now_ms(),
            session=self.state.session.id,
            rand=random.random,
        )
        events = [self.log.event("system", "system", then.error)]
        if isinstance(then, End):
            self.log.append(events)
            self.end_turn("failed", then.message, cause=then.cause)
            return
        if then.switch is not None:
            events.append(self.log.note(then.switch))
        self.log.append(events)
        self.observer.on_activity(f"retrying in {then.delay_s:.1f}s ({e.error_class})")
        self.stops.sleep(then.delay_s)

    def _complete(self, request: ModelRequest) -> ModelResponse:
        fired = False

        def on_delta(d: Delta) -> None:
            nonlocal fired
            if not fired:
                fired = True
                failpoints.hit("mid_model_call")
            self.stops.check_stop()
            self._over_in_stream(d)
            self.observer.on_delta(d)

        response = self.state.provider.complete(request, on_delta)
        if not fired:
            failpoints.hit("mid_model_call")
        return response

    def _commit_response(self, response: ModelResponse, estimate: int) -> None:
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
                cid = unique_call_id(p.call_id, self.state.call_ids)
                self.state.call_ids.add(cid)
                contents.append(
                    FunctionCall(
                        call_id=cid,
                        provider_id=None if cid == p.call_id else p.call_id,
                        name=codec.sanitize_text(p.name),
                        arguments=sanitize(p.arguments),
                        raw_arguments=None
                        if p.raw_arguments is None
                        else codec.sanitize_text(p.raw_arguments),
                        native=sanitize(p.native),
                    )
                )
        if not contents:
            contents.append(Text(text=""))
        u = response.usage
        usage = TokenUsage(
            model=self.state.provider.spec,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_tokens,
            reasoning_tokens=u.reasoning_tokens,
            estimated_input_tokens=estimate,
            stop_reason=response.stop_reason,
            served_model=codec.sanitize_text(response.model)[:200] or None,
            usage_unknown=not u.reported,
            cost_usd=pricing.usage_cost(
                self.state.provider.spec, u, official=getattr(self.state.provider, "official", True)
            ),
        )
        events = (
            [self.log.note(ServerNote(text=codec.sanitize_text(response.notice)))]
            if response.notice
            else []
        )
        events += [self.log.event("model", "agent", c, invocation=inv) for c in contents[:-1]]
        events.append(
            self.log.event(
                "model",
                "agent",
                contents[-1],
                Actions(token_usage=usage, end_invocation=True),
                invocation=inv,
                status="completed",
            )
        )
        # Committed with the dispatches of its calls (or the turn's end): one transaction.
        self.log.stage(events, after="after_model_response")


__all__ = ["ModelCaller", "ModelState", "RequestBuilder", "sanitize"]
