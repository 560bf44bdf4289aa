"""Session-unique call ids: some OpenAI-compatible servers reuse one id (`call_0`) for several
calls of a response and across responses, and the log pairs each outcome to its call by id.

A call keeps the provider's id when the session has not seen it; otherwise it gets the first
free `<id>_<n>`, and the provider's id is kept beside it (`FunctionCall.provider_id`). The
request sent back names every call, and its result, by the session's id: the provider gets one
consistent id per call, made of the characters every provider accepts in a call id.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def unique_call_id(provider_id: str, taken: set[str]) -> str:
    """The id a call is known by in the session: the provider's own when it is free, else the
    first free `<id>_<n>` (n from 2); the caller adds it to `taken`."""
    if provider_id and provider_id not in taken:
        return provider_id
    base = _UNSAFE.sub("_", provider_id)[:48] or "call"
    n = 2
    while f"{base}_{n}" in taken:
        n += 1
    return f"{base}_{n}"
