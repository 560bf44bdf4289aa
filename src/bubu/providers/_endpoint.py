"""Where an HTTP provider's calls go, with which key, and by what name its failures speak of it.

Shared by the OpenAI and Anthropic adapters: the base URL comes from the caller or the
environment, the official API is the one without a base URL or at the vendor's own host, and the
key comes from the caller or the environment and is kept out of the log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from bubu import secrets
from bubu.errors import ConfigError
from bubu.providers import _retry

PLACEHOLDER_KEY = "not-needed"
"""The key sent when none is set away from the official API: local servers ignore it and a proxy
holds the credentials itself, but the SDKs insist on having one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """A provider's server and key: `base` is the base URL given (None: the official API's)."""

    base: str | None
    official: bool
    key: str
    key_env: str
    vendor_name: str

    def vendor(self, stall: float | None) -> _retry.Vendor:
        """Who the calls go to, as failures name it, with the key to keep out of them."""
        name = self.vendor_name
        if not self.official:
            name = f"the server at {_retry.display_url(self.base or '')}"
        return _retry.Vendor(
            name=name,
            key_env=self.key_env,
            secrets=(self.key,),
            stall_s=stall,
            official=self.official,
        )


class Closable(Protocol):
    """An SDK client: what a provider closes when its owner is done with it."""

    def close(self) -> None: ...


class AtEndpoint:
    """What a provider that calls a server says of where its calls go."""

    _official: bool
    _base_url: str
    _owned: Closable | None
    """The SDK client the provider made (None when the caller gave its own HTTP client)."""

    def close(self) -> None:
        """Close the SDK client the provider made and its pooled connections."""
        if self._owned is not None:
            self._owned.close()

    @property
    def official(self) -> bool:
        """Whether calls go to the provider's own API (whose prices are known)."""
        return self._official

    @property
    def base_url(self) -> str:
        """The server the calls go to (recorded with each turn, so a recovery asks the same)."""
        return self._base_url


def endpoint(
    base_url: str | None,
    api_key: str | None,
    *,
    base_env: str,
    host: str,
    key_env: str,
    vendor_name: str,
    missing: str,
) -> Endpoint:
    """The endpoint for a provider's `base_url` and `api_key` (else `base_env` and `key_env`).

    Without a key the official API (at `host`) is refused with the one line `missing`; any
    other server gets `PLACEHOLDER_KEY`."""
    base = base_url or os.environ.get(base_env) or None
    official = base is None or urlsplit(base).hostname == host
    key = api_key or os.environ.get(key_env)
    secrets.register(key_env, key)  # the key in use is kept out of the log
    if not key:
        if official:
            raise ConfigError(missing)
        key = PLACEHOLDER_KEY
    return Endpoint(base=base, official=official, key=key, key_env=key_env, vendor_name=vendor_name)
