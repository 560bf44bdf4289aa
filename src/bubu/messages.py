"""The provider-neutral conversation: what a model is asked and what it answers.

These types are pure data shared by projections (which build requests from the log), the engine
and the provider adapters (which translate them to a wire format).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeAlias

import msgspec

JSON: TypeAlias = Any


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as offered to the model: its name, description and JSON schema of arguments."""

    name: str
    description: str
    parameters: dict[str, JSON]


# ---- message parts ----------------------------------------------------------------------------


class TextPart(msgspec.Struct, frozen=True, kw_only=True):
    """Text from the user or the model."""

    text: str
    native: JSON | None = None
    """A provider's own content (a server-side tool's call or result: ``{"anthropic": block}``,
    ``{"openai_responses": item}``), replayed to that provider verbatim; `text` says what it
    was for any other."""
    kind: Literal["text"] = "text"


class ThinkingPart(msgspec.Struct, frozen=True, kw_only=True):
    """Model reasoning; `signature` / `redacted` are replayed to the provider byte for byte."""

    text: str
    signature: str | None = None
    redacted: str | None = None
    native: JSON | None = None
    """The provider's own reasoning item (an OpenAI Responses `reasoning` item, encrypted content
    included), replayed to that provider verbatim."""
    kind: Literal["thinking"] = "thinking"


class ImagePart(msgspec.Struct, frozen=True, kw_only=True):
    """An image shown to the model: its media type (image/png …) and bytes."""

    media_type: str
    data: bytes
    kind: Literal["image"] = "image"
    sha256: str = ""
    """The blob holding `data` (the log's fold names the image by it; the bytes come later)."""


class ToolCallPart(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call made by the model. `raw_arguments` keeps arguments that were not valid JSON."""

    call_id: str
    name: str
    arguments: dict[str, JSON]
    raw_arguments: str | None = None
    native: JSON | None = None
    """The provider's own call item (an OpenAI Responses `function_call` item), replayed
    verbatim."""
    kind: Literal["tool_call"] = "tool_call"


class ToolResultPart(msgspec.Struct, frozen=True, kw_only=True):
    """The result of a tool call, paired by `call_id`."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    images: tuple[ImagePart, ...] = ()
    kind: Literal["tool_result"] = "tool_result"


AssistantPart: TypeAlias = TextPart | ThinkingPart | ToolCallPart


class UserMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message in the user lane (the task, follow-ups, host notes for the model)."""

    text: str
    images: tuple[ImagePart, ...] = ()
    role: Literal["user"] = "user"


class AssistantMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One model step: its text, thinking and tool calls, in the order the model produced them."""

    parts: tuple[AssistantPart, ...]
    role: Literal["assistant"] = "assistant"


class ToolResultsMessage(msgspec.Struct, frozen=True, kw_only=True):
    """The results of the tool calls of the preceding assistant message, in call order."""

    results: tuple[ToolResultPart, ...]
    role: Literal["tool"] = "tool"


Message: TypeAlias = UserMessage | AssistantMessage | ToolResultsMessage


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a provider needs for one call.

    `ordinal` is the number of model responses already committed in the session; deterministic
    providers (the scripted one) use it to pick their answer, others ignore it.
    `purpose` is "summary" for compaction requests. `max_tokens` caps the tokens the call may
    produce, reasoning included; None leaves it to the provider (its `--max-output-tokens`, else
    its default, which leaves reasoning models room to think).
    """

    system: str
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    max_tokens: int | None = None
    ordinal: int = 0
    purpose: Literal["turn", "summary"] = "turn"
    session_id: str = ""
    """The session the call belongs to: a prompt-cache key for providers that take one."""


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token accounting as the provider reports it.

    `input_tokens` is the whole prompt, cache reads and writes included (adapters normalize
    providers that count them apart); the cache fields say how much of it hit or filled the cache.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reported: bool = True
    """False when the server sent no usage: the counts are unknown, not 0."""
    reasoning_tokens: int = 0
    """How many of `output_tokens` were reasoning (where the provider says)."""
    cache_write_1h_tokens: int = 0
    """How many of `cache_write_tokens` were written to a one-hour cache (priced higher)."""


class ModelResponse(msgspec.Struct, frozen=True, kw_only=True):
    """A complete model response.

    `stop_reason` is normalized: "end_turn", "tool_use", "max_tokens", or the provider's own word.
    """

    parts: tuple[AssistantPart, ...]
    usage: Usage = msgspec.field(default_factory=Usage)
    stop_reason: str | None = None
    model: str = ""
    notice: str | None = None
    """One line the log should carry about how the server was asked (e.g. it cannot call tools)."""


class Delta(msgspec.Struct, frozen=True, kw_only=True):
    """A streamed fragment of text or thinking, for the screen only (never logged)."""

    kind: Literal["text", "thinking"]
    text: str


DeltaSink: TypeAlias = Callable[[Delta], None]

_OPTIONAL = frozenset({"native", "images"})
_canonical_encoder = msgspec.json.Encoder(order="sorted")


def canonical(message: Message) -> bytes:
    """A message's canonical JSON (sorted keys), as digests and size estimates take it.

    Parts that carry no provider-native item and no images encode exactly as they did before
    those fields existed, so a history's digest and estimate do not change with them."""
    return _canonical_encoder.encode(_pruned(msgspec.to_builtins(message)))


def _pruned(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _pruned(v)
            for k, v in value.items()
            if not (k in _OPTIONAL and (v is None or (isinstance(v, list | tuple) and not v)))
        }
    if isinstance(value, list | tuple):
        return [_pruned(v) for v in value]
    return value
