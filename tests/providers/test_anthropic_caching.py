"""Anthropic prompt caching that holds over a long tool run: a one-hour TTL on every breakpoint
(the stable prefix and the rolling tail), cache writes and reads counted and priced, and the
output cap (`--max-output-tokens`) as sent."""

from __future__ import annotations

from typing import Any

import pytest

from bubu import pricing
from bubu.errors import ConfigError
from bubu.providers import resolve
from bubu.providers.anthropic import AnthropicProvider
from bubu.providers.base import (
    AssistantMessage,
    ModelRequest,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolResultsMessage,
    ToolSpec,
    Usage,
    UserMessage,
)

from .wire import ANTHROPIC_KEY, Deltas, Wire, sse

HOUR = {"type": "ephemeral", "ttl": "1h"}
GREP = ToolSpec(name="grep", description="Search files.", parameters={"type": "object"})
LONG_RUN = ModelRequest(
    system="You are Bubu.",
    tools=(GREP,),
    messages=(
        UserMessage(text="task"),
        AssistantMessage(parts=(ToolCallPart(call_id="t0", name="grep", arguments={}),)),
        ToolResultsMessage(results=(ToolResultPart(call_id="t0", name="grep", content="a"),)),
        AssistantMessage(parts=(ToolCallPart(call_id="t1", name="grep", arguments={}),)),
        ToolResultsMessage(results=(ToolResultPart(call_id="t1", name="grep", content="b"),)),
    ),
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def provider(wire: Wire, **options: Any) -> AnthropicProvider:
    return AnthropicProvider(
        "claude-sonnet-4-5", api_key=ANTHROPIC_KEY, http_client=wire.client(), **options
    )


def breakpoints(body: dict[str, Any]) -> list[tuple[str, object]]:
    """Where the request's cache breakpoints are, and each one's cache_control."""
    found: list[tuple[str, object]] = []
    for i, block in enumerate(body.get("system") or []):
        if "cache_control" in block:
            found.append((f"system[{i}]", block["cache_control"]))
    for i, tool in enumerate(body.get("tools") or []):
        if "cache_control" in tool:
            found.append((f"tools[{i}]", tool["cache_control"]))
    for m, message in enumerate(body["messages"]):
        for b, block in enumerate(message["content"]):
            if "cache_control" in block:
                found.append((f"messages[{m}][{b}]", block["cache_control"]))
    return found


def test_a_one_hour_ttl_marks_the_prefix_and_the_rolling_tail() -> None:
    wire = Wire([sse("anthropic_cache_1h.sse")])
    provider(wire, cache_ttl="1h").complete(LONG_RUN, Deltas())
    # The system prompt closes the stable prefix (tools, then system); the two newest user turns
    # are the rolling tail: the last is written, the one before read back.
    assert breakpoints(wire.body()) == [
        ("system[0]", HOUR),
        ("messages[2][0]", HOUR),
        ("messages[4][0]", HOUR),
    ]


def test_without_a_ttl_the_breakpoints_are_the_default_five_minutes() -> None:
    wire = Wire([sse("anthropic_cache_1h.sse"), sse("anthropic_cache_1h.sse")])
    provider(wire).complete(LONG_RUN, Deltas())
    provider(wire, cache_ttl="5m").complete(LONG_RUN, Deltas())
    for n in (0, 1):
        assert [where for where, _ in breakpoints(wire.body(n))] == [
            "system[0]",
            "messages[2][0]",
            "messages[4][0]",
        ]
        assert all(control == {"type": "ephemeral"} for _, control in breakpoints(wire.body(n)))


def test_without_a_system_prompt_the_last_tool_carries_the_long_breakpoint() -> None:
    wire = Wire([sse("anthropic_cache_1h.sse")])
    bare = ModelRequest(system="", tools=(GREP,), messages=(UserMessage(text="task"),))
    provider(wire, cache_ttl="1h").complete(bare, Deltas())
    assert breakpoints(wire.body()) == [("tools[0]", HOUR), ("messages[0][0]", HOUR)]


def test_cache_reads_and_one_hour_writes_are_counted_and_priced() -> None:
    wire = Wire([sse("anthropic_cache_1h.sse")])
    response = provider(wire, cache_ttl="1h").complete(LONG_RUN, Deltas())
    assert response.parts == (TextPart(text="Still cached."),)
    assert response.usage == Usage(
        input_tokens=12 + 2048 + 10240,
        output_tokens=5,
        cache_read_tokens=10240,
        cache_write_tokens=2048,
        cache_write_1h_tokens=2048,
    )
    hour = pricing.usage_cost("anthropic:claude-sonnet-4-5", response.usage)
    five = pricing.usage_cost(
        "anthropic:claude-sonnet-4-5",
        Usage(
            input_tokens=12 + 2048 + 10240,
            output_tokens=5,
            cache_read_tokens=10240,
            cache_write_tokens=2048,
        ),
    )
    assert hour is not None
    assert five is not None
    # An hour-long write costs 2x the input price, a five-minute one 1.25x: 0.75x of 2048 tokens.
    assert hour - five == pytest.approx(2048 * 3.0 / 1e6 * 0.75)


def test_a_bad_cache_ttl_or_an_openai_option_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as ttl:
        AnthropicProvider("claude-sonnet-4-5", api_key=ANTHROPIC_KEY, cache_ttl="2h")
    assert "5m or 1h" in str(ttl.value)
    with pytest.raises(ConfigError) as effort:
        resolve("anthropic:claude-sonnet-4-5", reasoning_effort="high")
    assert "--thinking" in str(effort.value)
    for error in (ttl.value, effort.value):
        assert "\n" not in str(error)


def test_the_output_cap_leaves_room_for_thinking() -> None:
    wire = Wire([sse("anthropic_cache_1h.sse")] * 4)
    plain = ModelRequest(system="", tools=(), messages=(UserMessage(text="hi"),))
    provider(wire).complete(plain, Deltas())
    provider(wire, thinking_budget=4096).complete(plain, Deltas())
    provider(wire, max_output_tokens=64000, thinking_budget=16000).complete(plain, Deltas())
    provider(wire, max_output_tokens=20000).complete(plain, Deltas())
    assert [wire.body(n)["max_tokens"] for n in range(4)] == [8192, 8192 + 4096, 64000, 20000]
    with pytest.raises(ConfigError) as caught:
        AnthropicProvider(
            "claude-sonnet-4-5",
            api_key=ANTHROPIC_KEY,
            max_output_tokens=2048,
            thinking_budget=4096,
        )
    assert "above the thinking budget" in str(caught.value)
