"""Model providers behind one seam, resolved from a spec like ``anthropic:claude-sonnet-5-5``.

The part before the colon names a provider registered in the ``bubu.providers`` entry-point group
(`bubu.plugins`); the built-in ones below are registered through that same seam.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from importlib.metadata import EntryPoint
from typing import Any, TypedDict, Unpack
from urllib.parse import urlsplit

from bubu.errors import ConfigError
from bubu.providerfacts import NAMES
from bubu.providers.base import Provider
from bubu.windowfacts import SCRIPTED_WINDOW

PROVIDERS = NAMES
"""The built-in provider names (`bubu.providerfacts` holds their records)."""


class ProviderOptions(TypedDict, total=False):
    """The options `resolve` passes a provider factory (only those given); a factory ignores
    the ones it does not take, and any others."""

    base_url: str | None
    context_window: int | None
    thinking_budget: int | None
    stall_timeout: float | None
    reasoning_effort: str | None
    max_output_tokens: int | None
    cache_ttl: str | None
    native_tools: bool | None
    """The provider's own tool shapes on or off (None: on at the provider's own API only)."""


def scripted_provider(model: str, /, **options: Unpack[ProviderOptions]) -> Provider:
    """``scripted:PATH``: replay a JSONL script (DESIGN §9)."""
    from bubu.providers.scripted import ScriptedProvider

    return ScriptedProvider(model, window=options.get("context_window") or SCRIPTED_WINDOW)


def _openai_options(options: ProviderOptions) -> dict[str, Any]:
    # What the OpenAI providers take of the options, the base URL from OPENAI_BASE_URL too.
    return {
        "base_url": options.get("base_url") or os.environ.get("OPENAI_BASE_URL"),
        "context_window": options.get("context_window"),
        "stall_timeout": options.get("stall_timeout"),
        "reasoning_effort": options.get("reasoning_effort"),
        "max_output_tokens": options.get("max_output_tokens"),
    }


def openai_provider(model: str, /, **options: Unpack[ProviderOptions]) -> Provider:
    """``openai:MODEL``: the Responses API at OpenAI; Chat Completions at any other server
    (``--base-url`` / OPENAI_BASE_URL), which is what compatible servers speak."""
    chosen = _openai_options(options)
    url = chosen["base_url"]
    if url and urlsplit(url).hostname != "api.openai.com":
        from bubu.providers.openai import OpenAIProvider

        return OpenAIProvider(model, **chosen)
    from bubu.providers.openai_responses import OpenAIResponsesProvider

    return OpenAIResponsesProvider(model, **chosen, native_tools=options.get("native_tools"))


def openai_chat_provider(model: str, /, **options: Unpack[ProviderOptions]) -> Provider:
    """``openai-chat:MODEL``: Chat Completions, at OpenAI or at any compatible server."""
    from bubu.providers.openai import OpenAIProvider

    return OpenAIProvider(model, **_openai_options(options), spec_name="openai-chat")


def openai_responses_provider(model: str, /, **options: Unpack[ProviderOptions]) -> Provider:
    """``openai-responses:MODEL``: the Responses API at any server that speaks it (a proxy,
    Azure), as ``openai:MODEL`` speaks it at OpenAI."""
    from bubu.providers.openai_responses import OpenAIResponsesProvider

    return OpenAIResponsesProvider(
        model,
        **_openai_options(options),
        spec_name="openai-responses",
        native_tools=options.get("native_tools"),
    )


def anthropic_provider(model: str, /, **options: Unpack[ProviderOptions]) -> Provider:
    """``anthropic:MODEL``: the Anthropic Messages API."""
    from bubu.providers.anthropic import AnthropicProvider

    if options.get("reasoning_effort") is not None:
        raise ConfigError(
            "--reasoning-effort is for OpenAI reasoning models; a Claude model thinks with "
            "--thinking TOKENS"
        )
    return AnthropicProvider(
        model,
        base_url=options.get("base_url"),
        context_window=options.get("context_window"),
        thinking_budget=options.get("thinking_budget"),
        stall_timeout=options.get("stall_timeout"),
        max_output_tokens=options.get("max_output_tokens"),
        cache_ttl=options.get("cache_ttl"),
        native_tools=options.get("native_tools"),
    )


def resolve(
    spec: str,
    *,
    base_url: str | None = None,
    context_window: int | None = None,
    thinking_budget: int | None = None,
    stall_timeout: float | None = None,
    reasoning_effort: str | None = None,
    max_output_tokens: int | None = None,
    cache_ttl: str | None = None,
    native_tools: bool | None = None,
    entry_points: Iterable[EntryPoint] | None = None,
) -> Provider:
    """The provider for `spec` (``scripted:PATH``, ``openai:MODEL``, ``anthropic:MODEL``, or
    ``NAME:MODEL`` of a plugin); options left at None are not passed to the factory."""
    from bubu.plugins import provider_factory

    name, sep, model = spec.partition(":")
    if not sep or not name or not model:
        raise ConfigError(
            f"the model spec {spec!r} is not provider:model; e.g. anthropic:claude-sonnet-5-5, "
            "openai:gpt-5, or scripted:PATH"
        )
    options = {
        key: value
        for key, value in (
            ("base_url", base_url),
            ("context_window", context_window),
            ("thinking_budget", thinking_budget),
            ("stall_timeout", stall_timeout),
            ("reasoning_effort", reasoning_effort),
            ("max_output_tokens", max_output_tokens),
            ("cache_ttl", cache_ttl),
            ("native_tools", native_tools),
        )
        if value is not None
    }
    factory = provider_factory(name, entry_points)
    provider = factory(model, **options)
    for attr in ("spec", "context_window", "complete"):
        if not hasattr(provider, attr):
            raise ConfigError(
                f"the model provider {name!r} returned {type(provider).__name__}, which lacks "
                f"{attr!r}; it is not a Bubu provider (fix or uninstall its plugin)"
            )
    return provider


__all__ = [
    "PROVIDERS",
    "Provider",
    "ProviderOptions",
    "anthropic_provider",
    "openai_chat_provider",
    "openai_provider",
    "openai_responses_provider",
    "resolve",
    "scripted_provider",
]
