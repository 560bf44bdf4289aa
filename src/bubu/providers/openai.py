"""`openai-chat:MODEL` — Chat Completions with tools and streaming, as the official SDK sends it.

The adapter for OpenAI-compatible servers (Ollama, vLLM, LM Studio, OpenRouter): `openai:MODEL`
with a `base_url` / `OPENAI_BASE_URL` other than OpenAI's comes here, and `openai-chat:MODEL`
asks for it at OpenAI too (whose own `openai:MODEL` is the Responses API, `openai_responses`). Calls
go over `httpx2` (`_wire`) and are never retried: the engine owns retries and records each failed
attempt, so every failure leaves here as a `ProviderError`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar, assert_never, cast

import httpx2
import msgspec

from bubu import images
from bubu.errors import ProviderError
from bubu.ids import new_id
from bubu.providers import _endpoint, _retry, _wire, toolmode, windows
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
    from openai.types.chat import (
        ChatCompletion,
        ChatCompletionChunk,
        ChatCompletionContentPartParam,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageFunctionToolCallParam,
        ChatCompletionMessageParam,
    )
    from openai.types.completion_usage import CompletionUsage

T = TypeVar("T")
OPENAI_URL = "https://api.openai.com/v1"
PLACEHOLDER_KEY = _endpoint.PLACEHOLDER_KEY
"""The key sent to a server without one set (local servers ignore it; the SDK insists)."""
COMPATIBLE_MAX_OUTPUT = 8192
"""The output cap sent to a compatible server when none is set: many refuse a cap beyond their
window, and it bounds a rambling local model (OpenAI's own API gets none: the model's own)."""
_STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}


def context_window_for(model: str) -> int:
    """The window of an OpenAI model as the `genai-prices` table states it, else the default
    for an unknown model."""
    found = windows.hosted_window("openai", model)
    return found.tokens if found is not None else windows.UNKNOWN_WINDOW


# ---- request: ModelRequest -> wire ------------------------------------------------------------


def to_messages(
    request: ModelRequest, *, compatible: bool = False
) -> list[ChatCompletionMessageParam]:
    """The Chat Completions `messages` for a request: system, then the history in order.

    For a `compatible` (non-OpenAI) server an assistant turn of tool calls alone carries
    `content: ""` rather than OpenAI's `null`: llama-cpp-python's server answers 500 to a null."""
    out: list[ChatCompletionMessageParam] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        match message:
            case UserMessage(text=text, images=()):
                out.append({"role": "user", "content": text})
            case UserMessage(text=text, images=shown):
                with_images: list[ChatCompletionContentPartParam] = [_image_url(i) for i in shown]
                if text:
                    with_images.append({"type": "text", "text": text})
                out.append({"role": "user", "content": with_images})
            case AssistantMessage(parts=parts):
                out.append(_assistant_message(parts, compatible=compatible))
            case ToolResultsMessage(results=results):
                # One `tool` message per result, in call order, right after the assistant turn.
                for result in results:
                    content = f"ERROR: {result.content}" if result.is_error else result.content
                    out.append({"role": "tool", "tool_call_id": result.call_id, "content": content})
                # A tool message holds text only: the images the results show follow as a user
                # message of their own.
                pictures = [_image_url(i) for result in results for i in result.images]
                if pictures:
                    intro: ChatCompletionContentPartParam = {
                        "type": "text",
                        "text": "The images the tool results above show:",
                    }
                    out.append({"role": "user", "content": [intro, *pictures]})
            case _:
                assert_never(message)
    return out


def _image_url(image: ImagePart) -> ChatCompletionContentPartParam:
    return {
        "type": "image_url",
        "image_url": {"url": images.data_url(image.media_type, image.data)},
    }


def _assistant_message(
    parts: tuple[AssistantPart, ...], *, compatible: bool
) -> ChatCompletionMessageParam:
    texts: list[str] = []
    calls: list[ChatCompletionMessageFunctionToolCallParam] = []
    for part in parts:
        match part:
            case TextPart(text=text):
                texts.append(text)
            case ThinkingPart():
                # Chat Completions has no way to send reasoning back; it stays in the log only.
                pass
            case ToolCallPart():
                arguments = part.raw_arguments
                if arguments is None:
                    arguments = json.dumps(part.arguments, ensure_ascii=False)
                calls.append(
                    {
                        "id": part.call_id,
                        "type": "function",
                        "function": {"name": part.name, "arguments": arguments},
                    }
                )
            case _:
                assert_never(part)
    text = "".join(texts)
    if not calls:
        return {"role": "assistant", "content": text}
    return {
        "role": "assistant",
        "content": text or ("" if compatible else None),
        "tool_calls": calls,
    }


def to_tools(tools: tuple[ToolSpec, ...]) -> list[ChatCompletionFunctionToolParam]:
    """Tool specs as Chat Completions `function` tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


# ---- response: streamed chunks -> ModelResponse ------------------------------------------------


class _Call:
    __slots__ = ("arguments", "call_id", "name")

    def __init__(self, call_id: str, name: str) -> None:
        self.call_id, self.name = call_id, name
        self.arguments: list[str] = []


class ChunkAssembler:
    """Folds streamed `ChatCompletionChunk`s into one `ModelResponse` (no I/O)."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[_Call] = []
        self._slot_by_index: dict[int, int] = {}
        self._usage: CompletionUsage | None = None
        self._finish: str | None = None
        self._model = ""

    def feed(self, chunk: ChatCompletionChunk, on_delta: DeltaSink) -> None:
        """Take one chunk, sending its text and reasoning fragments to `on_delta`."""
        if chunk.model:
            self._model = chunk.model
        if chunk.usage is not None:
            # With include_usage the last chunk carries usage and no choices; some compatible
            # servers put it on the finishing chunk instead, so take it wherever it appears.
            self._usage = chunk.usage
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            self._take_text(delta.model_extra, delta.content, on_delta)
            for fragment in delta.tool_calls or ():
                self._take_call_fragment(
                    getattr(fragment, "index", None),
                    fragment.id,
                    fragment.function.name if fragment.function else None,
                    fragment.function.arguments if fragment.function else None,
                )
            if choice.finish_reason is not None:
                self._finish = choice.finish_reason

    def _take_text(
        self, extra: dict[str, object] | None, content: str | None, on_delta: DeltaSink
    ) -> None:
        # The reasoning (a field outside the schema, in `extra`) and the text of a delta or a
        # whole message, in that order.
        reasoning = _reasoning_fragment(extra)
        if reasoning:
            self._reasoning.append(reasoning)
            on_delta(Delta(kind="thinking", text=reasoning))
        if content:
            self._text.append(content)
            on_delta(Delta(kind="text", text=content))

    def _take_call_fragment(
        self, index: int | None, call_id: str | None, name: str | None, arguments: str | None
    ) -> None:
        slot = self._slot_by_index.get(index) if index is not None else None
        if index is None and not call_id and not name and self._calls:
            slot = len(self._calls) - 1
        if slot is None or self._starts_new_call(self._calls[slot], call_id, name):
            slot = len(self._calls)
            self._calls.append(_Call(call_id or "", name or ""))
            if index is not None:
                self._slot_by_index[index] = slot
        call = self._calls[slot]
        if call_id and not call.call_id:
            call.call_id = call_id
        if name and not call.name:
            call.name = name
        if arguments:
            call.arguments.append(arguments)

    def take_whole(self, completion: ChatCompletion, on_delta: DeltaSink) -> None:
        """Take a whole (not streamed) completion, sending its text to `on_delta` at once."""
        if completion.model:
            self._model = completion.model
        self._usage = completion.usage
        choice = completion.choices[0] if completion.choices else None
        if choice is None:
            return
        message = choice.message
        self._take_text(message.model_extra, message.content, on_delta)
        for i, call in enumerate(message.tool_calls or ()):
            function = getattr(call, "function", None)
            name = function.name if function is not None else None
            arguments = function.arguments if function is not None else None
            self._take_call_fragment(i, call.id, name, arguments)
        finish: str | None = getattr(choice, "finish_reason", None)  # some servers send none
        self._finish = finish or "stop"

    @staticmethod
    def _starts_new_call(call: _Call, call_id: str | None, name: str | None) -> bool:
        # Some compatible servers send each whole call at index 0 (or with no index): a second
        # id, or a second name on a call that already has arguments, starts another call.
        if call_id and call.call_id:
            return call_id != call.call_id
        return bool(not call_id and name and call.name and call.arguments)

    @property
    def complete(self) -> bool:
        """Whether the response is whole: a finish reason arrived, or (from a server that sends
        none) the usage that comes after the last choice did."""
        return self._finish is not None or self._usage is not None

    def result(self) -> ModelResponse:
        """The assembled response (call only once `complete` is true)."""
        parts: list[AssistantPart] = []
        if self._reasoning:
            parts.append(ThinkingPart(text="".join(self._reasoning)))
        text = "".join(self._text)
        if text:
            parts.append(TextPart(text=text))
        parts.extend(_tool_call_part(call) for call in self._calls)
        stop = _STOP_REASONS.get(self._finish or "", self._finish)
        if self._finish is None:
            stop = "tool_use" if self._calls else "end_turn"  # inferred: the server sent none
        if self._calls and stop == "end_turn":
            # Several compatible servers report "stop" even when the response is tool calls.
            stop = "tool_use"
        return ModelResponse(
            parts=tuple(parts), usage=_usage(self._usage), stop_reason=stop, model=self._model
        )


def _reasoning_fragment(extra: dict[str, object] | None) -> str | None:
    # Not in the OpenAI schema: DeepSeek and vLLM stream `reasoning_content`, Ollama and
    # OpenRouter `reasoning`. Shown and logged as thinking, never sent back.
    if not extra:
        return None
    for key in ("reasoning_content", "reasoning"):
        value = extra.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _tool_call_part(call: _Call) -> ToolCallPart:
    raw = "".join(call.arguments)
    # Ids pair results with calls for the whole session, so a missing one must be unique.
    call_id = call.call_id or new_id("call")
    if not raw.strip():
        return ToolCallPart(call_id=call_id, name=call.name, arguments={})
    parsed = parse_arguments(raw)
    if parsed is not None:
        return ToolCallPart(call_id=call_id, name=call.name, arguments=parsed)
    # Kept verbatim so the tool layer can tell the model its arguments were not a JSON object.
    return ToolCallPart(call_id=call_id, name=call.name, arguments={}, raw_arguments=raw)


def _usage(usage: CompletionUsage | None) -> Usage:
    if usage is None:
        return Usage(reported=False)
    details = usage.prompt_tokens_details
    cached = details.cached_tokens if details is not None else None
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cache_read_tokens=cached or 0,
        reasoning_tokens=_reasoning_tokens(usage),
    )


def _reasoning_tokens(usage: CompletionUsage) -> int:
    details = usage.completion_tokens_details
    return (details.reasoning_tokens if details is not None else None) or 0


# ---- the provider ------------------------------------------------------------------------------


class OpenAIProvider(_endpoint.AtEndpoint):
    """A Chat Completions model, at OpenAI or at any OpenAI-compatible server."""

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
        images: bool | None = None,
    ) -> None:
        from bubu.providers.openai_responses import check_effort

        self._images = images
        endpoint = openai_endpoint(base_url, api_key)
        self._model = model
        self._spec_name = spec_name
        self._effort = check_effort(reasoning_effort)
        self._max_output = max_output_tokens
        self._official = endpoint.official
        self._tool_mode: toolmode.ToolMode = "stream"
        self._base_url = endpoint.base or OPENAI_URL
        self._window: windows.Window | None = (
            windows.Window(context_window, windows.USER) if context_window else None
        )
        self._vendor, self._client = openai_client(endpoint, stall_timeout, http_client)
        self._owned = None if http_client is not None else self._client

    @property
    def accepts_images(self) -> bool:
        """Whether the model is shown images: at OpenAI yes (but GPT-3.5); at another server
        only when it says so (`images=True`), since many local models read text only."""
        if self._images is not None:
            return self._images
        return self._official and not self._model.startswith("gpt-3.5")

    @property
    def spec(self) -> str:
        """The model spec, e.g. ``openai:gpt-4.1``."""
        return f"{self._spec_name}:{self._model}"

    @property
    def context_window(self) -> int:
        """The model's context window in tokens."""
        return self.window.tokens

    @property
    def context_window_source(self) -> str:
        """Where `context_window` came from, e.g. ``llama.cpp /props``."""
        return self.window.source

    @property
    def window(self) -> windows.Window:
        """The window: the user's, else the one the server serves, else the table's, else the
        default for an unknown model (found once, on first use)."""
        if self._window is None:
            found = None if self._official else windows.served_window(self._base_url, self._model)
            if found is None and self._official:
                found = windows.hosted_window("openai", self._model)
            self._window = found or windows.Window(windows.UNKNOWN_WINDOW, windows.UNKNOWN)
        return self._window

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Stream one Chat Completions call; raise ProviderError on any failure.

        A compatible server that refuses how tools were asked is asked again the next way down
        (toolmode.py), and the response carries the one line that says so."""
        said: str | None = None
        while True:
            try:
                response = self._complete(request, on_delta)
            except ProviderError as e:
                words = _error_words(e)
                mode = None
                if request.tools and not self._official:
                    mode = toolmode.next_mode(self._tool_mode, words)
                if mode is None:
                    raise
                self._tool_mode = mode
                said = toolmode.notice(mode, self._vendor.name, words)
                continue
            return response if said is None else msgspec.structs.replace(response, notice=said)

    def _complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        if self._tool_mode == "whole" and request.tools:
            return self._whole(request, on_delta)
        assembler = ChunkAssembler()
        opened: list[DataStream[ChatCompletionChunk]] = []

        def open_stream() -> DataStream[ChatCompletionChunk]:
            opened.append(self._open(request))
            return opened[-1]

        try:
            return _retry.stream_call(
                self._vendor,
                open_stream=open_stream,
                feed=lambda chunk: assembler.feed(chunk, on_delta),
                assembler=assembler,
                errors=(_wire.APIError, httpx2.HTTPError, json.JSONDecodeError),
                convert=lambda exc, streaming: self._convert(exc, streaming=streaming),
            )
        except ProviderError as e:
            silent = bool(opened) and opened[-1].response.num_bytes_downloaded == 0
            if self._official or e.error_class != "empty_stream" or not silent:
                raise
            empty = e
        # llama-cpp-python answers a streamed request that overflows its window with a 200 and
        # not one byte; asked the same not streamed, it says so with a 400 that states the window
        # (or, when the empty stream had another cause, answers). It drops the connection the
        # empty stream came on, so a reset there is asked once more on a new one. Any other
        # failure of the second call is the empty stream it followed.
        for _ in range(2):
            try:
                response = self._whole(request, on_delta)
            except ProviderError as e:
                if e.error_class == "context_length":
                    raise
                if e.error_class != "connection":
                    # What the server said names the cause, when it says anything.
                    raise _retry.empty_stream_error(self._vendor, said=e) from None
            else:
                # llama-cpp-python streams nothing whenever its answer starts with a tool call:
                # asked whole from now on, so no step is sent twice, and the log says so once.
                if request.tools and self._tool_mode == "stream":
                    self._tool_mode = "whole"
                    said = "it sent an empty stream where the answer was due, then answered whole"
                    notice = toolmode.notice("whole", self._vendor.name, said)
                    return msgspec.structs.replace(response, notice=notice)
                return response
        raise empty

    def _whole(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        assembler = ChunkAssembler()
        error: ProviderError
        try:
            completion = self._create(request, stream=False)
        except (_wire.APIError, httpx2.HTTPError, json.JSONDecodeError) as exc:
            error = self._convert(exc, streaming=False)
        else:
            if not isinstance(completion, _wire.Obj):  # a body that is not a JSON object
                raise _retry.bad_response_error(self._vendor, f"not a completion: {completion!r}")
            assembler.take_whole(cast("ChatCompletion", completion), on_delta)
            if assembler.complete:
                return assembler.result()
            error = _retry.incomplete_stream_error(self._vendor)
        raise error

    def _open(self, request: ModelRequest) -> DataStream[ChatCompletionChunk]:
        return self._create(request, stream=True)  # type: ignore[no-any-return]

    def _create(self, request: ModelRequest, *, stream: bool) -> Any:
        from bubu.providers.openai_responses import output_cap, reasoning_model

        tools = to_tools(request.tools) if self._tool_mode != "none" else []
        limit = request.max_tokens if request.max_tokens is not None else self._max_output
        if self._official:
            limit = output_cap(request.max_tokens, self._max_output, reasoning_model(self._model))
        body: dict[str, Any] = {
            "model": self._model,
            "messages": to_messages(request, compatible=not self._official),
        }
        if tools:
            body["tools"] = tools
        if stream is False:
            if tools:
                body["tool_choice"] = "auto"
            body["max_tokens"] = limit if limit is not None else COMPATIBLE_MAX_OUTPUT
        elif self._official:
            # OpenAI's newer models accept only max_completion_tokens, which counts reasoning,
            # so none is sent unless asked for; compatible servers widely understand only
            # max_tokens.
            if limit is not None:
                body["max_completion_tokens"] = limit
        else:
            # A compatible server is asked for "auto" outright: llama-cpp-python drops tools
            # without it.
            if tools and self._tool_mode == "stream":
                body["tool_choice"] = "auto"
            body["max_tokens"] = limit if limit is not None else COMPATIBLE_MAX_OUTPUT
        if self._effort is not None:
            body["reasoning_effort"] = self._effort
        body["stream"] = stream
        if stream:
            body["stream_options"] = {"include_usage": True}
            return stream_data(self._client, "chat/completions", body)
        return self._client.post("chat/completions", body)

    def _convert(self, exc: Exception, *, streaming: bool) -> ProviderError:
        vendor = self._vendor
        error = convert_error(
            vendor, exc, streaming=streaming, in_stream=lambda b: _stream_error_event(vendor, b)
        )
        return _retry.probe_server(error, lambda: models_status(self._client))


# ---- shared with the Responses adapter (openai_responses) --------------------------------------


def openai_endpoint(base_url: str | None, api_key: str | None) -> _endpoint.Endpoint:
    """Where an OpenAI SDK client calls (`base_url`, else OPENAI_BASE_URL, else OpenAI's own API)
    and with which key (`api_key`, else OPENAI_API_KEY; refused at OpenAI without one)."""
    return _endpoint.endpoint(
        base_url,
        api_key,
        base_env="OPENAI_BASE_URL",
        host="api.openai.com",
        key_env="OPENAI_API_KEY",
        vendor_name="OpenAI",
        missing="OPENAI_API_KEY is not set; export your OpenAI API key, or pass --base-url "
        "to use a local OpenAI-compatible server",
    )


def openai_client(
    endpoint: _endpoint.Endpoint, stall_timeout: float | None, http_client: httpx2.Client | None
) -> tuple[_retry.Vendor, _wire.Wire]:
    """The vendor failures name and the client calls go through (which never retries: the
    engine does), sending what the official SDK sends."""
    stall = _retry.stall_timeout(stall_timeout, client_given=http_client is not None)
    client = _wire.Wire(
        http_client or httpx2.Client(follow_redirects=True),
        endpoint.base or OPENAI_URL,
        wire_headers(endpoint.key),
        timeout=None if stall is None else _retry.sdk_timeout(stall),
        error_body=lambda body: body.get("error", body) if isinstance(body, dict) else body,
    )
    return endpoint.vendor(stall), client


def wire_headers(key: str | None) -> dict[str, str]:
    """The headers of every call, as the official SDK sends them: the key, and the organization
    and project OPENAI_ORG_ID and OPENAI_PROJECT_ID name."""
    headers = {"accept": "application/json", "x-stainless-retry-count": "0"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    for env, name in (
        ("OPENAI_ORG_ID", "openai-organization"),
        ("OPENAI_PROJECT_ID", "openai-project"),
    ):
        if os.environ.get(env) is not None:
            headers[name] = os.environ[env]
    return headers


class DataStream(Generic[T]):
    """A sent streaming request: entered, its SSE events' data as JSON objects, read as the
    SDK reads them (`[DONE]` ends it; an object with an `error` raises it as an APIError)."""

    __slots__ = ("_opened",)

    def __init__(self, opened: _wire.Opened) -> None:
        self._opened = opened

    @property
    def response(self) -> httpx2.Response:
        """The HTTP response the stream is read from."""
        return self._opened.response

    def __enter__(self) -> Iterator[T]:
        return self._data(self._opened.__enter__()[1])

    def __exit__(self, *_: object) -> None:
        self._opened.__exit__()

    @staticmethod
    def _data(events: Iterator[_wire.Event]) -> Iterator[T]:
        for sse in events:
            if sse.data.startswith("[DONE]"):
                # Read the body to its end, as the SDK does: a response read whole leaves its
                # connection to the next request, one left unread is closed with it.
                for _ in events:
                    pass
                break
            data = _wire.data(sse)
            if isinstance(data, dict) and data.get("error"):
                error = data["error"]
                message = error.get("message") if isinstance(error, dict) else None
                if not message or not isinstance(message, str):
                    message = "An error occurred during streaming"
                raise _wire.APIError(message, body=error)
            yield data


def stream_data(client: _wire.Wire, path: str, body: object) -> DataStream[Any]:
    """POST a streaming request at `path` now and return its stream of JSON objects."""
    return DataStream(client.stream(path, body))


def convert_error(
    vendor: _retry.Vendor,
    exc: Exception,
    *,
    streaming: bool,
    in_stream: Callable[[object], ProviderError],
) -> ProviderError:
    """The `ProviderError` for a failure of an OpenAI SDK call; `in_stream` reads the body of an
    error that came inside a 200 stream."""
    match exc:
        case _wire.APIStatusError():
            return _retry.status_error(
                vendor,
                exc.status_code,
                body=exc.body,
                headers=exc.response.headers,
                api_message=body_field(exc.body, "message"),
                api_code=exc.code,
            )
        case _wire.APITimeoutError() | httpx2.TimeoutException():
            return _retry.timeout_error(vendor, exc)
        case _wire.APIConnectionError() | httpx2.TransportError():
            return _retry.connection_error(vendor, _retry.cause(exc), during_stream=streaming)
        case _wire.APIError():
            return in_stream(exc.body)
        case _:
            return _retry.bad_response_error(vendor, f"{type(exc).__name__}: {exc}")


def models_status(client: _wire.Wire) -> int:
    """The HTTP status of `GET /models` at the client's server (is it up?), quickly."""
    return client.status_of("/models", timeout=_retry.PROBE_S)


def body_field(body: object, key: str) -> str | None:
    """`body[key]` as text, when `body` is a dict that has it."""
    if isinstance(body, dict):
        value = body.get(key)
        if value is not None:
            return str(value)
    return None


def _stream_error_event(vendor: _retry.Vendor, body: object) -> ProviderError:
    # An `{"error": …}` object inside a 200 stream. Compatible servers often give the HTTP
    # status they would have used as `code`; without one it is a server fault worth a retry.
    code = body_field(body, "code")
    status = int(code) if code is not None and code.isdigit() else 500
    return _retry.status_error(
        vendor, status, body=body, api_message=body_field(body, "message"), api_code=code
    )


def _error_words(e: ProviderError) -> str:
    """The server's own message in a failure (its body's `message`), else the failure's text."""
    try:
        body = json.loads(e.body or "")
    except ValueError:
        body = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        found = body_field(inner, "message") or body_field(body, "detail")
        if found:
            return found
    return e.body or str(e)
