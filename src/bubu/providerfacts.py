"""What Bubu knows of each built-in provider, in one record per provider: the name a model spec
starts with, the factory its entry point names, the variable that names another server, the
`genai-prices` id its official API is priced as, and the host of that official API.

The tables other parts read (the built-in entry points of `bubu.plugins`, the providers that
talk to a server of `bubu.engine.settings`, the priced ones of `bubu.pricing`) are made from these
records. A plugin's provider registers through its entry point alone (`bubu.plugins`): it is not
priced unless the user configures a price, and has no server variable. This module imports
nothing heavy: the read-only commands that price a session load it.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec


class ProviderRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One built-in provider's registration (see the module docstring); `base_url_env` is None
    for a provider that calls no server (the scripted model)."""

    name: str
    factory: str
    base_url_env: str | None = None
    pricing_id: str | None = None
    official_host: str | None = None


BUILTIN_PROVIDERS: tuple[ProviderRecord, ...] = (
    ProviderRecord(name="scripted", factory="bubu.providers:scripted_provider"),
    ProviderRecord(
        name="openai",
        factory="bubu.providers:openai_provider",
        base_url_env="OPENAI_BASE_URL",
        pricing_id="openai",
        official_host="api.openai.com",
    ),
    ProviderRecord(
        name="openai-chat",
        factory="bubu.providers:openai_chat_provider",
        base_url_env="OPENAI_BASE_URL",
        pricing_id="openai",
        official_host="api.openai.com",
    ),
    ProviderRecord(
        name="openai-responses",
        factory="bubu.providers:openai_responses_provider",
        base_url_env="OPENAI_BASE_URL",
        pricing_id="openai",
        official_host="api.openai.com",
    ),
    ProviderRecord(
        name="anthropic",
        factory="bubu.providers:anthropic_provider",
        base_url_env="ANTHROPIC_BASE_URL",
        pricing_id="anthropic",
        official_host="api.anthropic.com",
    ),
)
"""The built-in providers: one line each (a new one adds its record here and its entry point
in pyproject.toml, which must agree)."""

BY_NAME: Mapping[str, ProviderRecord] = {r.name: r for r in BUILTIN_PROVIDERS}

NAMES: tuple[str, ...] = tuple(BY_NAME)
"""The built-in provider names."""

ENTRY_POINTS: Mapping[str, str] = {r.name: r.factory for r in BUILTIN_PROVIDERS}
"""The built-in `bubu.providers` entry points, by name."""

SERVER_ENV: Mapping[str, str] = {
    r.name: r.base_url_env for r in BUILTIN_PROVIDERS if r.base_url_env is not None
}
"""Providers that talk to a server, and the variable naming another one."""

PRICING_IDS: Mapping[str, str] = {
    r.name: r.pricing_id for r in BUILTIN_PROVIDERS if r.pricing_id is not None
}
"""Provider names, by the `genai-prices` provider id their official APIs are priced as."""

OFFICIAL_HOSTS: frozenset[str] = frozenset(
    r.official_host for r in BUILTIN_PROVIDERS if r.official_host is not None
)
"""The vendors' own API hosts."""


__all__ = [
    "BUILTIN_PROVIDERS",
    "BY_NAME",
    "ENTRY_POINTS",
    "NAMES",
    "OFFICIAL_HOSTS",
    "PRICING_IDS",
    "SERVER_ENV",
    "ProviderRecord",
]
