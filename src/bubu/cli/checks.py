"""Checks of numeric flags before anything runs: a value that cannot work is refused in one line
(exit 2) instead of creating a session that fails later or behaves oddly."""

from __future__ import annotations

import math
import os

import click

from bubu.errors import ConfigError
from bubu.windowfacts import MIN_CONTEXT_WINDOW

MIN_THINKING = 1024
"""The smallest extended-thinking budget a provider accepts (Anthropic's minimum)."""
MAX_SECONDS = 366 * 24 * 3600.0
"""The longest wait a flag may ask for (a year): beyond it timers overflow."""


def seconds(_ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A duration in seconds: a finite number above 0 (and at most a year)."""
    if value is None:
        return None
    if not math.isfinite(value) or value <= 0 or value > MAX_SECONDS:
        raise ConfigError(
            f"{_flag(param)} takes a number of seconds above 0 and at most a year "
            f"(e.g. {_flag(param)} 600), got {_shown(value)}"
        )
    return value


def context_window(_ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """A context window in tokens: at least MIN_CONTEXT_WINDOW."""
    if value is not None and value < MIN_CONTEXT_WINDOW:
        raise ConfigError(
            f"{_flag(param)} takes the model's window in tokens, at least "
            f"{MIN_CONTEXT_WINDOW:,} (e.g. {_flag(param)} 128000), got {value}"
        )
    return value


def thinking(_ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """An extended-thinking budget in tokens: at least MIN_THINKING."""
    if value is not None and value < MIN_THINKING:
        raise ConfigError(
            f"{_flag(param)} takes a thinking budget of at least {MIN_THINKING} tokens "
            f"(leave it out for no extended thinking), got {value}"
        )
    return value


def max_output_tokens(_ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """A cap on the tokens one model call may produce: a whole number above 0."""
    if value is None:
        return None
    try:
        tokens = int(value.strip().replace("_", ""))
    except ValueError:
        tokens = 0
    if tokens <= 0:
        raise ConfigError(
            f"{_flag(param)} takes a whole number of tokens above 0 (e.g. {_flag(param)} 32000), "
            f"got {value!r}"
        )
    return tokens


def one_of(*allowed: str, what: str) -> object:
    """A callback refusing any value but `allowed` in one line; `what` says what it sets."""

    def check(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is not None and value not in allowed:
            raise ConfigError(
                f"{_flag(param)} takes {_alternatives(allowed)} ({what}), got {value!r}"
            )
        return value

    return check


def _alternatives(allowed: tuple[str, ...]) -> str:
    return " or ".join([", ".join(allowed[:-1]), allowed[-1]] if len(allowed) > 2 else allowed)


def _flag(param: click.Parameter) -> str:
    return param.opts[0] if param.opts else f"--{param.name}"


def _shown(value: float) -> str:
    return repr(value) if math.isfinite(value) else str(value)


__all__ = [
    "MIN_CONTEXT_WINDOW",
    "MIN_THINKING",
    "context_window",
    "max_output_tokens",
    "one_of",
    "seconds",
    "thinking",
]


def absolute_paths(
    _ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    """Paths made absolute against the current directory (``~`` expanded), so a recorded turn
    and a recovery mean the same files; an empty one is refused."""
    out: list[str] = []
    for raw in value:
        if not raw.strip() or "\0" in raw:
            raise ConfigError(f"{_flag(param)} takes a path (e.g. {_flag(param)} ~/.npmrc)")
        out.append(os.path.abspath(os.path.expanduser(raw)))
    return tuple(dict.fromkeys(out))
