"""The Responses API adapter against hand-written wire fixtures of its documented stream."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from bubu.errors import ConfigError, ProviderError
from bubu.providers import resolve
from bubu.providers.base import (
    AssistantMessage,
    ModelRequest,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolResultsMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from bubu.providers.openai import OpenAIProvider
from bubu.providers.openai_responses import OpenAIResponsesProvider

from .wire import OPENAI_KEY, Deltas, Wire, cut, fixture, sse, status

READ_FILE = ToolSpec(
    name="read_file",
    description="Read a file in the workspace.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["path"],
    },
)
REQUEST = ModelRequest(
    system="You are Bubu.",
    tools=(READ_FILE,),
    messages=(UserMessage(text="Fix the failing test."),),
    session_id="ses_01J9Z3QK7X",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


def provider(wire: Wire, model: str = "gpt-5", **options: Any) -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider(model, api_key=OPENAI_KEY, http_client=wire.client(), **options)


def done_items(name: str) -> list[dict[str, Any]]:
    """The `item` of every response.output_item.done event in a fixture, as sent."""
    items = []
    for block in fixture(name).decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                data = json.loads(line.removeprefix("data: "))
                if data["type"] == "response.output_item.done":
                    items.append(data["item"])
    return items


def fail(name: str, *, code: int | None = None) -> ProviderError:
    responder = sse(name) if code is None else status(code, name)
    with pytest.raises(ProviderError) as caught:
        provider(Wire([responder])).complete(REQUEST, Deltas())
    return caught.value


# ---- streamed text and the request ---------------------------------------------------------


def test_text_streams_deltas_and_reads_cached_tokens() -> None:
    wire = Wire([sse("responses_text.sse")])
    deltas = Deltas()
    response = provider(wire, "gpt-4.1").complete(REQUEST, deltas)

    assert deltas.of("text") == ["Hello", ", wörld.\n"]
    assert response.parts == (TextPart(text="Hello, wörld.\n"),)
    assert response.stop_reason == "end_turn"
    assert response.model == "gpt-4.1-2025-04-14"
    assert response.usage == Usage(input_tokens=1250, output_tokens=6, cache_read_tokens=1024)


def test_request_shape_on_the_wire() -> None:
    wire = Wire([sse("responses_text.sse")])
    provider(wire, "gpt-4.1").complete(REQUEST, Deltas())

    request = wire.requests[0]
    assert request.url == "https://api.openai.com/v1/responses"
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert request.headers.get("x-stainless-retry-count") == "0"
    # A model that does not reason gets no reasoning options; no output cap unless asked for.
    assert wire.body() == {
        "model": "gpt-4.1",
        "input": [{"role": "user", "content": "Fix the failing test."}],
        "instructions": "You are Bubu.",
        "tools": [
            {
                "type": "function",
                "name": "read_file",
                "description": "Read a file in the workspace.",
                "parameters": READ_FILE.parameters,
                "strict": False,
            }
        ],
        "store": False,
        "prompt_cache_key": "ses_01J9Z3QK7X",
        "stream": True,
    }


def test_a_reasoning_model_asks_for_encrypted_reasoning_at_the_chosen_effort() -> None:
    wire = Wire([sse("responses_text.sse"), sse("responses_text.sse")])
    provider(wire, "gpt-5", reasoning_effort="high").complete(REQUEST, Deltas())
    provider(wire, "gpt-5").complete(REQUEST, Deltas())

    chosen, default = wire.body(0), wire.body(1)
    assert chosen["reasoning"] == {"summary": "auto", "effort": "high"}
    assert chosen["include"] == ["reasoning.encrypted_content"]
    assert chosen["store"] is False
    # Without --reasoning-effort the model's own default applies: no effort is sent.
    assert default["reasoning"] == {"summary": "auto"}
    assert default["include"] == ["reasoning.encrypted_content"]


def test_an_organization_refused_summaries_is_asked_again_without_them() -> None:
    wire = Wire(
        [
            status(400, "responses_400_unverified_summary.json"),
            sse("responses_text.sse"),
            sse("responses_text.sse"),
        ]
    )
    p = provider(wire, "gpt-5", reasoning_effort="low")
    response = p.complete(REQUEST, Deltas())
    assert response.parts  # the answer came, from the second request
    assert wire.body(0)["reasoning"] == {"summary": "auto", "effort": "low"}
    assert wire.body(1)["reasoning"] == {"effort": "low"}
    assert wire.body(1)["include"] == ["reasoning.encrypted_content"]
    p.complete(REQUEST, Deltas())  # and for the rest of the run
    assert wire.body(2)["reasoning"] == {"effort": "low"}
    assert len(wire.requests) == 3


def test_another_bad_request_is_not_asked_again() -> None:
    wire = Wire([status(400, "responses_400_context.json")])
    with pytest.raises(ProviderError):
        provider(wire, "gpt-5").complete(REQUEST, Deltas())
    assert len(wire.requests) == 1


def test_the_output_cap_is_omitted_by_default_and_sent_when_set() -> None:
    wire = Wire([sse("responses_text.sse")] * 5)
    provider(wire).complete(REQUEST, Deltas())
    provider(wire, max_output_tokens=32000).complete(REQUEST, Deltas())
    summary = ModelRequest(system="", tools=(), messages=REQUEST.messages, max_tokens=2048)
    provider(wire, "gpt-4.1").complete(summary, Deltas())
    provider(wire).complete(summary, Deltas())
    provider(wire, max_output_tokens=32000).complete(summary, Deltas())

    assert "max_output_tokens" not in wire.body(0)
    assert wire.body(1)["max_output_tokens"] == 32000
    # A summary's own cap is its answer's room: a model that does not reason gets it as is; a
    # reasoning model thinks first, so it gets no cap, or --max-output-tokens when larger.
    assert wire.body(2)["max_output_tokens"] == 2048
    assert "max_output_tokens" not in wire.body(3)
    assert wire.body(4)["max_output_tokens"] == 32000
    assert "prompt_cache_key" not in wire.body(2)  # no session, no cache key


def test_a_bad_reasoning_effort_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        OpenAIResponsesProvider("gpt-5", api_key=OPENAI_KEY, reasoning_effort="max")
    assert "low, medium, high" in str(caught.value)
    assert "\n" not in str(caught.value)


# ---- reasoning items and parallel calls ------------------------------------------------------


def test_reasoning_and_parallel_calls_are_kept_in_their_native_form() -> None:
    wire = Wire([sse("responses_reasoning_tool_calls.sse")])
    deltas = Deltas()
    response = provider(wire).complete(REQUEST, deltas)
    reasoning, first, second = done_items("responses_reasoning_tool_calls.sse")

    summary = "**Reading both files**\n\nThe test imports `calc`; I need the module and its test."
    assert "".join(deltas.of("thinking")) == summary
    assert deltas.of("text") == []
    assert response.parts == (
        ThinkingPart(text=summary, native=reasoning),
        ToolCallPart(
            call_id="call_Q1w2E3r4T5y6U7i8O9p0",
            name="read_file",
            arguments={"path": "calc.py"},
            native=first,
        ),
        ToolCallPart(
            call_id="call_A1s2D3f4G5h6J7k8L9z0",
            name="read_file",
            arguments={"path": "test_calc.py", "limit": 50},
            native=second,
        ),
    )
    # The complete encrypted content is the one of output_item.done, not the partial one added.
    part = response.parts[0]
    assert isinstance(part, ThinkingPart)
    assert isinstance(part.native, dict)
    assert part.native["encrypted_content"].endswith("hJ1kL4==")
    assert response.stop_reason == "tool_use"
    assert response.model == "gpt-5-2025-08-07"
    assert response.usage == Usage(
        input_tokens=4821, output_tokens=412, cache_read_tokens=4608, reasoning_tokens=320
    )


def test_reasoning_and_calls_are_replayed_byte_for_byte_in_the_next_request() -> None:
    wire = Wire([sse("responses_reasoning_tool_calls.sse"), sse("responses_text.sse")])
    adapter = provider(wire)
    first = adapter.complete(REQUEST, Deltas())
    results = ToolResultsMessage(
        results=(
            ToolResultPart(call_id="call_Q1w2E3r4T5y6U7i8O9p0", name="read_file", content="x = 1"),
            ToolResultPart(
                call_id="call_A1s2D3f4G5h6J7k8L9z0",
                name="read_file",
                content="no such file",
                is_error=True,
            ),
        )
    )
    follow = ModelRequest(
        system=REQUEST.system,
        tools=REQUEST.tools,
        messages=(*REQUEST.messages, AssistantMessage(parts=first.parts), results),
        session_id=REQUEST.session_id,
    )
    adapter.complete(follow, Deltas())

    reasoning, call_a, call_b = done_items("responses_reasoning_tool_calls.sse")
    assert wire.body()["input"] == [
        {"role": "user", "content": "Fix the failing test."},
        reasoning,
        call_a,
        call_b,
        {"type": "function_call_output", "call_id": "call_Q1w2E3r4T5y6U7i8O9p0", "output": "x = 1"},
        {
            "type": "function_call_output",
            "call_id": "call_A1s2D3f4G5h6J7k8L9z0",
            "output": "ERROR: no such file",
        },
    ]
    # The encrypted content and the arguments go back as the exact bytes the server sent.
    sent = wire.requests[-1].content
    raw = fixture("responses_reasoning_tool_calls.sse")
    encrypted = reasoning["encrypted_content"].encode()
    assert encrypted in raw
    assert encrypted in sent
    assert json.dumps(call_b["arguments"]).encode() in sent


def test_reasoning_from_another_provider_is_not_sent() -> None:
    wire = Wire([sse("responses_text.sse")])
    history = ModelRequest(
        system="",
        tools=(),
        messages=(
            UserMessage(text="task"),
            AssistantMessage(
                parts=(
                    ThinkingPart(text="private", signature="sig"),
                    TextPart(text="Looking."),
                    ToolCallPart(call_id="c1", name="grep", arguments={}, raw_arguments="{oops"),
                )
            ),
        ),
    )
    provider(wire).complete(history, Deltas())
    assert wire.body()["input"] == [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "Looking."},
        {"type": "function_call", "call_id": "c1", "name": "grep", "arguments": "{oops"},
    ]


def test_a_call_renamed_by_the_log_goes_back_under_its_session_id() -> None:
    wire = Wire([sse("responses_text.sse")])
    _, call_a, _ = done_items("responses_reasoning_tool_calls.sse")
    part = ToolCallPart(call_id="call_x_2", name="read_file", arguments={}, native=call_a)
    history = ModelRequest(system="", tools=(), messages=(AssistantMessage(parts=(part,)),))
    provider(wire).complete(history, Deltas())
    assert wire.body()["input"] == [{**call_a, "call_id": "call_x_2"}]


# ---- incomplete and failed responses -------------------------------------------------------------


def test_an_incomplete_response_at_the_output_cap_is_a_cut_off_answer() -> None:
    response = provider(Wire([sse("responses_incomplete.sse")])).complete(REQUEST, Deltas())
    assert response.parts == (TextPart(text="The first half of"),)
    assert response.stop_reason == "max_tokens"
    assert response.usage.reasoning_tokens == 996


def test_a_failed_response_is_a_retryable_server_error() -> None:
    error = fail("responses_failed.sse")
    assert error.error_class == "server_error"
    assert error.retryable
    assert "The server had an error" in str(error)


def test_a_context_overflow_is_not_retried() -> None:
    streamed = fail("responses_failed_context.sse")
    refused = fail("responses_400_context.json", code=400)
    for error in (streamed, refused):
        assert error.error_class == "context_length"
        assert not error.retryable
        assert "exceeds the context window" in str(error)


def test_an_error_event_in_the_stream_is_classified_by_its_code() -> None:
    error = fail("responses_error_event.sse")
    assert error.error_class == "rate_limited"
    assert error.retryable


def test_a_stream_cut_before_the_response_ends_is_incomplete_and_retryable() -> None:

    responder = cut("responses_text.sse", after=5, error=httpx2.ReadError("reset by peer"))
    with pytest.raises(ProviderError) as caught:
        provider(Wire([responder])).complete(REQUEST, Deltas())
    assert caught.value.error_class == "stream_incomplete"
    assert caught.value.retryable


def test_a_stream_that_ends_without_completing_is_incomplete() -> None:
    head = b"\n\n".join(fixture("responses_text.sse").split(b"\n\n")[:6]) + b"\n\n"
    wire = Wire(
        [
            lambda request: httpx2.Response(
                200, headers={"content-type": "text/event-stream"}, content=head
            )
        ]
    )
    with pytest.raises(ProviderError) as caught:
        provider(wire).complete(REQUEST, Deltas())
    assert caught.value.error_class == "stream_incomplete"


# ---- which adapter a spec gets -------------------------------------------------------------------


def test_openai_at_openai_is_the_responses_api_and_chat_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    own = resolve("openai:gpt-5")
    assert isinstance(own, OpenAIResponsesProvider)
    assert own.spec == "openai:gpt-5"
    official = resolve("openai:gpt-5", base_url="https://api.openai.com/v1")
    assert isinstance(official, OpenAIResponsesProvider)
    local = resolve("openai:qwen3", base_url="http://127.0.0.1:11434/v1")
    assert isinstance(local, OpenAIProvider)
    assert local.spec == "openai:qwen3"
    chat = resolve("openai-chat:gpt-5")
    assert isinstance(chat, OpenAIProvider)
    assert (chat.spec, chat.official) == ("openai-chat:gpt-5", True)
    proxy = resolve("openai-responses:gpt-5", base_url="http://127.0.0.1:4000/v1")
    assert isinstance(proxy, OpenAIResponsesProvider)
    assert (proxy.spec, proxy.official) == ("openai-responses:gpt-5", False)


def test_chat_completions_caps_output_only_where_it_must() -> None:
    wire = Wire([sse("openai_text.sse")] * 3)
    bare = ModelRequest(system="", tools=(), messages=(UserMessage(text="hi"),))
    official = OpenAIProvider(
        "gpt-5", api_key=OPENAI_KEY, http_client=wire.client(), reasoning_effort="low"
    )
    official.complete(bare, Deltas())
    local = OpenAIProvider(
        "qwen3", api_key=OPENAI_KEY, base_url="http://127.0.0.1:1/v1", http_client=wire.client()
    )
    local.complete(bare, Deltas())
    capped = OpenAIProvider(
        "qwen3",
        api_key=OPENAI_KEY,
        base_url="http://127.0.0.1:1/v1",
        http_client=wire.client(),
        max_output_tokens=512,
    )
    capped.complete(bare, Deltas())

    # At OpenAI, max_completion_tokens counts reasoning: none is sent unless asked for.
    assert "max_completion_tokens" not in wire.body(0)
    assert wire.body(0)["reasoning_effort"] == "low"
    assert wire.body(1)["max_tokens"] == 8192
    assert "reasoning_effort" not in wire.body(1)
    assert wire.body(2)["max_tokens"] == 512
