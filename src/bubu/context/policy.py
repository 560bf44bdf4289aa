"""The knobs of bounded context, in one typed object."""

from __future__ import annotations

import msgspec

from bubu.context.quota import DEFAULT_STORE_QUOTA


class ContextPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How results are offloaded and when the history is compacted.

    - `offload_bytes`: a tool result larger than this is stored whole in the blob table and the
      model sees a placeholder (about 8 KB, or 2k estimated tokens);
    - `hot_steps`: results of the most recent model steps stay whole while no larger than
      `hot_max_bytes`; older large ones become placeholders;
    - `compact_at`: compact when the projected request passes this share of the window;
    - `compact_to`: what a compaction aims the request at, as a share of the window (below
      `compact_at`, so a small window is not summarized again at the next step);
    - `summary_result_share`: the largest share of the window one offloaded result takes in the
      summarizer's reading (its head and tail; a large window reads every result whole);
    - `keep_steps`: model steps kept raw after a checkpoint (fewer when they do not fit);
    - `tail_share`: the largest share of the window the raw tail may take after compaction;
    - `store_quota`: bytes of whole results a session may store (None: no quota); past it, a
      large result is kept as its head and tail (`bubu.context.quota`).
    """

    offload_bytes: int = 8192
    hot_steps: int = 1
    hot_max_bytes: int = 16_384
    compact_at: float = 0.8
    compact_to: float = 0.3
    summary_result_share: float = 0.03125
    keep_steps: int = 4
    tail_share: float = 0.35
    excerpt_lines: int = 12
    excerpt_bytes: int = 1200
    store_quota: int | None = DEFAULT_STORE_QUOTA

    @property
    def bounded_keep(self) -> int:
        """Bytes kept of each end of a result bounded by the quota: together they stay inline."""
        return self.offload_bytes * 3 // 8

    def reserve(self, window: int) -> int:
        """Tokens kept free for the response and estimation error: min(16,384, window / 4)."""
        return min(16_384, window // 4)
