"""The adapters speak the wire themselves; the official SDKs are the reference they must equal.

Each test sends the same request through the adapter and through the SDK over the same mock
transport, and compares what reached the wire (method, URL, the headers that carry meaning, the
JSON body) and what each read back from the same fixture stream.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from bubu.providers import _wire
from bubu.providers.anthropic import API_VERSION, AnthropicProvider, stream_events
from bubu.providers.base import ModelRequest, ToolSpec, UserMessage
from bubu.providers.openai import OpenAIProvider, openai_client, openai_endpoint, stream_data
from bubu.providers.openai_responses import OpenAIResponsesProvider

from .wire import ANTHROPIC_KEY, OPENAI_KEY, Deltas, Wire, fixture, sse, status

MEANINGFUL = (
    "authorization",
    "anthropic-version",
    "content-type",
    "accept",
    "x-stainless-retry-count",
)
REQUEST = ModelRequest(
    system="You are Bubu.",
    tools=(ToolSpec(name="grep", description="Search files.", parameters={"type": "object"}),),
    messages=(UserMessage(text="Fix the failing tést."),),
    max_tokens=1000,
)


def _seen(request: httpx2.Request) -> tuple[str, str, dict[str, str], Any]:
    headers = {k: v for k, v in request.headers.items() if k in MEANINGFUL}
    return request.method, str(request.url), headers, json.loads(request.content)


def test_anthropic_request_equals_the_sdks() -> None:
    ours = Wire([sse("anthropic_text.sse")])
    AnthropicProvider(
        "claude-haiku-4-5", api_key=ANTHROPIC_KEY, http_client=ours.client(), thinking_budget=2048
    ).complete(REQUEST, Deltas())
    body = json.loads(ours.requests[0].content)
    theirs = Wire([sse("anthropic_text.sse")])
    client = anthropic.Anthropic(api_key=ANTHROPIC_KEY, http_client=theirs.client(), max_retries=0)
    with client.messages.create(**{k: v for k, v in body.items() if k != "stream"}, stream=True):
        pass
    assert _seen(ours.requests[0]) == _seen(theirs.requests[0])
    assert ours.requests[0].headers["anthropic-version"] == API_VERSION


def test_anthropic_events_read_as_the_sdk_reads_them() -> None:
    for name in ("anthropic_thinking.sse", "anthropic_tool_use.sse", "anthropic_cache_1h.sse"):
        theirs = Wire([sse(name)])
        client = anthropic.Anthropic(
            api_key=ANTHROPIC_KEY, http_client=theirs.client(), max_retries=0
        )
        with client.messages.create(model="m", max_tokens=1, messages=[], stream=True) as stream:
            expected = [event.to_dict(mode="json") for event in stream]
        ours = Wire([sse(name)])
        wire = _wire.Wire(ours.client(), "https://api.anthropic.com", {}, timeout=None)
        with stream_events(wire, {}) as events:
            got = [dict(event) for event in events]
        # The SDK's models fill documented fields the stream left out with their defaults.
        assert [_without_nulls(e) for e in expected] == [_without_nulls(e) for e in got], name
    assert fixture("anthropic_text.sse")


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


OPENAI_CASES = [
    ("chat/completions", "openai_text.sse"),
    ("chat/completions", "openai_parallel_tool_calls.sse"),
    ("chat/completions", "openai_compatible_reasoning.sse"),
    ("responses", "responses_reasoning_tool_calls.sse"),
    ("responses", "responses_apply_patch.sse"),
]


def _sdk_openai(wire: Wire) -> openai.OpenAI:
    return openai.OpenAI(
        api_key=OPENAI_KEY,
        base_url="http://127.0.0.1:1/v1",
        http_client=wire.client(),
        max_retries=0,
    )


@pytest.mark.parametrize(("path", "name"), OPENAI_CASES)
def test_openai_streams_read_as_the_sdk_reads_them(path: str, name: str) -> None:
    theirs = Wire([sse(name)])
    client = _sdk_openai(theirs)
    if path == "responses":
        stream: Any = client.responses.create(model="m", input=[], stream=True)
    else:
        stream = client.chat.completions.create(model="m", messages=[], stream=True)
    with stream:
        expected = [item.to_dict(mode="json") for item in stream]
    ours = Wire([sse(name)])
    wire = _wire.Wire(ours.client(), "http://127.0.0.1:1/v1", {}, timeout=None)
    with stream_data(wire, path, {}) as items:
        got = [dict(item) for item in items]
    assert [_without_nulls(e) for e in expected] == [_without_nulls(e) for e in got]
    assert ours.requests[0].url == theirs.requests[0].url


@pytest.mark.parametrize("official", [True, False])
def test_openai_chat_request_equals_the_sdks(official: bool) -> None:
    base = None if official else "http://127.0.0.1:1/v1"
    ours = Wire([sse("openai_text.sse")])
    OpenAIProvider(
        "gpt-4.1-mini",
        api_key=OPENAI_KEY,
        base_url=base,
        http_client=ours.client(),
        reasoning_effort="low",
    ).complete(REQUEST, Deltas())
    body = json.loads(ours.requests[0].content)
    theirs = Wire([sse("openai_text.sse")])
    client = openai.OpenAI(
        api_key=OPENAI_KEY, base_url=base, http_client=theirs.client(), max_retries=0
    )
    with client.chat.completions.create(**body):
        pass
    assert _seen(ours.requests[0]) == _seen(theirs.requests[0])


def test_openai_responses_request_equals_the_sdks() -> None:
    ours = Wire([sse("responses_text.sse")])
    OpenAIResponsesProvider("gpt-5", api_key=OPENAI_KEY, http_client=ours.client()).complete(
        REQUEST, Deltas()
    )
    body = json.loads(ours.requests[0].content)
    theirs = Wire([sse("responses_text.sse")])
    with (
        _sdk_openai(theirs)
        .with_options(base_url="https://api.openai.com/v1")
        .responses.create(**body)
    ):
        pass
    assert _seen(ours.requests[0]) == _seen(theirs.requests[0])


@pytest.mark.parametrize("name", ["openai_429.json", "openai_429_quota.json", "openai_401.json"])
def test_openai_status_errors_carry_what_the_sdks_carry(name: str) -> None:
    theirs = Wire([status(429, name, headers={"retry-after": "3"})])
    with pytest.raises(openai.APIStatusError) as sdk:
        _sdk_openai(theirs).chat.completions.create(model="m", messages=[], stream=True)
    ours = Wire([status(429, name, headers={"retry-after": "3"})])
    wire = openai_client(openai_endpoint("http://127.0.0.1:1/v1", OPENAI_KEY), None, ours.client())
    with pytest.raises(_wire.APIStatusError) as got:
        stream_data(wire[1], "chat/completions", {})
    assert (got.value.status_code, got.value.body, got.value.code) == (
        sdk.value.status_code,
        sdk.value.body,
        sdk.value.code,
    )
    assert got.value.response.headers["retry-after"] == "3"


def test_anthropic_status_errors_carry_what_the_sdks_carry() -> None:
    theirs = Wire([status(529, "anthropic_529.json")])
    client = anthropic.Anthropic(api_key=ANTHROPIC_KEY, http_client=theirs.client(), max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as sdk:
        client.messages.create(model="m", max_tokens=1, messages=[], stream=True)
    ours = Wire([status(529, "anthropic_529.json")])
    wire = _wire.Wire(ours.client(), "https://api.anthropic.com", {}, timeout=None)
    with pytest.raises(_wire.APIStatusError) as got:
        stream_events(wire, {})
    assert (got.value.status_code, got.value.body) == (sdk.value.status_code, sdk.value.body)


def test_a_given_clients_timeouts_are_chosen_as_the_sdks_choose_them() -> None:
    for given in (httpx2.Client(), httpx2.Client(timeout=30)):
        with given:
            ours = AnthropicProvider("claude-haiku-4-5", api_key=ANTHROPIC_KEY, http_client=given)
            sdk = anthropic.Anthropic(api_key=ANTHROPIC_KEY, http_client=given, max_retries=0)
            assert ours._client.timeout == sdk.timeout
            chat = OpenAIProvider("gpt-4.1-mini", api_key=OPENAI_KEY, http_client=given)
            assert (
                chat._client.timeout == openai.OpenAI(api_key=OPENAI_KEY, http_client=given).timeout
            )
