"""Identifiers: short, time-ordered, collision-resistant strings with a readable prefix."""

from __future__ import annotations

import os
import time
from typing import NewType

SessionId = NewType("SessionId", str)
TurnId = NewType("TurnId", str)
RunId = NewType("RunId", str)
InvocationId = NewType("InvocationId", str)
EventId = NewType("EventId", str)

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def _b32(n: int, width: int) -> str:
    out = []
    for _ in range(width):
        out.append(_ALPHABET[n & 31])
        n >>= 5
    return "".join(reversed(out))


def new_id(prefix: str) -> str:
    """A new id like ``ses_01jq3z8k2m4x7v9c``: 48 bits of milliseconds, then 50 random bits."""
    ms = time.time_ns() // 1_000_000
    rnd = int.from_bytes(os.urandom(7), "big") >> 6
    return f"{prefix}_{_b32(ms, 10)}{_b32(rnd, 10)}"


def derived_id(prefix: str, key: str) -> str:
    """An id of the same shape as `new_id`'s, derived from `key` alone: the same key always
    names the same thing (a sub-agent's session, from its parent and call)."""
    import hashlib

    n = int.from_bytes(hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()[:13], "big")
    return f"{prefix}_{_b32(n >> 4, 20)}"


def session_id() -> SessionId:
    """A new session id."""
    return SessionId(new_id("ses"))


def turn_id() -> TurnId:
    """A new turn id."""
    return TurnId(new_id("trn"))


def run_id() -> RunId:
    """A new run id."""
    return RunId(new_id("run"))


def invocation_id() -> InvocationId:
    """A new invocation id."""
    return InvocationId(new_id("inv"))


def event_id() -> EventId:
    """A new event id."""
    return EventId(new_id("evt"))
