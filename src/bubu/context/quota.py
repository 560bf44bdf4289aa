"""The per-session quota of bytes stored whole: past it, a large tool result is kept bounded.

The log keeps every result whole (inline or as an offloaded blob) up to the 64 MiB a command's
output may have; with no bound, a few calls of a runaway command fill the disk (three added 174 MiB
in seven seconds). So each session may store `store_quota` bytes of whole results; a result that
would pass it is kept as its head and tail with a note saying so, to the model and in the
transcript. What counts is folded from the log (`StoredWhole`), never counted in memory, so the
quota holds the same after a restart, a recovery or on another worker.
"""

from __future__ import annotations

import msgspec

from bubu import sizes
from bubu.events import FunctionResponse, ProcessOutput, Record, SystemNote

DEFAULT_STORE_QUOTA = 256 << 20
"""256 MiB: four whole outputs of the largest size a command's output is kept whole (64 MiB), and
far above what an ordinary day-long session stores (test runs of a few MiB each)."""


def parse_size(text: str, *, option: str = "--store-quota") -> int:
    """Bytes in `text` (`256MiB`, `1GiB`, `500MB`, a plain number of bytes), or 0 for `off`;
    anything else is a ConfigError naming `option`."""
    return sizes.parse_size(text, option=option, off=True)


def quota_of(setting: int | None) -> int | None:
    """The quota a `--store-quota` / `store_quota` setting gives: the default when unset, None
    (no quota) for 0 (`off`)."""
    if setting is None:
        return DEFAULT_STORE_QUOTA
    return setting or None


class StoredWhole(msgspec.Struct):
    """Bytes of tool results the session's log stores whole, folded from its records: each
    offloaded blob once (they are content-addressed), and each inline result above
    `inline_over` bytes."""

    inline_over: int
    total: int = 0
    seen: set[str] = msgspec.field(default_factory=set)
    """The blobs counted so far."""

    def apply(self, r: Record) -> None:
        """Fold one record in."""
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, ProcessOutput):
            # A background process's output is stored whole too, chunk by chunk.
            if c.note.chunk.sha256 not in self.seen:
                self.seen.add(c.note.chunk.sha256)
                self.total += c.note.chunk.size
            return
        if not isinstance(c, FunctionResponse):
            return
        if c.blob is not None:
            if c.blob.sha256 not in self.seen:
                self.seen.add(c.blob.sha256)
                self.total += c.blob.size
            return
        size = len(c.result.encode("utf-8", "replace"))
        if size > self.inline_over:
            self.total += size


def over_quota(quota: int | None, used: int, size: int, *, inline_over: int) -> bool:
    """Whether a result of `size` bytes, stored whole after `used`, would pass `quota` (a result
    small enough to stay inline uncounted never does)."""
    return quota is not None and size > inline_over and used + size > quota


def bounded(tool: str, data: bytes, *, keep: int, quota: int, used: int) -> tuple[str, int]:
    """`data` as its first and last `keep` bytes under a first line that says the rest was not
    stored because of the quota (what the model and the transcript show); also the bytes dropped."""
    head = data[:keep].decode("utf-8", "replace")
    tail = data[-keep:].decode("utf-8", "replace")
    dropped = len(data) - 2 * keep
    note = (
        f"[large result of {tool} kept bounded, past the session's store quota: {len(data):,} "
        f"bytes, of which the first and last {keep:,} are below and the {dropped:,} between them "
        f"are stored nowhere (the session already stores {used:,} bytes of whole results; its "
        f"quota, store_quota, is {quota:,}). To see more, narrow what the command prints (grep, "
        "head, tail, or write it to a file and read that in parts).]"
    )
    return f"{note}\n{head}\n…\n{tail.rstrip()}", dropped


__all__ = [
    "DEFAULT_STORE_QUOTA",
    "StoredWhole",
    "bounded",
    "over_quota",
    "parse_size",
    "quota_of",
]
