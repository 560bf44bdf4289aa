"""The providers' own web search against hand-written wire fixtures: the server tool is offered
only when asked for; its call and results (Anthropic's `server_tool_use` and
`web_search_tool_result` blocks, the Responses API's `web_search_call` item) come back as model
text that says what was searched and keeps the native form, which goes back on the wire byte
for byte, in the model's order; through the engine they are events in the log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bubu.engine.session import Host, new_session, start_turn
from bubu.events import Text
from bubu.log.sqlite import SQLiteStore
from bubu.providers.anthropic import AnthropicProvider
from bubu.providers.base import AssistantMessage, ModelRequest, TextPart, UserMessage
from bubu.providers.openai_responses import OpenAIResponsesProvider

from .wire import ANTHROPIC_KEY, OPENAI_KEY, Deltas, Wire, fixture, sse

REQUEST = ModelRequest(
    system="You are Bubu.", tools=(), messages=(UserMessage(text="Latest httpx2?"),)
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def _body(wire: Wire, n: int) -> dict[str, Any]:
    return dict(json.loads(wire.requests[n].content))


def _sent_blocks(name: str) -> list[dict[str, Any]]:
    """The content blocks of a fixture's content_block_start events, as sent."""
    out = []
    for block in fixture(name).decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and '"content_block_start"' in line:
                out.append(json.loads(line[6:])["content_block"])
    return out


def _anthropic(wire: Wire, *, search: bool) -> AnthropicProvider:
    p = AnthropicProvider("claude-haiku-4-5", api_key=ANTHROPIC_KEY, http_client=wire.client())
    p.web_search = search
    return p


def test_anthropic_offers_its_web_search_only_when_asked() -> None:
    wire = Wire([sse("anthropic_text.sse"), sse("anthropic_text.sse")])
    _anthropic(wire, search=False).complete(REQUEST, Deltas())
    assert "tools" not in _body(wire, 0)
    _anthropic(wire, search=True).complete(REQUEST, Deltas())
    assert _body(wire, 1)["tools"] == [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    ]


def test_anthropic_server_tool_blocks_are_kept_and_replayed_in_order() -> None:
    wire = Wire([sse("anthropic_web_search.sse"), sse("anthropic_text.sse")])
    adapter = _anthropic(wire, search=True)
    response = adapter.complete(REQUEST, Deltas())
    _, use, result, _ = _sent_blocks("anthropic_web_search.sse")
    said, call, found, answer = response.parts
    assert said == TextPart(text="Let me look that up.")
    assert call == TextPart(
        text="[searched the web for 'httpx2 latest release']",
        native={"anthropic": {**use, "input": {"query": "httpx2 latest release"}}},
    )
    assert isinstance(found, TextPart)
    assert found.native == {"anthropic": result}
    assert found.text.splitlines() == [
        "[web search results]",
        "- Release notes - httpx2 <https://httpx2.example.org/changelog/>",
        "- httpx2 on the package index <https://pypi.example.org/project/httpx2/>",
    ]
    assert answer == TextPart(text="The latest release is 2.16.")
    assert response.stop_reason == "end_turn"

    follow = ModelRequest(
        system=REQUEST.system,
        tools=(),
        messages=(
            *REQUEST.messages,
            AssistantMessage(parts=response.parts),
            UserMessage(text="And the one before?"),
        ),
    )
    adapter.complete(follow, Deltas())
    assistant = _body(wire, 1)["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == [
        {"type": "text", "text": "Let me look that up."},
        {**use, "input": {"query": "httpx2 latest release"}},
        result,  # encrypted_content and all, byte for byte
        {"type": "text", "text": "The latest release is 2.16."},
    ]


def _responses(wire: Wire, *, search: bool) -> OpenAIResponsesProvider:
    p = OpenAIResponsesProvider("gpt-5", api_key=OPENAI_KEY, http_client=wire.client())
    p.web_search = search
    return p


def test_responses_web_search_call_is_kept_and_replayed() -> None:
    wire = Wire([sse("responses_web_search.sse"), sse("responses_text.sse")])
    adapter = _responses(wire, search=True)
    response = adapter.complete(REQUEST, Deltas())
    assert {"type": "web_search"} in _body(wire, 0)["tools"]
    call, answer = response.parts
    assert isinstance(call, TextPart)
    assert call.text == "[searched the web for 'httpx2 latest release']"
    native = call.native["openai_responses"]  # type: ignore[index]
    assert native["id"] == "ws_68a1f0c3a2c88190b5e0d3f1a6c4b2e90d4e"
    assert native["action"] == {"type": "search", "query": "httpx2 latest release"}
    assert answer == TextPart(text="The latest release is 2.16.")

    follow = ModelRequest(
        system=REQUEST.system,
        tools=(),
        messages=(
            *REQUEST.messages,
            AssistantMessage(parts=response.parts),
            UserMessage(text="And the one before?"),
        ),
    )
    adapter.complete(follow, Deltas())
    sent = _body(wire, 1)["input"]
    assert sent[1] == native
    assert sent[2] == {"role": "assistant", "content": "The latest release is 2.16."}


def test_responses_offers_no_search_unless_asked() -> None:
    wire = Wire([sse("responses_text.sse")])
    _responses(wire, search=False).complete(REQUEST, Deltas())
    assert "tools" not in _body(wire, 0)


def test_the_search_is_in_the_log_and_goes_back_from_it(tmp_path: Path) -> None:
    """Through the engine: the search's call and results are model events with their native
    form, and the next request, built from the log, sends them back as they came."""
    wire = Wire([sse("anthropic_web_search.sse"), sse("anthropic_text.sse")])
    adapter = _anthropic(wire, search=True)
    with SQLiteStore(tmp_path / "bubu.db") as store:
        host = Host(store=store, provider=adapter, tools={})
        info = new_session(store, task="t", workspace=tmp_path, model=adapter.spec)
        assert start_turn(host, info, "Latest httpx2?") == "completed"
        assert start_turn(host, info, "And the one before?") == "completed"
        records = store.read(info.id)
    natives = [c.native for r in records if isinstance(c := r.event.content, Text) and c.native]
    _, use, result, _ = _sent_blocks("anthropic_web_search.sse")
    assert natives == [
        {"anthropic": {**use, "input": {"query": "httpx2 latest release"}}},
        {"anthropic": result},
    ]
    replayed = _body(wire, 1)["messages"][1]["content"]
    assert replayed[1:3] == [natives[0]["anthropic"], natives[1]["anthropic"]]


def test_a_paused_turn_is_sent_back_and_continued_into_one_response() -> None:
    """`pause_turn`: the server stopped between its searches; the paused content goes back as
    the assistant's turn, and the continuation's blocks follow it in one response."""
    wire = Wire([sse("anthropic_web_search_paused.sse"), sse("anthropic_text.sse")])
    response = _anthropic(wire, search=True).complete(REQUEST, Deltas())
    assert [p.text for p in response.parts if isinstance(p, TextPart)][::3] == [
        "Let me look that up.",
        "Hello, wörld.\n",
    ]
    assert len(response.parts) == 4
    assert response.stop_reason == "end_turn"
    assert response.usage.output_tokens == 120 + 15
    _, use, result = _sent_blocks("anthropic_web_search_paused.sse")
    again = _body(wire, 1)["messages"]
    assert again[-1]["role"] == "assistant"
    assert again[-1]["content"] == [
        {"type": "text", "text": "Let me look that up."},
        {**use, "input": {"query": "httpx2 latest release"}},
        result,
    ]
