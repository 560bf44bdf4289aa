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

from bubu.providers.anthropic import API_VERSION, AnthropicProvider, stream_events
from bubu.providers.base import ModelRequest, ToolSpec, UserMessage

from .wire import ANTHROPIC_KEY, Deltas, Wire, fixture, sse

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
    AnthropicProvider("claude-haiku-4-5", api_key=ANTHROPIC_KEY, http_client=ours.client(),
                      thinking_budget=2048).complete(REQUEST, Deltas())  # fmt: skip
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
        client = anthropic.Anthropic(api_key=ANTHROPIC_KEY, http_client=theirs.client(),
                                     max_retries=0)  # fmt: skip
        with client.messages.create(model="m", max_tokens=1, messages=[], stream=True) as stream:
            expected = [event.to_dict(mode="json") for event in stream]
        ours = Wire([sse(name)])
        from bubu.providers import _wire

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
