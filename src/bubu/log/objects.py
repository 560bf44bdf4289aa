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

import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

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

MAX_CHAIN = 3
"""How many bases deep a read follows (a delta is written against a whole object, but one stored
by two processes at once may be a delta itself)."""

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
        c = zlib.compressobj(
            DELTA_LEVEL, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, _window(base, offset)
        )
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


class BaseCache:
    """The whole objects a process stored or read as bases lately (a few MiB), and which whole
    object each object it stored is a delta of: the next version of a file or a directory is
    stored against them without reading the table again."""

    MAX_BYTES = 8 << 20
    MAX_OBJECT = 1 << 20
    MAX_NAMES = 50_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._base: dict[str, str] = {}

    def remember(self, rows: Sequence[Row], objects: Mapping[str, bytes]) -> None:
        """What was just stored: each row's base (itself when whole), and the whole ones' bytes."""
        for sha, _, stored in rows:
            name = base_of(stored)
            if name is None:
                self.keep(sha, sha, objects[sha])
            else:
                self._name(sha, name)

    def keep(self, sha: str, name: str, data: bytes) -> None:
        """`sha` is stored against the whole object `name`, whose bytes are `data` (checked)."""
        self._name(sha, name)
        if len(data) > self.MAX_OBJECT:
            return
        with self._lock:
            if name in self._data:
                self._data.move_to_end(name)
                return
            self._data[name] = data
            self._bytes += len(data)
            while self._bytes > self.MAX_BYTES:
                _, old = self._data.popitem(last=False)
                self._bytes -= len(old)

    def _name(self, sha: str, name: str) -> None:
        with self._lock:
            if len(self._base) >= self.MAX_NAMES:
                self._base.clear()
            self._base[sha] = name

    def find(self, shas: set[str]) -> dict[str, tuple[str, bytes]]:
        """The (name, bytes) of the whole object each of `shas` would be stored against, where
        known."""
        out = {}
        with self._lock:
            for sha in shas:
                name = self._base.get(sha)
                data = None if name is None else self._data.get(name)
                if name is not None and data is not None:
                    self._data.move_to_end(name)
                    out[sha] = (name, data)
        return out
