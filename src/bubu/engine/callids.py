"""Session-unique call ids: some OpenAI-compatible servers reuse one id (`call_0`) for several
calls of a response and across responses, and the log pairs each outcome to its call by id.

A call keeps the provider's id when the session has not seen it; otherwise it gets the first
free `<id>_<n>`, and the provider's id is kept beside it (`FunctionCall.provider_id`). The
request sent back names every call, and its result, by the session's id: the provider gets one
consistent id per call, made of the characters every provider accepts in a call id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Container

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class CallIds:
    """The call ids a session has used, held in little memory however many there are: the
    newest `RECENT` exactly, every one in a Bloom filter. A false positive (about 1 in 200,000
    at 100,000 ids) only makes a fresh id look taken, so the call gets `<id>_<n>` and the log
    records both, as for an id a server reused: ids stay unique, and the same log gives the
    same answers."""

    RECENT = 4096
    BITS = 1 << 23
    """The filter's size in bits (1 MiB)."""

    def __init__(self) -> None:
        self._recent: dict[str, None] = {}
        self._bits = bytearray(self.BITS // 8)

    @classmethod
    def _positions(cls, cid: str) -> list[int]:
        d = hashlib.blake2b(cid.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        return [int.from_bytes(d[i : i + 4], "little") % cls.BITS for i in range(0, 16, 4)]

    def add(self, cid: str) -> None:
        """Count `cid` as used."""
        self._recent[cid] = None
        if len(self._recent) > self.RECENT:
            del self._recent[next(iter(self._recent))]
        for p in self._positions(cid):
            self._bits[p >> 3] |= 1 << (p & 7)

    def __contains__(self, cid: object) -> bool:
        if not isinstance(cid, str):
            return False
        if cid in self._recent:
            return True
        return all(self._bits[p >> 3] >> (p & 7) & 1 for p in self._positions(cid))


def unique_call_id(provider_id: str, taken: Container[str]) -> str:
    """The id a call is known by in the session: the provider's own when it is free, else the
    first free `<id>_<n>` (n from 2); the caller adds it to `taken`."""
    if provider_id and provider_id not in taken:
        return provider_id
    base = _UNSAFE.sub("_", provider_id)[:48] or "call"
    n = 2
    while f"{base}_{n}" in taken:
        n += 1
    return f"{base}_{n}"
