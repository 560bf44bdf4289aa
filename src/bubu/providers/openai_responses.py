"""`openai:MODEL` at OpenAI — the Responses API, streamed, with reasoning kept between calls.

Requests are stateless (`store=false`): each one carries the whole history as input items. The
reasoning items a model returns (their `encrypted_content` included) are recorded in the log in
their native form and replayed verbatim in later requests, as Anthropic thinking signatures are,
so a reasoning model keeps its chain of thought across tool calls; its `function_call` items are
replayed as received too. `prompt_cache_key` is the session id, so one session's calls share a
cache. At OpenAI the write and command tools are offered as its own `apply_patch` and `shell`
(`bubu.providers.native`). Calls go over `httpx2` as the SDK sends them, never retried: the engine
owns retries.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, assert_never, cast, get_args

import httpx2

from bubu import images
from bubu.errors import ConfigError, ProviderError
from bubu.ids import new_id
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
from bubu.providers.openai import (
    OPENAI_URL,
    DataStream,
    body_field,
    convert_error,
    models_status,
    openai_client,
    openai_endpoint,
    stream_data,
)

if TYPE_CHECKING:  # the SDK's types only: a run speaks the wire itself (_wire)
    from openai.types.responses import ResponseStreamEvent, ResponseUsage

Effort: TypeAlias = Literal["low", "medium", "high"]
EFFORTS: tuple[str, ...] = get_args(Effort)
"""The reasoning efforts `--reasoning-effort` takes."""
# Models that do not reason: they refuse the `reasoning` option, so it is only sent to others.
_NOT_REASONING = ("gpt-4", "gpt-3.5", "chatgpt-4o", "gpt-5-chat")
# `response.failed` and `error` events name a code, not a status: the status the same failure
# has outside a stream decides whether it is retried.
_STATUS_OF_CODE = {
    "server_error": 500,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "vector_store_timeout": 504,
    "context_length_exceeded": 400,
    "invalid_prompt": 400,
}

InputItem: TypeAlias = dict[str, Any]


def takes_native_tools(model: str) -> bool:
    """Whether `model` is documented to use the apply_patch and shell tools (GPT-5.1 on, and the
    Codex models)."""
    found = re.match(r"gpt-(\d+)(?:\.(\d+))?", model)
    if "codex" in model:
        return True
    return found is not None and (int(found[1]), int(found[2] or 0)) >= (5, 1)


def reasoning_model(model: str) -> bool:
    """Whether `model` reasons (gets `reasoning` and encrypted reasoning back); new models do."""
    return not model.startswith(_NOT_REASONING)


def output_cap(asked: int | None, configured: int | None, reasoning: bool) -> int | None:
    """The output cap to send, reasoning included (None: none, the model's whole output room).

    A request's own cap (a compaction summary's) is the room for its answer; a reasoning model
    spends output tokens on thinking first, so it gets the `--max-output-tokens` cap instead when
    that is larger, and no cap when none was set."""
    if asked is None:
        return configured
    if not reasoning:
        return asked
    return None if configured is None else max(asked, configured)


def check_effort(value: str | None) -> Effort | None:
    """A reasoning effort, refused in one line unless it is low, medium or high."""
    if value is None:
        return None
    if value not in EFFORTS:
        raise ConfigError(
            f"--reasoning-effort takes {', '.join(EFFORTS)} (leave it out for the model's "
            f"default), got {value!r}"
        )
    return cast(Effort, value)


# ---- request: ModelRequest -> input items -------------------------------------------------------


def to_input(request: ModelRequest) -> list[InputItem]:
    """The history as Responses input items, in order; recorded native items go back verbatim."""
    out: list[InputItem] = []
    calls = shapes.native_calls(request)
    for message in request.messages:
        match message:
            case UserMessage(text=text, images=()):
                out.append({"role": "user", "content": text})
            case UserMessage(text=text, images=shown):
                parts = [_image_input(image) for image in shown]
                if text:
                    parts.append({"type": "input_text", "text": text})
                out.append({"role": "user", "content": parts})
            case AssistantMessage(parts=parts):
                out.extend(_assistant_items(parts))
            case ToolResultsMessage(results=results):
                for result in results:
                    call = calls.get(result.call_id)
                    answer = None if call is None else shapes.responses_result(result, call)
                    if answer is not None:  # a native call is answered in its own shape
                        out.append(answer)
                        continue
                    content = f"ERROR: {result.content}" if result.is_error else result.content
                    output: str | list[InputItem] = content
                    if result.images:
                        output = [
                            {"type": "input_text", "text": content},
                            *(_image_input(image) for image in result.images),
                        ]
                    out.append(
                        {
                            "type": "function_call_output",
                            "call_id": result.call_id,
                            "output": output,
                        }
                    )
            case _:
                assert_never(message)
    return out


def _image_input(image: ImagePart) -> InputItem:
    return {"type": "input_image", "image_url": images.data_url(image.media_type, image.data)}


def _assistant_items(parts: tuple[AssistantPart, ...]) -> list[InputItem]:
    items: list[InputItem] = []
    for part in parts:
        match part:
            case ThinkingPart(native=dict() as native) if native.get("type") == "reasoning":
                items.append(dict(native))
            case ThinkingPart():
                pass  # reasoning without its encrypted item (another provider's) cannot go back
            case TextPart(native={"openai_responses": dict() as item}):
                items.append(dict(item))  # a built-in tool's item (web search), as received
            case TextPart(text=text):
                if text:
                    items.append({"role": "assistant", "content": text})
            case ToolCallPart():
                items.append(_call_item(part))
            case _:
                assert_never(part)
    return items


def _call_item(part: ToolCallPart) -> InputItem:
    replayed = shapes.responses_call(part)
    if replayed is not None:
        return replayed
    item = part.native
    if isinstance(item, dict) and item.get("type") == "function_call":
        item = dict(item)
        # The log may know the call by another id than the server gave (a reused one).
        item["call_id"] = part.call_id
        return item
    arguments = part.raw_arguments
    if arguments is None:
        arguments = json.dumps(part.arguments, ensure_ascii=False)
    return {
        "type": "function_call",
        "call_id": part.call_id,
        "name": part.name,
        "arguments": arguments,
    }


def to_tools(tools: tuple[ToolSpec, ...], *, native_tools: bool = False) -> list[InputItem]:
    """Tool specs as Responses function tools (not strict: Bubu's schemas have optional fields);
    with `native_tools`, the write and command tools as OpenAI's own apply_patch and shell."""
    offered: list[InputItem] = []
    if native_tools:
        offered, tools = shapes.responses_tools(tools)
    return [
        *offered,
        *(
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": False,
            }
            for tool in tools
        ),
    ]


# ---- response: stream events -> ModelResponse --------------------------------------------------


class _Item:
    __slots__ = ("arguments", "call_id", "kind", "name", "native", "summary", "text")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.text: list[str] = []
        self.summary: list[str] = []
        self.arguments: list[str] = []
        self.call_id = ""
        self.name = ""
        self.native: dict[str, object] | None = None


class EventAssembler:
    """Folds Responses stream events into one `ModelResponse` (no I/O).

    A `response.failed` or `error` event raises the `ProviderError` its code stands for.
    """

    def __init__(self, vendor: _retry.Vendor, *, native_tools: bool = False) -> None:
        self._vendor = vendor
        self._native = native_tools
        self._items: dict[int, _Item] = {}
        self._model = ""
        self._usage: ResponseUsage | None = None
        self._stop: str | None = None

    def feed(self, event: ResponseStreamEvent, on_delta: DeltaSink) -> None:
        """Take one stream event, sending text and reasoning summaries to `on_delta`."""
        match event.type:
            case "response.created" | "response.in_progress":
                self._model = event.response.model or self._model
            case "response.output_item.added":
                self._items[event.output_index] = _Item(event.item.type)
            case "response.output_text.delta":
                self._item(event.output_index, "message").text.append(event.delta)
                on_delta(Delta(kind="text", text=event.delta))
            case "response.reasoning_summary_text.delta" | "response.reasoning_text.delta":
                self._item(event.output_index, "reasoning").summary.append(event.delta)
                on_delta(Delta(kind="thinking", text=event.delta))
            case "response.reasoning_summary_part.added":
                item = self._item(event.output_index, "reasoning")
                if item.summary:  # parts of a summary are paragraphs
                    item.summary.append("\n\n")
            case "response.function_call_arguments.delta":
                self._item(event.output_index, "function_call").arguments.append(event.delta)
            case "response.function_call_arguments.done":
                self._item(event.output_index, "function_call").arguments = [event.arguments]
            case "response.output_item.done":
                self._finish_item(event.output_index, event.item.to_dict(mode="json"))
            case "response.completed" | "response.incomplete":
                response = event.response
                self._model = response.model or self._model
                self._usage = response.usage
                if event.type == "response.completed":
                    self._stop = "end_turn"
                else:
                    details = response.incomplete_details
                    reason = details.reason if details is not None else None
                    self._stop = (
                        "max_tokens" if reason == "max_output_tokens" else (reason or "incomplete")
                    )
            case "response.failed":
                error = event.response.error
                raise _failure(
                    self._vendor,
                    error.code if error is not None else None,
                    error.message if error is not None else None,
                    event.response.to_dict(mode="json"),
                )
            case "error":
                raise _failure(self._vendor, event.code, event.message, event.to_dict(mode="json"))
        # Event kinds added to the API later are ignored: the wire is additive.

    def _item(self, index: int, kind: str) -> _Item:
        item = self._items.get(index)
        if item is None:
            item = self._items[index] = _Item(kind)
        return item

    def _finish_item(self, index: int, native: dict[str, object]) -> None:
        item = self._item(index, str(native.get("type", "")))
        item.kind = str(native.get("type", item.kind))
        item.native = native
        if item.kind == "function_call":
            item.call_id = str(native.get("call_id") or "")
            item.name = str(native.get("name") or "")
            arguments = native.get("arguments")
            if isinstance(arguments, str):
                item.arguments = [arguments]
        elif item.kind in (shapes.APPLY_PATCH_CALL, shapes.SHELL_CALL):
            item.call_id = str(native.get("call_id") or "")
        elif item.kind == "message" and not item.text:
            content = native.get("content")
            for block in content if isinstance(content, list) else ():
                if isinstance(block, dict) and block.get("type") == "output_text":
                    item.text.append(str(block.get("text", "")))

    @property
    def complete(self) -> bool:
        """Whether the response ended (completed or incomplete) in the stream."""
        return self._stop is not None

    def result(self) -> ModelResponse:
        """The assembled response, output items in order."""
        parts: list[AssistantPart] = []
        for _, item in sorted(self._items.items()):
            match item.kind:
                case "reasoning":
                    text = "".join(item.summary)
                    if item.native is not None or text:
                        parts.append(ThinkingPart(text=text, native=item.native))
                case "message":
                    text = "".join(item.text)
                    if text:
                        parts.append(TextPart(text=text))
                case "function_call":
                    parts.append(_tool_call(item))
                case shapes.APPLY_PATCH_CALL | shapes.SHELL_CALL if self._native:
                    parts.append(_native_call(item))
                case "web_search_call" if item.native is not None:
                    native = item.native
                    parts.append(
                        TextPart(text=search_text(native), native={"openai_responses": native})
                    )
                case _:
                    pass  # other built-in tools' items: Bubu offers no others
        stop = self._stop
        if stop == "end_turn" and any(isinstance(p, ToolCallPart) for p in parts):
            stop = "tool_use"
        return ModelResponse(
            parts=tuple(parts), usage=_usage(self._usage), stop_reason=stop, model=self._model
        )


def search_text(item: dict[str, object]) -> str:
    """A `web_search_call` item in words, for the transcript and for any other provider."""
    action = item.get("action")
    query = action.get("query") if isinstance(action, dict) else None
    found = action.get("sources") if isinstance(action, dict) else None
    urls = (
        [str(s.get("url")) for s in found if isinstance(s, dict)] if isinstance(found, list) else []
    )
    said = f"[searched the web for {query!r}]" if query else "[searched the web]"
    return said + "".join(f"\n- <{u}>" for u in urls[:10])


def _tool_call(item: _Item) -> ToolCallPart:
    raw = "".join(item.arguments)
    call_id = item.call_id or new_id("call")
    native = item.native if item.native is not None and item.call_id else None
    if not raw.strip():
        return ToolCallPart(call_id=call_id, name=item.name, arguments={}, native=native)
    parsed = parse_arguments(raw)
    if parsed is not None:
        return ToolCallPart(call_id=call_id, name=item.name, arguments=parsed, native=native)
    return ToolCallPart(
        call_id=call_id, name=item.name, arguments={}, raw_arguments=raw, native=native
    )


def _native_call(item: _Item) -> ToolCallPart:
    """An apply_patch or shell call as the call of the Bubu tool that does it, the item kept."""
    given = item.native or {}
    mapped = shapes.from_responses(given)
    assert mapped is not None  # the item is one of the native kinds
    call_id = item.call_id or new_id("call")
    return ToolCallPart(call_id=call_id, name=mapped[0], arguments=mapped[1], native=given)


def _usage(usage: ResponseUsage | None) -> Usage:
    if usage is None:
        return Usage()
    cached = getattr(usage.input_tokens_details, "cached_tokens", None) or 0
    written = getattr(usage.input_tokens_details, "cache_write_tokens", None) or 0
    reasoning = getattr(usage.output_tokens_details, "reasoning_tokens", None) or 0
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=reasoning,
    )


def _failure(
    vendor: _retry.Vendor, code: str | None, message: str | None, body: object
) -> ProviderError:
    status = _STATUS_OF_CODE.get(code or "", 500 if code is None else 400)
    return _retry.status_error(vendor, status, body=body, api_message=message, api_code=code)


# ---- the provider ------------------------------------------------------------------------------


class OpenAIResponsesProvider(_endpoint.AtEndpoint):
    """An OpenAI model through the Responses API."""

    web_search: bool = False
    """Offer the model the Responses API's built-in web search (`web_search = true`)."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: httpx2.Client | None = None,
        context_window: int | None = None,
        stall_timeout: float | None = None,
        reasoning_effort: str | None = None,
        max_output_tokens: int | None = None,
        spec_name: str = "openai",
        native_tools: bool | None = None,
    ) -> None:
        endpoint = openai_endpoint(base_url, api_key)
        self._model = model
        self._spec_name = spec_name
        self._official = endpoint.official
        self._native = (
            native_tools
            if native_tools is not None
            else endpoint.official and takes_native_tools(model)
        )
        """Whether apply_patch and shell are offered in OpenAI's own shape (by default only at
        OpenAI's API: a proxy or another server may not know the tool types)."""
        self._base_url = endpoint.base or OPENAI_URL
        self._effort = check_effort(reasoning_effort)
        self._max_output = max_output_tokens
        self._summaries = True
        """Whether reasoning summaries are asked for (an organization OpenAI has not verified
        is refused them: then the request goes again without, for the rest of the run)."""
        self._window_given = (
            windows.Window(context_window, windows.USER) if context_window else None
        )
        self._found: windows.Window | None = None
        self._vendor, self._client = openai_client(endpoint, stall_timeout, http_client)
        self._owned = None if http_client is not None else self._client

    @property
    def accepts_images(self) -> bool:
        """Whether the model is shown images (every current OpenAI model but GPT-3.5)."""
        return not self._model.startswith("gpt-3.5")

    @property
    def spec(self) -> str:
        """The model spec, e.g. ``openai:gpt-5``."""
        return f"{self._spec_name}:{self._model}"

    @property
    def context_window(self) -> int:
        """The model's context window in tokens."""
        return self.window.tokens

    @property
    def context_window_source(self) -> str:
        """Where `context_window` came from (``--context-window``, ``genai-prices table`` …)."""
        return self.window.source

    @property
    def window(self) -> windows.Window:
        """The user's window, else (found once, on first use) what the server states (away from
        OpenAI), else the table's, else the default for an unknown model."""
        if self._window_given is not None:
            return self._window_given
        if self._found is None:
            self._found = windows.find_window(
                base_url=self._base_url, model=self._model, official=self._official, vendor="openai"
            )
        return self._found

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Stream one Responses API call; raise ProviderError on any failure."""
        try:
            return self._stream(request, on_delta)
        except ProviderError as e:
            if not (self._summaries and e.status == 400 and _summaries_refused(str(e))):
                raise
            self._summaries = False
            return self._stream(request, on_delta)

    def _stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        assembler = EventAssembler(self._vendor, native_tools=self._native)
        return _retry.stream_call(
            self._vendor,
            open_stream=lambda: self._open(request),
            feed=lambda event: assembler.feed(event, on_delta),
            assembler=assembler,
            errors=(_wire.APIError, httpx2.HTTPError, json.JSONDecodeError),
            convert=lambda exc, streaming: self._convert(exc, streaming=streaming),
        )

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The request body's options for `request` (what `complete` sends, less `stream`)."""
        options: dict[str, Any] = {
            "model": self._model,
            "input": to_input(request),
            "store": False,
        }
        if request.system:
            options["instructions"] = request.system
        tools = to_tools(request.tools, native_tools=self._native)
        if self.web_search:
            tools.append({"type": "web_search"})
        if tools:
            options["tools"] = tools
        if reasoning_model(self._model) or self._effort is not None:
            reasoning: dict[str, str] = {"summary": "auto"} if self._summaries else {}
            if self._effort is not None:
                reasoning["effort"] = self._effort
            options["reasoning"] = reasoning
            options["include"] = ["reasoning.encrypted_content"]
        limit = output_cap(request.max_tokens, self._max_output, reasoning_model(self._model))
        if limit is not None:
            options["max_output_tokens"] = limit
        if request.session_id:
            options["prompt_cache_key"] = request.session_id
        return options

    def _open(self, request: ModelRequest) -> DataStream[ResponseStreamEvent]:
        return stream_data(self._client, "responses", {**self.body(request), "stream": True})

    def _convert(self, exc: Exception, *, streaming: bool) -> ProviderError:
        vendor = self._vendor

        def in_stream(body: object) -> ProviderError:
            return _failure(vendor, body_field(body, "code"), body_field(body, "message"), body)

        error = convert_error(vendor, exc, streaming=streaming, in_stream=in_stream)
        return _retry.probe_server(error, lambda: models_status(self._client))


def _summaries_refused(message: str) -> bool:
    """Whether a 400 says the organization may not have reasoning summaries ("Your organization
    must be verified to generate reasoning summaries …")."""
    m = message.lower()
    return "summar" in m and "verif" in m
