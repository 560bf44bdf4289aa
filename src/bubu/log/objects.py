"""Workspace snapshot objects: content-addressed by the sha-256 of their bytes, stored compressed.

Every backend keeps them in one table (`objects`) beside the blobs, shared by every session of the
store, so a file that several snapshots (or several sessions of one workspace) hold is stored once.
An object is stored whole, as a zlib stream, or — a new version of a file or a directory whose
previous version the store holds whole — as a delta against that one: a marker, the base's name,
then zlib streams that use windows of the base as their preset dictionary, so that what the two
versions share costs a few bytes. A delta's base is always stored whole (one level: reading an
object inflates at most two). The declared size bounds what reading inflates, so a planted stream
can never inflate past the object it claims to be; what is read is checked against its name.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from bubu.log import codec

LEVEL = 4
"""zlib's level for a whole object: within a few percent of git's packs (level 6) on source
text, at about the cost of the fastest level."""

DELTA_LEVEL = 6
"""The level of a delta's streams: what they hold is small, so a better level costs little."""

DELTA = b"\0\1"
"""The first bytes of a delta (a zlib stream never starts with a zero byte)."""

CHUNK = 16 << 10
"""A delta encodes its object in chunks of this many bytes (the last one shorter)."""

WINDOW = 32 << 10
"""Each chunk's dictionary: at most this much of the base, around the chunk's own offset."""

_LEAD = 8 << 10
"""How far past the chunk's end its dictionary ends: a version that grew by less than this, or
shrank by less than zlib's window less this, still finds the base's bytes it shares."""

Row = tuple[str, int, bytes]
GetBase = Callable[[str], bytes | None]


def pack(data: bytes, sha: str | None = None, base: tuple[str, bytes] | None = None) -> Row:
    """The row of one object: (sha-256 of its bytes, their size, the stored form); `sha` is its
    name when the caller already hashed it, `base` the (name, bytes) of a whole object to store
    it against, when the delta is smaller."""
    sha = sha or codec.sha256_hex(data)
    if base is not None and base[1] and data:
        delta = DELTA + bytes.fromhex(base[0]) + _delta(data, base[1])
        if len(delta) <= len(data) >> 3:
            return sha, len(data), delta
        whole = zlib.compress(data, LEVEL)
        return sha, len(data), delta if len(delta) < len(whole) else whole
    return sha, len(data), zlib.compress(data, LEVEL)


def base_of(stored: bytes) -> str | None:
    """The name of the object a stored delta is against, or None for a whole object."""
    if stored[:2] != DELTA or len(stored) < 34:
        return None
    return stored[2:34].hex()


def _window(base: bytes, offset: int) -> bytes:
    # A match's distance is the dictionary's end less the chunk's offset (for bytes at the same
    # offset in both versions), whatever the position in the chunk: it ends `_LEAD` past the chunk.
    end = min(len(base), offset + CHUNK + _LEAD)
    return base[max(0, end - WINDOW) : end]


def _delta(data: bytes, base: bytes) -> bytes:
    parts = []
    for offset in range(0, len(data), CHUNK):
        c = zlib.compressobj(DELTA_LEVEL, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY,
                             _window(base, offset))  # fmt: skip
        parts.append(c.compress(data[offset : offset + CHUNK]) + c.flush())
    return b"".join(parts)


def _undelta(stream: bytes, size: int, base: bytes) -> bytes | None:
    out: list[bytes] = []
    done = 0
    while done < size:
        d = zlib.decompressobj(zdict=_window(base, done))
        want = min(CHUNK, size - done)
        try:
            chunk = d.decompress(stream, want + 1)
        except zlib.error:
            return None
        if len(chunk) != want or not d.eof:
            return None
        out.append(chunk)
        done += want
        stream = d.unused_data
    return b"".join(out) if not stream else None


def unpack(stored: bytes, size: int, get_base: GetBase | None = None) -> bytes | None:
    """The bytes of a stored object, or None when the stream is damaged, inflates past `size`, or
    is a delta whose base `get_base` (the whole object's bytes by name) does not give."""
    if stored[:2] == DELTA:
        name = base_of(stored)
        base = None if name is None or get_base is None else get_base(name)
        return None if base is None else _undelta(stored[34:], size, base)
    d = zlib.decompressobj()
    try:
        out = d.decompress(stored, size + 1)
    except zlib.error:
        return None
    if len(out) != size or not d.eof:
        return None
    return out


def intact(sha: str, stored: bytes, size: int, get_base: GetBase | None = None) -> bool:
    """Whether a stored object inflates to bytes that hash to its name."""
    data = unpack(stored, size, get_base)
    return data is not None and codec.sha256_hex(data) == sha
