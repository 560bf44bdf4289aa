"""The options of a long run (retry horizon, fallback models, limits) and how a wait is shown.

Every value is checked when the command line is read, before anything is written: a bad one is
one line (`bubu: error: …`) and exit status 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bubu.durations import parse_duration
from bubu.errors import ConfigError
from bubu.projections.longrun import DEFAULT_RETRY_FOR_S, LongRunFold, Waiting, format_duration

if TYPE_CHECKING:
    import click


def parse_count(text: str, *, option: str) -> int:
    """A whole number above zero, or a ConfigError naming `option`."""
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        raise ConfigError(f"{option} must be a whole number above zero, not {text!r}") from None
    if value <= 0:
        raise ConfigError(f"{option} must be a whole number above zero, not {text!r}")
    return value


def check_model_spec(spec: str, *, option: str = "--fallback-model") -> str:
    """`spec` if it has the provider:model shape, else a ConfigError."""
    name, sep, model = spec.strip().partition(":")
    if not sep or not name or not model:
        raise ConfigError(
            f"{option} must be provider:model (e.g. anthropic:claude-sonnet-5-5), not {spec!r}"
        )
    return spec.strip()


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    return (
        None if value is None else parse_duration(value, option=f"--{param.name}".replace("_", "-"))
    )


def _count(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    return None if value is None else parse_count(value, option=f"--{param.name}".replace("_", "-"))


def _specs(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(check_model_spec(v) for v in value))


def longrun_options() -> list[Any]:
    """The click options of a long run, in the order the help lists them."""
    import click  # `bubu status` prints a run's budget without the command line's framework

    return [
        click.option(
            "--retry-for",
            "retry_for",
            default=None,
            metavar="DURATION",
            callback=_duration,
            help="Wait out transient provider failures this long before giving up [default: 6h].",
        ),
        click.option(
            "--fallback-model",
            "fallback_model",
            multiple=True,
            metavar="PROVIDER:MODEL",
            callback=_specs,
            help="A model to switch to while the primary keeps failing (repeatable, in order).",
        ),
        click.option(
            "--max-steps",
            "max_steps",
            default=None,
            metavar="N",
            callback=_count,
            help="Stop the turn after N model calls [default: no limit].",
        ),
        click.option(
            "--max-tokens",
            "max_tokens",
            default=None,
            metavar="N",
            callback=_count,
            help="Stop the turn after N tokens (in + out) [default: no limit].",
        ),
        click.option(
            "--max-time",
            "max_time",
            default=None,
            metavar="DURATION",
            callback=_duration,
            help="Stop the turn after it has run this long [default: no limit].",
        ),
    ]


def waiting_json(w: Waiting, now_ms: int) -> dict[str, object]:
    """The `waiting` object of `bubu status --json`."""
    return {
        "attempt": w.attempt + 1,
        "failed_attempts": w.attempt,
        "next_at_ms": w.next_at_ms,
        "next_in_s": 0.0 if w.in_flight else round(max(0, w.next_at_ms - now_ms) / 1000, 1),
        "in_flight": w.in_flight,
        "since_ms": w.since_ms,
        "waited_s": round(max(0, now_ms - w.since_ms) / 1000, 1),
        "model": w.model,
        "error_class": w.error_class,
        "status": w.status,
        "error": w.message,
    }


def waiting_line(w: Waiting, now_ms: int) -> str:
    """ "waiting for the provider: attempt N, next in Xs, since T" (T as local time of day)."""
    import time

    since = time.strftime("%H:%M:%S", time.localtime(w.since_ms / 1000))
    left = max(0, w.next_at_ms - now_ms) / 1000
    what = f"{w.status}" if w.status is not None else w.error_class
    when = "in progress" if w.in_flight else f"next in {format_duration(left)}"
    return f"waiting for the provider: attempt {w.attempt + 1}, {when}, since {since} ({what})"


def budget_json(f: LongRunFold, now_ms: int) -> dict[str, object]:
    """The turn's limits and what it has used of them, for `bubu status --json`."""
    return {
        "steps": f.steps,
        "max_steps": f.max_steps,
        "tokens": f.tokens,
        "max_tokens": f.token_limit,
        "running_s": round(f.running_ms(now_ms) / 1000, 1),
        "max_time_s": f.time_limit_s,
        "retry_for_s": f.retry_for_s if f.retry_for_s is not None else DEFAULT_RETRY_FOR_S,
        "fallback_models": list(f.fallbacks),
        "model": f.model,
    }


__all__ = [
    "budget_json",
    "check_model_spec",
    "longrun_options",
    "parse_count",
    "parse_duration",
    "waiting_json",
    "waiting_line",
]
