"""The provider seam: one provider-neutral request in, one complete response out.

Providers translate `ModelRequest` into their wire format, stream text and thinking deltas to
`on_delta` while the response arrives, and return the complete `ModelResponse`, which the engine
appends in one transaction. Providers never retry on their own: they raise `ProviderError` with
`retryable` and `retry_after` set, and the engine records each failed attempt and backs off.
"""

from __future__ import annotations

import contextlib
import json
import math
from typing import Protocol

from bubu.messages import (
    JSON,
    AssistantMessage,
    AssistantPart,
    Delta,
    DeltaSink,
    ImagePart,
    Message,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolResultsMessage,
    ToolSpec,
    Usage,
    UserMessage,
)

__all__ = [
    "JSON",
    "AssistantMessage",
    "AssistantPart",
    "Delta",
    "DeltaSink",
    "ImagePart",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolResultPart",
    "ToolResultsMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "arguments_error",
    "close_provider",
    "parse_arguments",
]


class Provider(Protocol):
    """A model behind the one-method seam."""

    @property
    def spec(self) -> str:
        """The model spec, e.g. ``anthropic:claude-sonnet-5-5``."""
        ...

    @property
    def context_window(self) -> int:
        """The model's context window in tokens (best knowledge; overridable by the user)."""
        ...

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Run one model call, streaming deltas to `on_delta`; raise ProviderError on failure."""
        ...


def close_provider(provider: object) -> None:
    """Let go of what a provider holds open (its HTTP client's pooled connections) once its
    owner is done with it. A provider that keeps such a client has a `close()` method; the
    seam does not require one, so the rest are left as they are. Closing never fails the
    caller: the run it served has ended."""
    close = getattr(provider, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()


def parse_arguments(raw: str) -> dict[str, JSON] | None:
    """A tool call's argument text as a JSON object, or None when it is not one the log can hold:
    not JSON, not an object, a number JSON cannot carry (1e999, NaN) or nested beyond parsing."""
    try:
        parsed = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return None
    return parsed if isinstance(parsed, dict) else None


def arguments_error(raw: str) -> str:
    """What is wrong with argument text `parse_arguments` refused, and where, in a few words."""
    try:
        parsed = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as e:
        return f"are not valid JSON: {e.msg} (line {e.lineno}, column {e.colno}, char {e.pos})"
    except RecursionError:
        return "are nested too deeply to parse"
    except ValueError as e:
        return f"hold a number JSON cannot carry ({e})"
    if not isinstance(parsed, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(parsed), "a number"
        )
        return f"are {kind}, not a JSON object"
    return "could not be read"


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} does not fit a double")
    return value
