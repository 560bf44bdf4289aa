"""The only place that reads the wall clock; projections never import it."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Unix time in milliseconds (diagnostic only: the order of events is their seq)."""
    return time.time_ns() // 1_000_000


def monotonic() -> float:
    """Seconds from an arbitrary start, for durations and timeouts."""
    return time.monotonic()
