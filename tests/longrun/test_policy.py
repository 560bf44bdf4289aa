"""The pure parts of a long run: the backoff plan, the fold of budget and wait, the option
parsers."""

from __future__ import annotations

import math

import pytest

from bubu.cli.longrun import parse_count, parse_duration, waiting_json, waiting_line
from bubu.engine.backoff import (
    DEFAULT_RETRY_FOR_S,
    FALLBACK_AFTER,
    WAIT_CAP_S,
    GiveUp,
    Retry,
    full_jitter,
    plan_retry,
)
from bubu.errors import ConfigError
from bubu.events import (
    Actions,
    Error,
    ModelRequestNote,
    ModelSwitch,
    Note,
    Record,
    RunStarted,
    SystemNote,
    Text,
    TokenUsage,
    TurnEnded,
    TurnStarted,
    make,
)
from bubu.projections.longrun import LongRunFold, fold_longrun, format_duration


def _plan(**kw: object) -> object:
    args: dict[str, object] = {
        "attempt": 1,
        "retry_after_s": None,
        "since_ms": 0,
        "now_ms": 0,
        "retry_for_s": DEFAULT_RETRY_FOR_S,
        "chain": ("openai:a",),
        "model": "openai:a",
        "failures_on_model": 1,
        "rand": lambda: 1.0,
    }
    args.update(kw)
    return plan_retry(**args)  # type: ignore[arg-type]


def test_the_default_horizon_is_hours_and_each_wait_is_capped() -> None:
    assert DEFAULT_RETRY_FOR_S >= 3600
    assert WAIT_CAP_S == 300
    # Ceilings double from one second and stop at the cap; full jitter spans [0, ceiling].
    ceilings = [
        full_jitter(n, base_s=1.0, cap_s=WAIT_CAP_S, rand=lambda: 1.0) for n in range(1, 12)
    ]
    assert ceilings == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
    assert full_jitter(5, base_s=1.0, cap_s=WAIT_CAP_S, rand=lambda: 0.0) == 0
    assert full_jitter(10_000, base_s=1.0, cap_s=WAIT_CAP_S, rand=lambda: 0.5) == 150


def test_a_servers_retry_after_is_obeyed_within_the_cap() -> None:
    assert _plan(attempt=7, retry_after_s=1.5) == Retry(delay_s=1.5, model="openai:a")
    assert _plan(retry_after_s=3600.0) == Retry(delay_s=WAIT_CAP_S, model="openai:a")


def test_the_horizon_cuts_the_last_wait_and_then_gives_up() -> None:
    # 10 s horizon, failing for 9 s: the next wait would be 64 s, it is cut to the 1 s left.
    near = _plan(attempt=7, since_ms=0, now_ms=9_000, retry_for_s=10.0)
    assert near == Retry(delay_s=1.0, model="openai:a")
    assert _plan(attempt=8, since_ms=0, now_ms=10_000, retry_for_s=10.0) == GiveUp(waited_s=10.0)
    assert isinstance(_plan(attempt=3, max_attempts=3), GiveUp)


def test_fallbacks_take_over_after_a_run_of_failures_and_wrap_around() -> None:
    chain = ("openai:a", "anthropic:b")
    for n in range(1, FALLBACK_AFTER):
        assert _plan(chain=chain, failures_on_model=n) == Retry(delay_s=1.0, model="openai:a")
    switch = _plan(chain=chain, failures_on_model=FALLBACK_AFTER)
    assert switch == Retry(delay_s=0.0, model="anthropic:b", switched=True)
    back = _plan(chain=chain, model="anthropic:b", failures_on_model=FALLBACK_AFTER)
    assert back == Retry(delay_s=0.0, model="openai:a", switched=True)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("10m", 600),
        ("6h", 21600),
        ("1d", 86400),
        ("1h30m", 5400),
        ("45", 45),
        ("0.5s", 0.5),
        (" 2H ", 7200),
    ],
)
def test_durations_people_write_are_read(text: str, seconds: float) -> None:
    assert parse_duration(text, option="--retry-for") == seconds


@pytest.mark.parametrize("text", ["0", "0s", "-5m", "nan", "inf", "10x", "", "m", "1h 30m", "5s5"])
def test_bad_durations_are_one_line_errors(text: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_duration(text, option="--max-time")
    assert "--max-time must be a duration" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text", ["0", "-1", "nan", "1.5", "ten", ""])
def test_bad_counts_are_one_line_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="--max-steps must be a whole number above zero"):
        parse_count(text, option="--max-steps")
    assert parse_count("1_000", option="--max-steps") == 1000


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0.25, 5, 45, 90, 3600, 5400, 21600, 90061)] == [
        "0.2s",
        "5s",
        "45s",
        "1m30s",
        "1h",
        "1h30m",
        "6h",
        "1d1h",
    ]
    assert not math.isnan(parse_duration("1d"))


# ---- the fold --------------------------------------------------------------------------------


class _Log:
    """Builds records of one turn with chosen timestamps."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.inv = 0

    def add(
        self, ts: int, content: Note | Text | Error, *, model: bool = False, usage: int = 0
    ) -> None:
        actions = None
        if usage:
            actions = Actions(
                token_usage=TokenUsage(model="m", input_tokens=usage, output_tokens=0)
            )
        self.inv += 1
        ev = make(
            session="s",
            turn="t",
            run="r",
            role="model" if model else "system",
            author="agent",
            ts=ts,
            content=content if isinstance(content, Text | Error) else SystemNote(note=content),
            actions=actions,
            invocation=f"inv{self.inv}",
        )
        self.records.append(Record(seq=len(self.records) + 1, hash="h", event=ev))


def test_the_wait_is_folded_from_the_attempt_events() -> None:
    log = _Log()
    log.add(1_000, TurnStarted(model="openai:a", fallback_models=["anthropic:b"], retry_for_s=60))
    log.add(1_000, RunStarted(cause="new"))
    log.add(1_100, ModelRequestNote(model="openai:a", request_digest="d", estimated_tokens=1))
    log.add(
        1_200,
        Error(
            error_class="server_error",
            message="503 down",
            retryable=True,
            status=503,
            retry_in_ms=4_000,
        ),
    )
    w = fold_longrun(log.records).waiting()
    assert w is not None
    assert (w.attempt, w.next_at_ms, w.since_ms, w.in_flight) == (1, 5_200, 1_200, False)
    assert waiting_json(w, 2_200)["next_in_s"] == 3.0
    assert waiting_line(w, 2_200).startswith(
        "waiting for the provider: attempt 2, next in 3s, since "
    )

    log.add(
        5_200, ModelRequestNote(model="openai:a", request_digest="d", estimated_tokens=1, attempt=2)
    )
    w = fold_longrun(log.records).waiting()
    assert w is not None
    assert w.in_flight
    assert w.attempt == 1
    log.add(5_300, Error(error_class="server_error", message="503", retryable=True, retry_in_ms=0))
    log.add(
        5_300, ModelSwitch(from_model="openai:a", to_model="anthropic:b", failures=3, reason="x")
    )
    f = fold_longrun(log.records)
    assert f.model == "anthropic:b"
    assert f.streak == 2
    assert f.since_ms == 1_200
    log.add(6_000, Text(text="ok"), model=True, usage=10)
    f = fold_longrun(log.records)
    assert f.waiting() is None
    assert f.streak == 0
    assert f.tokens == 10
    assert f.steps == 1


def test_running_time_counts_runs_not_the_gaps_between_them() -> None:
    log = _Log()
    log.add(0, TurnStarted(model="m", time_limit_s=100))
    log.add(0, RunStarted(cause="new"))
    log.add(30_000, Text(text="a"), model=True, usage=5)
    # The process died here; recovery starts a new run an hour later.
    log.add(3_630_000, RunStarted(cause="recovery"))
    f = fold_longrun(log.records)
    assert f.running_ms(3_640_000) == 40_000
    assert f.limit_hit(3_640_000) is None
    hit = f.limit_hit(3_700_000)
    assert hit is not None
    assert hit.cause == "max_time"
    log.add(3_700_000, TurnEnded(reason="stopped", cause="max_time"))
    # A resume starts a fresh allowance under the limits it records.
    log.add(9_000_000, TurnStarted(model="m", time_limit_s=100, max_steps=1))
    f = fold_longrun(log.records)
    assert (f.end_cause, f.run_ms, f.steps) == (None, 0, 0)
    assert f.limit_hit(9_000_000) is None


def test_limits_name_what_was_reached() -> None:
    f = LongRunFold(open=True, max_steps=3, steps=3)
    hit = f.limit_hit(0)
    assert hit is not None
    assert (hit.cause, hit.steps) == ("max_steps", 3)
    f = LongRunFold(open=True, token_limit=1000, tokens=1200)
    hit = f.limit_hit(0)
    assert hit is not None
    assert hit.cause == "max_tokens"
    assert "1,000" in hit.message
    assert LongRunFold(open=True).limit_hit(10**12) is None, "no limit by default"
