"""Model providers behind one seam, resolved from a spec like ``anthropic:claude-sonnet-5-5``."""

from __future__ import annotations

import os

from bubu.errors import ConfigError
from bubu.providers.base import Provider

PROVIDERS = ("scripted", "openai", "anthropic")


def resolve(
    spec: str,
    *,
    base_url: str | None = None,
    context_window: int | None = None,
    thinking_budget: int | None = None,
) -> Provider:
    """The provider for `spec` (``scripted:PATH``, ``openai:MODEL``, ``anthropic:MODEL``)."""
    name, sep, model = spec.partition(":")
    if not sep or not model:
        raise ConfigError(
            f"the model spec {spec!r} is not provider:model; e.g. anthropic:claude-sonnet-5-5, "
            "openai:gpt-5, or scripted:PATH"
        )
    if name == "scripted":
        from bubu.providers.scripted import ScriptedProvider

        return ScriptedProvider(model, window=context_window or 200_000)
    if name == "openai":
        from bubu.providers.openai import OpenAIProvider

        url = base_url or os.environ.get("OPENAI_BASE_URL")
        return OpenAIProvider(model, base_url=url, context_window=context_window)
    if name == "anthropic":
        from bubu.providers.anthropic import AnthropicProvider

        return AnthropicProvider(
            model, base_url=base_url, context_window=context_window, thinking_budget=thinking_budget
        )
    raise ConfigError(f"unknown model provider {name!r}; known: {', '.join(PROVIDERS)}")
