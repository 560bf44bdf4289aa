"""A set of ids that costs about 8 bytes an id however many there are (for folds that must know
every call of a session exactly, e.g. recovery's integrity checks)."""

from __future__ import annotations

import hashlib
import sys
from array import array
from bisect import bisect_left


def key(ident: str) -> int:
    """The 64-bit key of `ident` (BLAKE2b): two ids of one session share a key with odds of
    about 1 in 10^9 at 100,000 ids, and 1 in 10^7 at a million."""
    d = hashlib.blake2b(ident.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(d, "little")


class IdSet:
    """Exact membership of 64-bit keys: the newest in a small set, the rest in sorted runs of
    doubling size (`RECENT`, 2×, 4× …, merged as a binary counter carries), each found by
    bisection: an addition costs O(log n) amortized, a lookup one bisection per run."""

    __slots__ = ("_recent", "_runs")
    RECENT = 4096

    def __init__(self) -> None:
        self._recent: set[int] = set()
        self._runs: list[array[int]] = []
        """Sorted runs of keys, the largest first."""

    def add(self, ident: str) -> None:
        self._recent.add(key(ident))
        if len(self._recent) < self.RECENT:
            return
        run = sorted(self._recent)
        self._recent = set()
        runs = self._runs
        while runs and len(runs[-1]) <= len(run):
            run = sorted([*runs.pop(), *run])  # two sorted runs: timsort merges them
        runs.append(array("Q", run))

    def __contains__(self, ident: object) -> bool:
        if not isinstance(ident, str):
            return False
        k = key(ident)
        if k in self._recent:
            return True
        for run in self._runs:
            i = bisect_left(run, k)
            if i < len(run) and run[i] == k:
                return True
        return False

    def keys(self) -> list[int]:
        """Every key, sorted (what two sets are compared by)."""
        out: set[int] = set(self._recent)
        for run in self._runs:
            out.update(run)
        return sorted(out)

    def __getstate__(self) -> tuple[list[bytes], list[int]]:
        runs = []
        for run in self._runs:
            packed = array("Q", run)
            if sys.byteorder != "little":
                packed.byteswap()
            runs.append(packed.tobytes())
        return runs, sorted(self._recent)

    def __setstate__(self, state: tuple[list[bytes], list[int]]) -> None:
        data, recent = state
        self._runs = []
        for chunk in data:
            run = array("Q")
            run.frombytes(chunk)
            if sys.byteorder != "little":
                run.byteswap()
            self._runs.append(run)
        self._recent = set(recent)
