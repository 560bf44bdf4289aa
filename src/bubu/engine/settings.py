"""The provider settings a turn runs with, recorded with it so that a later run gets them back.

A crashed turn is continued with the model, server, window, timeouts and limits it was started
with, never with the flags of whichever command happens to find it. Only a command that names the
session (`bubu recover SESSION`, `bubu resume SESSION`) may change them, flag by flag. A base URL
is recorded without its credentials (user info, query); when the environment's URL names the same
server, recovery uses that one, credentials and all, since the log never holds a key.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import msgspec

from bubu.errors import ConfigError
from bubu.events import SystemNote, TurnStarted
from bubu.log.store import Store
from bubu.providerfacts import OFFICIAL_HOSTS, SERVER_ENV

SERVER_PROVIDERS = SERVER_ENV
"""Providers that talk to a server, and the variable naming another one (their records,
`bubu.providerfacts`)."""

STALL_ENV = "BUBU_STALL_TIMEOUT"


class ModelSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How a host's provider was built, besides its model spec (recorded with each turn)."""

    base_url: str | None = None
    context_window: int | None = None
    thinking_budget: int | None = None
    stall_timeout: float | None = None
    reasoning_effort: str | None = None
    max_output_tokens: int | None = None
    cache_ttl: str | None = None
    native_tools: bool | None = None
    """The provider's own tool shapes on or off (None: on at the provider's own API only)."""


def public_url(url: str | None) -> str | None:
    """`url` without user info, query or fragment: what may be written to the log."""
    if not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def with_credentials(recorded: str, spec: str) -> str:
    """The recorded server, or the environment's URL for it when that names the same server
    (it may carry credentials the log does not hold)."""
    env = SERVER_PROVIDERS.get(spec.partition(":")[0])
    given = os.environ.get(env, "") if env else ""
    if given and public_url(given) == recorded:
        return given
    return recorded


def env_stall_timeout() -> float | None:
    """BUBU_STALL_TIMEOUT as a number, if it is one (the provider reports a bad value)."""
    try:
        return float(os.environ.get(STALL_ENV, ""))
    except ValueError:
        return None


def last_turn(store: Store, session: str) -> TurnStarted | None:
    """The settings recorded when the session's latest turn started (or was resumed)."""
    found: TurnStarted | None = None
    for r in store.read(session, kinds=("turn_started",)):
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, TurnStarted):
            found = c.note
    return found


def server_unknown(note: TurnStarted) -> bool:
    """The turn talks to a server, but which one was not recorded (an older Bubu started it)."""
    return note.base_url is None and note.model.partition(":")[0] in SERVER_PROVIDERS


def imported_server(note: TurnStarted | None, session: str) -> None:
    """Refuse to call the server an imported turn names, unless it is a vendor's official API:
    the log was written elsewhere, and this machine's key would go with the call."""
    if note is None or note.base_url is None:
        return
    if urlsplit(note.base_url).hostname in OFFICIAL_HOSTS:
        return
    raise ConfigError(
        f"session {session} was imported and its turn asked the server {note.base_url}, which "
        "Bubu does not call on an imported log's word; pass --base-url URL to say which server "
        "continues it"
    )


def user_window(note: TurnStarted) -> int | None:
    """The window the user set for the turn `note` started (None: the model's own was recorded,
    which a later run finds again; the turn's budgets keep using the recorded one)."""
    return note.context_window if note.window_source in (None, "--context-window") else None


def resolve_options(note: TurnStarted) -> dict[str, Any]:
    """The `bubu.providers.resolve` keywords that rebuild the provider `note` recorded."""
    return {
        "base_url": with_credentials(note.base_url, note.model) if note.base_url else None,
        "context_window": user_window(note),
        "thinking_budget": note.thinking_budget,
        "stall_timeout": note.stall_timeout,
        "reasoning_effort": note.reasoning_effort,
        "max_output_tokens": note.max_output_tokens,
        "cache_ttl": note.cache_ttl,
        "native_tools": note.native_tools,
    }


def recorded_model_settings(note: TurnStarted) -> ModelSettings:
    """The `ModelSettings` `note` recorded (so the next turn records them again)."""
    return ModelSettings(
        base_url=note.base_url,
        context_window=user_window(note),
        thinking_budget=note.thinking_budget,
        stall_timeout=note.stall_timeout,
        reasoning_effort=note.reasoning_effort,
        max_output_tokens=note.max_output_tokens,
        cache_ttl=note.cache_ttl,
        native_tools=note.native_tools,
    )


def continuing_opts(
    opts: Mapping[str, Any],
    explicit: Collection[str],
    note: TurnStarted | None,
    *,
    new_turn: bool = False,
) -> dict[str, Any]:
    """The command options for another run of a session whose latest turn recorded `note`:
    the recorded settings, except where the user gave a flag (`explicit` names them). A
    `new_turn` keeps only the model's settings; its limits are the command's own."""
    out = dict(opts)
    if note is None:
        return out
    model = opts.get("model") if "model" in explicit else None
    same_model = model is None or model == note.model
    out["model"] = model or note.model
    recorded: dict[str, object] = {"stall_timeout": note.stall_timeout}
    if not new_turn:
        recorded["tool_timeout"] = note.tool_timeout
        recorded["max_steps"] = None  # None: the limit recorded with the turn applies (`decide`)
    if same_model:
        # A server, window and thinking budget belong to the model they were set for.
        recorded["base_url"] = (
            with_credentials(note.base_url, note.model) if note.base_url else None
        )
        recorded["context_window"] = user_window(note)
        recorded["thinking"] = note.thinking_budget
        recorded["reasoning_effort"] = note.reasoning_effort
        recorded["max_output_tokens"] = note.max_output_tokens
        recorded["cache_ttl"] = note.cache_ttl
        recorded["native_tools"] = note.native_tools
    for key, value in recorded.items():
        if key not in explicit and (value is not None or key == "max_steps"):
            out[key] = value
    return out


__all__ = [
    "ModelSettings",
    "continuing_opts",
    "env_stall_timeout",
    "imported_server",
    "last_turn",
    "public_url",
    "recorded_model_settings",
    "resolve_options",
    "server_unknown",
    "with_credentials",
]
