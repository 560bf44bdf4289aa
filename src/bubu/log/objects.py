"""Workspace snapshot objects: content-addressed by the sha-256 of their bytes, stored compressed.

Every backend keeps them in one table (`objects`) beside the blobs, shared by every session of the
store, so a file that several snapshots (or several sessions of one workspace) hold is stored once.
The stored form is a zlib stream; its declared size bounds what reading it inflates, so a planted
stream can never inflate past the object it claims to be.
"""

from __future__ import annotations

import zlib

from bubu.log import codec

LEVEL = 1
"""zlib's fastest level: a first snapshot of a large tree is bound by compression, and the
objects are the workspace's own files, which rarely gain much past it."""


def pack(data: bytes, sha: str | None = None) -> tuple[str, int, bytes]:
    """The row of one object: (sha-256 of its bytes, their size, the compressed form); `sha`
    is its name when the caller already hashed it."""
    return sha or codec.sha256_hex(data), len(data), zlib.compress(data, LEVEL)


def unpack(stored: bytes, size: int) -> bytes | None:
    """The bytes of a stored object, or None when the stream is damaged or inflates past `size`."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(stored, size + 1)
    except zlib.error:
        return None
    if len(out) != size or not d.eof:
        return None
    return out


def intact(sha: str, stored: bytes, size: int) -> bool:
    """Whether a stored object inflates to bytes that hash to its name."""
    data = unpack(stored, size)
    return data is not None and codec.sha256_hex(data) == sha
