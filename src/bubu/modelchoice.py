"""The model a run uses when none is named: the configured one, else one picked from the API keys
present (the command line, the web UI and the Python API ask the same way)."""

from __future__ import annotations

import os

from bubu.errors import ConfigError

DEFAULT_MODEL_ENV = "BUBU_MODEL"
OFFLINE_CHAT = "`bubu chat -m scripted:answers.jsonl`"
"""The chat that needs no key and no network, named wherever a model is missing."""


def default_model(configured: str | None = None, *, unsaid: str | None = None) -> str:
    """The configured model (BUBU_MODEL, a profile or a config file), else one picked from the
    API keys present; `unsaid` is the line about ignored workspace keys, which says why a
    workspace's model did not count."""
    if configured:
        return configured
    if os.environ.get(DEFAULT_MODEL_ENV):
        return os.environ[DEFAULT_MODEL_ENV]
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-sonnet-5-5"
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        return "openai:gpt-5"
    said = f" ({unsaid})" if unsaid else ""
    raise ConfigError(
        "no model given: pass -m provider:model (e.g. -m anthropic:claude-sonnet-5-5, "
        "-m openai:gpt-5, -m scripted:FILE) or set BUBU_MODEL; without a key, "
        f"{OFFLINE_CHAT} chats offline, each answer a line of a JSONL file "
        "(docs/interactive.md#offline-a-scripted-chat), and `bubu demo` shows a whole run"
        f"{said}"
    )


__all__ = ["DEFAULT_MODEL_ENV", "OFFLINE_CHAT", "default_model"]
