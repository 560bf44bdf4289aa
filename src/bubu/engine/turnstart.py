"""The window in which a turn's start is being committed and its runner is not yet registered
for stops: a Ctrl-C landing there must not abandon the just-opened turn (an open turn is what a
crash leaves, and the next command would continue it). The signal handler asks `opening()`;
when true the runner is stopped the moment it is registered instead of interrupting the commit."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

_lock = threading.Lock()
_depth = 0
_pending: Literal["stopped", "suspended"] | None = None


def opening() -> bool:
    """Whether this process is committing a turn's start or driving a turn it just started."""
    return _depth > 0


def stop_when_registered(reason: Literal["stopped", "suspended"]) -> None:
    """Ask the runner about to be registered to stop for `reason` the moment it is (called
    from a signal handler, on the thread that will register it)."""
    global _pending
    if _pending is None:
        _pending = reason


def take_pending() -> Literal["stopped", "suspended"] | None:
    """The stop asked for before the runner was registered, once."""
    global _pending
    reason, _pending = _pending, None
    return reason


@contextmanager
def window() -> Iterator[None]:
    """Mark the span from appending a turn's start to the end of its drive."""
    global _depth
    with _lock:
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                take_pending()  # a stop meant for this turn never applies to a later one
