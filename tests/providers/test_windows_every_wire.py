"""One default window for an unknown model on every wire, and a source named only when it stated
the figure: the real adapters against a real local server that states no window."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bubu.providers.anthropic import AnthropicProvider
from bubu.providers.base import Provider, close_provider
from bubu.providers.openai import OpenAIProvider
from bubu.providers.openai_responses import OpenAIResponsesProvider
from bubu.providers.windows import UNKNOWN, UNKNOWN_WINDOW, Window

from .servers import json_file, serve

ADAPTERS: dict[str, Callable[[str], Provider]] = {
    "chat": lambda url: OpenAIProvider("local-model", base_url=f"{url}/v1"),
    "messages": lambda url: AnthropicProvider("local-model", base_url=url),
    "responses": lambda url: OpenAIResponsesProvider("local-model", base_url=f"{url}/v1"),
}


@pytest.mark.parametrize("wire", list(ADAPTERS))
def test_an_unknown_model_gets_the_one_documented_default_on_every_wire(wire: str) -> None:
    with serve({}) as s:  # a proxy that states no window (404 to every probe)
        provider: Provider = ADAPTERS[wire](s.url)
        try:
            found = (provider.context_window, provider.context_window_source)  # type: ignore[attr-defined]
        finally:
            close_provider(provider)
    assert found == (UNKNOWN_WINDOW, UNKNOWN)
    assert Window(*found).describe() == "32,768 tokens (default: unknown model)"


@pytest.mark.parametrize("wire", ["chat", "responses"])
def test_a_window_the_server_states_is_named_with_its_source(wire: str) -> None:
    models = json_file("vllm_models.json")
    with serve({("GET", "/v1/models"): models}) as s:
        provider: Provider = ADAPTERS[wire](s.url)
        try:
            source = provider.context_window_source  # type: ignore[attr-defined]
        finally:
            close_provider(provider)
    assert source != UNKNOWN
    assert "model provider" not in source


def test_claudes_documented_window_holds_at_anthropics_own_api_only() -> None:
    official = AnthropicProvider("claude-some-new-model", api_key="sk-ant-test-0123456789")
    assert (official.context_window, official.context_window_source) == (
        200_000,
        "default: every Claude model has 200k",
    )
    close_provider(official)
