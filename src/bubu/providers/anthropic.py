"""`anthropic:MODEL` — the Messages API with tools, streaming and extended thinking.

Thinking blocks come back with their signatures (and redacted blocks with their opaque data) and
are replayed byte for byte in the next request, as the API requires during tool use. The stable
prefix (tools, system) and the newest user turns carry `cache_control` breakpoints so long
sessions are billed mostly as cache reads. At Anthropic's own API the file and command tools
are offered as Claude's text editor and bash (`bubu.providers.native`). A call is sent
as the official SDK sends it, over `httpx2` (`_wire`), and never retried: the engine does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, assert_never, cast

import httpx2
import msgspec

from bubu import images
from bubu.errors import ConfigError, ProviderError
from bubu.providers import _endpoint, _retry, _wire, windows
from bubu.providers import native as shapes
from bubu.providers.base import (
    AssistantMessage,
    AssistantPart,
    Delta,
    DeltaSink,
    ImagePart,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultsMessage,
    ToolSpec,
    Usage,
    UserMessage,
    parse_arguments,
)

if TYPE_CHECKING:  # the SDK's types only: a run speaks the wire itself (_wire)
    from anthropic.types import (
        CacheControlEphemeralParam,
        ContentBlock,
        ContentBlockParam,
        ImageBlockParam,
        MessageParam,
        RawContentBlockDelta,
        RawMessageStreamEvent,
        TextBlockParam,
        ThinkingConfigParam,
        ToolParam,
        ToolResultBlockParam,
    )

    _ContentDelta: TypeAlias = RawContentBlockDelta

DEFAULT_CONTEXT_WINDOW = 200_000
# Every Claude model documented so far has a 200k window by default (1M needs a beta header);
# that is Anthropic's word, so it holds only at Anthropic's own API.
CONTEXT_WINDOWS: tuple[tuple[str, int], ...] = (("claude-", 200_000),)
MIN_THINKING_BUDGET = 1024
ANTHROPIC_URL = "https://api.anthropic.com"
"""The official API (what the SDK calls when no base URL is given)."""
DEFAULT_MAX_OUTPUT = 8192
"""The answer's room when no `--max-output-tokens` is given; a thinking budget comes on top."""
CACHE_TTLS = ("5m", "1h")
"""The cache lifetimes the Messages API offers (5m is its default)."""
_EPHEMERAL: CacheControlEphemeralParam = {"type": "ephemeral"}
# Breakpoints on the newest user turns: the last one is written, the one before is read back
# even when a step added more blocks than the API's cache lookback reaches.
_ROLLING_BREAKPOINTS = 2
# Models that accept only adaptive thinking though their id carries no version number.
_ADAPTIVE_ONLY = frozenset({"claude-mythos-preview"})
# Error events inside a 200 stream name a type, not a status; map them to the status the same
# failure has outside a stream.
_STATUS_OF_ERROR_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

UserBlock: TypeAlias = "TextBlockParam | ToolResultBlockParam | ImageBlockParam"


def context_window_for(model: str) -> int:
    """The window of a Claude model as the `genai-prices` table states it, else the longest
    matching name prefix of `CONTEXT_WINDOWS`."""
    return window_for(model).tokens


def window_for(model: str) -> windows.Window:
    """`context_window_for` with where the figure came from (at Anthropic's own API)."""
    found = windows.hosted_window("anthropic", model)
    if found is not None:
        return found
    matches = [(len(p), size) for p, size in CONTEXT_WINDOWS if model.startswith(p)]
    if matches:
        return windows.Window(max(matches)[1], "default: every Claude model has 200k")
    return windows.Window(windows.UNKNOWN_WINDOW, windows.UNKNOWN)


def thinking_config(model: str, budget: int) -> ThinkingConfigParam:
    """Adaptive thinking from Claude 4.6 on (later models refuse budgets), a budget before."""
    if model in _ADAPTIVE_ONLY:
        return {"type": "adaptive"}
    version = _claude_version(model)
    if version is not None and version >= (4, 6):
        return {"type": "adaptive"}
    return {"type": "enabled", "budget_tokens": budget}


def takes_native_tools(model: str) -> bool:
    """Whether `model` knows the text editor and bash versions Bubu offers (Claude 4 on; a
    model whose id names no version is taken to be a new one)."""
    version = _claude_version(model)
    return version is None or version >= (4, 0)


def _claude_version(model: str) -> tuple[int, int] | None:
    # Ids put the version after the family (claude-sonnet-4-5-20250929, claude-opus-5) or
    # before it (claude-3-7-sonnet-20250219); an 8-digit date is not a version.
    numbers = [int(t) for t in re.split(r"[-.]", model) if t.isdigit() and len(t) <= 2]
    if not model.startswith("claude") or not numbers:
        return None
    return (numbers[0], numbers[1] if len(numbers) > 1 else 0)


# ---- request: ModelRequest -> wire ------------------------------------------------------------


def check_cache_ttl(value: str | None) -> str | None:
    """A cache lifetime, refused in one line unless the API offers it."""
    if value is not None and value not in CACHE_TTLS:
        raise ConfigError(
            f"--cache-ttl takes {' or '.join(CACHE_TTLS)} (how long Anthropic keeps the prompt "
            f"cache), got {value!r}"
        )
    return value


def cache_control(ttl: str | None = None) -> CacheControlEphemeralParam:
    """A cache breakpoint, kept for `ttl` ("1h"; None or "5m": the API's default 5 minutes)."""
    if ttl == "1h":
        return {"type": "ephemeral", "ttl": "1h"}
    return dict(_EPHEMERAL)  # type: ignore[return-value]  # the same TypedDict, copied


def to_system(system: str, ttl: str | None = None) -> list[TextBlockParam]:
    """The system prompt as one text block closing the cached prefix (tools, then system)."""
    if not system:
        return []
    return [{"type": "text", "text": system, "cache_control": cache_control(ttl)}]


def to_tools(
    tools: tuple[ToolSpec, ...],
    *,
    cache_last: bool,
    ttl: str | None = None,
    native_tools: bool = False,
) -> list[ToolParam]:
    """Tool specs as Messages API tools; `cache_last` marks the end of the prefix when there is
    no system prompt to carry the breakpoint. With `native_tools`, the file and command tools
    are offered as Anthropic's text editor and bash (`bubu.providers.native`)."""
    offered: list[ToolParam] = []
    if native_tools:
        found, tools = shapes.anthropic_tools(tools)
        offered = cast("list[ToolParam]", found)  # the client tool types, as documented
    generic: list[ToolParam] = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
    ]
    out = [*offered, *generic]
    if cache_last and out:
        out[-1]["cache_control"] = cache_control(ttl)
    return out


def to_messages(request: ModelRequest, ttl: str | None = None) -> list[MessageParam]:
    """The Messages API history: alternating turns, tool results grouped in one user message."""
    turns: list[_UserTurn | _AssistantTurn] = []
    for message in request.messages:
        match message:
            case UserMessage(text=text, images=images):
                blocks = _user_turn(turns)
                blocks.extend(_image_block(image) for image in images)
                if text:  # the API refuses empty text blocks
                    blocks.append({"type": "text", "text": text})
            case ToolResultsMessage(results=results):
                blocks = _user_turn(turns)
                for result in results:
                    block: ToolResultBlockParam = {
                        "type": "tool_result",
                        "tool_use_id": result.call_id,
                        "content": result.content,
                    }
                    if result.images:
                        block["content"] = [
                            {"type": "text", "text": result.content},
                            *(_image_block(image) for image in result.images),
                        ]
                    if result.is_error:
                        block["is_error"] = True
                    blocks.append(block)
            case AssistantMessage(parts=parts):
                content = _assistant_blocks(parts)
                if content:
                    turns.append(_AssistantTurn(content))
            case _:
                assert_never(message)
    user_turns = [t for t in turns if isinstance(t, _UserTurn)]
    for user_turn in user_turns[-_ROLLING_BREAKPOINTS:]:
        user_turn.blocks[-1]["cache_control"] = cache_control(ttl)
    out: list[MessageParam] = []
    for turn in turns:
        if isinstance(turn, _UserTurn):
            out.append({"role": "user", "content": turn.blocks})
        else:
            out.append({"role": "assistant", "content": turn.blocks})
    return out


def _image_block(image: ImagePart) -> ImageBlockParam:
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": image.media_type,  # type: ignore[typeddict-item]  # sniffed: one of four
            "data": images.base64_text(image.data),
        },
    }


@dataclass(slots=True)
class _UserTurn:
    blocks: list[UserBlock] = field(default_factory=list)


@dataclass(slots=True)
class _AssistantTurn:
    blocks: list[ContentBlockParam]


def _user_turn(turns: list[_UserTurn | _AssistantTurn]) -> list[UserBlock]:
    # Consecutive user-lane messages (tool results, then a host note) share one user turn.
    if not turns or not isinstance(turns[-1], _UserTurn):
        turns.append(_UserTurn())
    last = turns[-1]
    assert isinstance(last, _UserTurn)
    return last.blocks


def _assistant_blocks(parts: tuple[AssistantPart, ...]) -> list[ContentBlockParam]:
    # Kept in the order the model produced them, which puts thinking first, and with thinking
    # text and signatures exactly as received: the API verifies them.
    blocks: list[ContentBlockParam] = []
    for part in parts:
        match part:
            case ThinkingPart(redacted=str(data)):
                blocks.append({"type": "redacted_thinking", "data": data})
            case ThinkingPart(signature=str(signature)):
                blocks.append({"type": "thinking", "thinking": part.text, "signature": signature})
            case ThinkingPart():
                pass  # unsigned thinking (another provider's) cannot be verified, so is not sent
            case TextPart(native={"anthropic": dict() as block}):
                blocks.append(block)  # type: ignore[arg-type]  # a server tool's, as received
            case TextPart(text=text):
                if text:
                    blocks.append({"type": "text", "text": text})
            case ToolCallPart() if (replayed := shapes.anthropic_call(part)) is not None:
                blocks.append(replayed)  # type: ignore[arg-type]  # the model's own block
            case ToolCallPart():
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": part.call_id,
                        "name": part.name,
                        "input": part.arguments,
                    }
                )
            case _:
                assert_never(part)
    return blocks


# ---- response: stream events -> ModelResponse --------------------------------------------------


class _Block:
    __slots__ = ("call_id", "chunks", "data", "input", "kind", "name", "native", "signature")

    def __init__(
        self, kind: Literal["text", "thinking", "redacted", "tool_use", "server", "other"]
    ) -> None:
        self.kind = kind
        self.native: dict[str, object] = {}
        self.chunks: list[str] = []
        self.signature = ""
        self.data = ""
        self.call_id = ""
        self.name = ""
        self.input: dict[str, object] = {}


class EventAssembler:
    """Folds Messages API stream events into one `ModelResponse` (no I/O)."""

    def __init__(self, *, native_tools: bool = False) -> None:
        self._native = native_tools
        self._blocks: dict[int, _Block] = {}
        self._model = ""
        self._stop: str | None = None
        self._input = self._output = self._cache_read = self._cache_write = 0
        self._cache_write_1h = 0
        self._stopped = False

    def feed(self, event: RawMessageStreamEvent, on_delta: DeltaSink) -> None:
        """Take one stream event, sending text and thinking fragments to `on_delta`."""
        match event.type:
            case "message_start":
                message = event.message
                self._model = message.model
                start = message.usage
                self._input = start.input_tokens
                self._output = start.output_tokens
                self._cache_read = start.cache_read_input_tokens or 0
                self._cache_write = start.cache_creation_input_tokens or 0
                created = getattr(start, "cache_creation", None)
                self._cache_write_1h = getattr(created, "ephemeral_1h_input_tokens", None) or 0
            case "content_block_start":
                self._blocks[event.index] = _start_block(event.content_block, on_delta)
            case "content_block_delta":
                self._take_delta(event.index, event.delta, on_delta)
            case "content_block_stop":
                pass
            case "message_delta":
                self._stop = event.delta.stop_reason or self._stop
                # message_delta counts are cumulative; the input side is only sometimes present.
                usage = event.usage
                self._output = usage.output_tokens
                if usage.input_tokens is not None:
                    self._input = usage.input_tokens
                if usage.cache_read_input_tokens is not None:
                    self._cache_read = usage.cache_read_input_tokens
                if usage.cache_creation_input_tokens is not None:
                    self._cache_write = usage.cache_creation_input_tokens
            case "message_stop":
                self._stopped = True
        # Event and delta kinds added to the API later are ignored: the wire is additive.

    def _take_delta(self, index: int, delta: _ContentDelta, on_delta: DeltaSink) -> None:
        block = self._blocks.get(index)
        if block is None:
            block = self._blocks[index] = _Block("other")
        match delta.type:
            case "text_delta":
                block.chunks.append(delta.text)
                on_delta(Delta(kind="text", text=delta.text))
            case "thinking_delta":
                block.chunks.append(delta.thinking)
                on_delta(Delta(kind="thinking", text=delta.thinking))
            case "signature_delta":
                block.signature += delta.signature
            case "input_json_delta":
                block.chunks.append(delta.partial_json)
            case "citations_delta":
                pass

    @property
    def complete(self) -> bool:
        """Whether the message ended (message_stop, or at least a stop reason) in the stream."""
        return self._stopped or self._stop is not None

    def result(self) -> ModelResponse:
        """The assembled response, content blocks in index order."""
        parts: list[AssistantPart] = []
        for _, block in sorted(self._blocks.items()):
            part = _finish_block(block, self._native)
            if part is not None:
                parts.append(part)
        # Anthropic counts cache reads and writes apart from input_tokens; Usage.input_tokens is
        # the whole prompt, as OpenAI reports it, so budgets and calibration compare like with like.
        usage = Usage(
            input_tokens=self._input + self._cache_read + self._cache_write,
            output_tokens=self._output,
            cache_read_tokens=self._cache_read,
            cache_write_tokens=self._cache_write,
            cache_write_1h_tokens=min(self._cache_write_1h, self._cache_write),
        )
        return ModelResponse(
            parts=tuple(parts), usage=usage, stop_reason=self._stop, model=self._model
        )


def _start_block(content: ContentBlock, on_delta: DeltaSink) -> _Block:
    match content.type:
        case "text":
            block = _Block("text")
            if content.text:
                block.chunks.append(content.text)
                on_delta(Delta(kind="text", text=content.text))
        case "thinking":
            block = _Block("thinking")
            block.chunks.append(content.thinking)
            # The documented start event carries no signature; it arrives as a signature_delta.
            block.signature = getattr(content, "signature", None) or ""
        case "redacted_thinking":
            block = _Block("redacted")
            block.data = content.data
        case "tool_use":
            block = _Block("tool_use")
            block.call_id, block.name = content.id, content.name
            block.input = dict(getattr(content, "input", None) or {})
        case "server_tool_use" | "web_search_tool_result":
            # The server's web search (`web_search = true`): kept whole, to be replayed.
            block = _Block("server")
            block.native = content.to_dict(mode="json")
        case _:
            block = _Block("other")
    return block


def _finish_block(block: _Block, native_tools: bool = False) -> AssistantPart | None:
    text = "".join(block.chunks)
    match block.kind:
        case "text":
            return TextPart(text=text) if text else None
        case "thinking":
            return ThinkingPart(text=text, signature=block.signature or None)
        case "redacted":
            return ThinkingPart(text="", redacted=block.data)
        case "tool_use":
            call = _tool_call(block, text)
            return _native_call(call) if native_tools else call
        case "server":
            native = dict(block.native)
            if native.get("type") == "server_tool_use" and text.strip():
                native["input"] = parse_arguments(text) or native.get("input") or {}
            return TextPart(text=server_text(native), native={"anthropic": native})
        case "other":
            return None
        case _:
            assert_never(block.kind)


WEB_SEARCH_TOOL = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
"""Anthropic's server-side web search, offered when `web_search` is on."""


def server_text(block: dict[str, object]) -> str:
    """A server tool block in words, for the transcript and for any other provider."""
    if block.get("type") == "server_tool_use":
        given = block.get("input")
        query = given.get("query") if isinstance(given, dict) else None
        return f"[searched the web for {query!r}]" if query else "[used a server tool]"
    content = block.get("content")
    if isinstance(content, dict):  # web_search_tool_result_error
        return f"[the web search failed: {content.get('error_code', 'unknown error')}]"
    found = [r for r in content if isinstance(r, dict)] if isinstance(content, list) else []
    lines = [f"- {r.get('title') or r.get('url')} <{r.get('url')}>" for r in found[:10]]
    return "[web search results]\n" + "\n".join(lines) if lines else "[no web search results]"


MAX_PAUSES = 5
"""Times one call is continued after the server paused it (`pause_turn`)."""


def _joined(first: ModelResponse, then: ModelResponse) -> ModelResponse:
    """A paused response and its continuation as one: the parts in order, the usage summed."""
    a, b = first.usage, then.usage
    usage = Usage(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cache_read_tokens=a.cache_read_tokens + b.cache_read_tokens,
        cache_write_tokens=a.cache_write_tokens + b.cache_write_tokens,
        cache_write_1h_tokens=a.cache_write_1h_tokens + b.cache_write_1h_tokens,
    )
    return msgspec.structs.replace(then, parts=(*first.parts, *then.parts), usage=usage)


def _tool_call(block: _Block, raw: str) -> ToolCallPart:
    if not raw.strip():
        return ToolCallPart(call_id=block.call_id, name=block.name, arguments=dict(block.input))
    parsed = parse_arguments(raw)
    if parsed is not None:
        return ToolCallPart(call_id=block.call_id, name=block.name, arguments=parsed)
    return ToolCallPart(call_id=block.call_id, name=block.name, arguments={}, raw_arguments=raw)


def _native_call(call: ToolCallPart) -> ToolCallPart:
    """A call of the text editor or bash as the call of the Bubu tool that does it, the model's
    own block kept to be replayed."""
    if call.raw_arguments is not None:
        return call
    mapped = shapes.from_anthropic(call.name, call.arguments)
    if mapped is None:
        return call
    block = {"type": "tool_use", "id": call.call_id, "name": call.name, "input": call.arguments}
    return ToolCallPart(call_id=call.call_id, name=mapped[0], arguments=mapped[1], native=block)


# ---- the provider ------------------------------------------------------------------------------


class AnthropicProvider(_endpoint.AtEndpoint):
    """A Claude model through the Messages API."""

    web_search: bool = False
    """Offer the model Anthropic's server-side web search (`web_search = true`)."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: httpx2.Client | None = None,
        context_window: int | None = None,
        stall_timeout: float | None = None,
        thinking_budget: int | None = None,
        max_output_tokens: int | None = None,
        cache_ttl: str | None = None,
        native_tools: bool | None = None,
    ) -> None:
        endpoint = _endpoint.endpoint(
            base_url,
            api_key,
            base_env="ANTHROPIC_BASE_URL",
            host="api.anthropic.com",
            key_env="ANTHROPIC_API_KEY",
            vendor_name="Anthropic",
            missing="ANTHROPIC_API_KEY is not set; export your Anthropic API key and run again",
        )
        if thinking_budget is not None and thinking_budget < MIN_THINKING_BUDGET:
            raise ConfigError(
                f"the thinking budget must be at least {MIN_THINKING_BUDGET} tokens "
                f"(got {thinking_budget}); raise it or leave thinking off"
            )
        if (
            thinking_budget is not None
            and max_output_tokens is not None
            and max_output_tokens <= thinking_budget
        ):
            raise ConfigError(
                f"--max-output-tokens ({max_output_tokens}) must be above the thinking budget "
                f"({thinking_budget}): thinking counts against it, and the answer needs room too"
            )
        self._cache_ttl = check_cache_ttl(cache_ttl)
        self._max_output = max_output_tokens
        self._model = model
        self._base_url = endpoint.base or ANTHROPIC_URL
        self._official = endpoint.official
        self._native = (
            native_tools
            if native_tools is not None
            else endpoint.official and takes_native_tools(model)
        )
        """Whether the text editor and bash are offered in Anthropic's own shape (by default
        only at Anthropic's API: another server may not know the tool types)."""
        self._thinking_budget = thinking_budget
        self._window_given = (
            windows.Window(context_window, windows.USER) if context_window else None
        )
        self._found: windows.Window | None = None
        stall = _retry.stall_timeout(stall_timeout, client_given=http_client is not None)
        self._vendor = endpoint.vendor(stall)
        self._client = _wire.Wire(
            http_client or httpx2.Client(follow_redirects=True),
            self._base_url,
            wire_headers(endpoint.key),
            timeout=None if stall is None else _retry.sdk_timeout(stall),
        )
        self._owned = None if http_client is not None else self._client

    @property
    def accepts_images(self) -> bool:
        """Claude models are shown images."""
        return True

    @property
    def spec(self) -> str:
        """The model spec, e.g. ``anthropic:claude-sonnet-5-5``."""
        return f"anthropic:{self._model}"

    @property
    def context_window(self) -> int:
        """The model's context window in tokens."""
        return self._window.tokens

    @property
    def context_window_source(self) -> str:
        """Where `context_window` came from (``--context-window``, ``genai-prices table`` …)."""
        return self._window.source

    @property
    def _window(self) -> windows.Window:
        """The user's window, else (found once, on first use) the official API's table figure or
        Claude's documented 200k, or what another server states, else the unknown default."""
        if self._window_given is not None:
            return self._window_given
        if self._found is None:
            self._found = (
                window_for(self._model)
                if self._official
                else windows.find_window(
                    base_url=self._base_url, model=self._model, official=False, vendor="anthropic"
                )
            )
        return self._found

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Stream one Messages API call; raise ProviderError on any failure. A turn the server
        paused in the middle of its web searches (`pause_turn`) is sent back as it is and
        continued, so the engine gets the whole response at once."""
        response = self._call(request, on_delta)
        for _ in range(MAX_PAUSES):
            if response.stop_reason != "pause_turn":
                break
            paused = AssistantMessage(parts=response.parts)
            more = msgspec.structs.replace(request, messages=(*request.messages, paused))
            response = _joined(response, self._call(more, on_delta))
        return response

    def _call(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        assembler = EventAssembler(native_tools=self._native)
        return _retry.stream_call(
            self._vendor,
            open_stream=lambda: self._open(request),
            feed=lambda event: assembler.feed(event, on_delta),
            assembler=assembler,
            errors=(_wire.APIError, httpx2.HTTPError, json.JSONDecodeError),
            convert=lambda exc, streaming: self._convert(exc, streaming=streaming),
        )

    def max_tokens(self, request: ModelRequest) -> int:
        """The `max_tokens` sent: the request's or `--max-output-tokens` as given, else the
        default answer room with the thinking budget on top (thinking counts against it)."""
        if request.max_tokens is not None:
            return request.max_tokens + (self._thinking_budget or 0)
        if self._max_output is not None:
            return self._max_output
        return DEFAULT_MAX_OUTPUT + (self._thinking_budget or 0)

    def _open(self, request: ModelRequest) -> _retry.Stream[RawMessageStreamEvent]:
        ttl = self._cache_ttl
        system = to_system(request.system, ttl)
        tools: list[Any] = list(
            to_tools(request.tools, cache_last=not system, ttl=ttl, native_tools=self._native)
        )
        if self.web_search:
            tools.append(dict(WEB_SEARCH_TOOL))
        budget = self._thinking_budget
        body: dict[str, object] = {"model": self._model, "max_tokens": self.max_tokens(request)}
        if system:
            body["system"] = system
        if tools:
            body["tools"] = tools
        body["messages"] = to_messages(request, ttl)
        if budget is not None:
            body["thinking"] = thinking_config(self._model, budget)
        body["stream"] = True
        return stream_events(self._client, body)

    def _convert(self, exc: Exception, *, streaming: bool) -> ProviderError:
        vendor = self._vendor
        match exc:
            case _wire.APIStatusError():
                error_type = _error_field(exc.body, "type")
                status = exc.status_code
                if status < 400:  # an error event inside a 200 stream
                    status = _STATUS_OF_ERROR_TYPE.get(error_type or "", 500)
                error = _retry.status_error(
                    vendor,
                    status,
                    body=exc.body,
                    headers=exc.response.headers,
                    api_message=_error_field(exc.body, "message"),
                    api_code=error_type,
                )
                return _retry.probe_server(error, self._models_status)
            case _wire.APITimeoutError() | httpx2.TimeoutException():
                return _retry.timeout_error(vendor, exc)
            case _wire.APIConnectionError() | httpx2.TransportError():
                return _retry.connection_error(vendor, _retry.cause(exc), during_stream=streaming)
            case _:
                return _retry.bad_response_error(vendor, f"{type(exc).__name__}: {exc}")

    def _models_status(self) -> int:
        """The HTTP status of `GET /v1/models` at the server (is it up?), quickly."""
        return self._client.status_of("/v1/models", timeout=_retry.PROBE_S)


def _error_field(body: object, key: str) -> str | None:
    # Anthropic error bodies are {"type": "error", "error": {"type": …, "message": …}}.
    error = body.get("error") if isinstance(body, dict) else None
    value = error.get(key) if isinstance(error, dict) else None
    return str(value) if value is not None else None


# ---- the wire: the Messages API's documented request and event stream, over httpx2 ------------

API_VERSION = "2026-10-21"
"""The `anthropic-version` header, the one the official SDK sends (a test holds them equal)."""


def wire_headers(key: str | None) -> dict[str, str]:
    """The headers of every call, as the official SDK sends them (it never retries)."""
    headers = {
        "accept": "application/json",
        "anthropic-version": API_VERSION,
        "x-stainless-retry-count": "0",
    }
    if key:
        headers["authorization"] = f"Bearer {key}"
    return headers


def stream_events(client: _wire.Wire, body: object) -> _retry.Stream[RawMessageStreamEvent]:
    """POST a Messages request now and return its stream of events, read as the SDK reads them:
    `ping` and unnamed events skipped, an `error` event raised as a status error of the
    response."""
    return _Events(client.stream("/v1/messages", body))


class _Events:
    __slots__ = ("_opened",)

    def __init__(self, opened: _wire.Opened) -> None:
        self._opened = opened

    def __enter__(self) -> Iterator[RawMessageStreamEvent]:
        response, events = self._opened.__enter__()
        return _typed(response, events)

    def __exit__(self, *_: object) -> None:
        self._opened.__exit__()


def _typed(
    response: httpx2.Response, events: Iterator[_wire.Event]
) -> Iterator[RawMessageStreamEvent]:
    for sse in events:
        if sse.event in ("ping", None):
            continue
        if sse.event == "error":
            body: object = sse.data
            try:
                body = json.loads(sse.data)
                message = f"{body}"
            except ValueError:
                message = sse.data or f"Error code: {response.status_code}"
            raise _wire.APIStatusError(message, response=response, body=body)
        if sse.data:
            yield cast("RawMessageStreamEvent", _wire.data(sse))
