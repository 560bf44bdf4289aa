"""The bytes of a session's offloaded results, as the model call, the compaction and the tools
read them: the store's, with the ones the next request shows kept at hand."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from bubu.errors import ToolError

if TYPE_CHECKING:
    from bubu.log.store import Store


class Blobs:
    """A `BlobReader` over the store, for one session.

    `known` gives the sha-256 of every result the session offloaded, as the runner folds them
    (a handle is looked up among those only); `hot` holds the bytes the last request showed."""

    def __init__(self, store: Store, known: Callable[[], set[str]]) -> None:
        self.store = store
        self.known = known
        self.hot: dict[str, bytes] = {}

    def blobs_of(self, shas: Sequence[str]) -> dict[str, bytes]:
        """The bytes of these offloaded results, as far as the store has them."""
        out: dict[str, bytes] = {}
        for sha in shas:
            data = self.hot.get(sha)
            if data is None:
                data = self.store.blob(sha)
            if data is not None:
                out[sha] = data
        return out

    def keep_hot(self, shas: Sequence[str]) -> dict[str, bytes]:
        """The bytes of these results, kept at hand from now on (the next request's)."""
        self.hot = self.blobs_of(shas)
        return self.hot

    def read_blob(self, handle: str) -> bytes | None:
        """The bytes of one of this session's offloaded results, by sha-256 or a unique prefix."""
        handle = handle.strip().lower()
        matches = [sha for sha in self.known() if sha.startswith(handle)]
        if len(matches) > 1:
            raise ToolError(f"the handle {handle} matches {len(matches)} results; give more of it")
        return self.store.blob(matches[0]) if matches else None


__all__ = ["Blobs"]
