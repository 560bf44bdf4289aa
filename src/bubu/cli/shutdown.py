"""Prompt exits after a shutdown signal (SIGTERM, SIGHUP): the turn is already suspended and
committed, so nothing is left for the interpreter's exit to wait for.

A model call or a tool still running in a worker thread (a provider's slow stream, a blocking
read) would otherwise hold the process at exit until it returns, which can be minutes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, TextIO, cast

RECEIVED: list[int] = []
"""The shutdown signals this process received, in order."""


def requested() -> bool:
    """Whether a shutdown signal arrived."""
    return bool(RECEIVED)


def leave(code: int) -> None:
    """Exit with `code` now when a shutdown signal arrived (output flushed first); else return."""
    if not RECEIVED:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # the terminal that went away
            stream.flush()
    os._exit(code)


class Tolerant:
    """A text stream whose writes stop quietly once it fails (the terminal closed: EIO; the
    reader went away: EPIPE). The turn's progress is in the log, so losing the view of it must
    not crash the turn before the hang-up signal suspends it."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        self.gone = False

    def write(self, text: str) -> int:
        """Write `text` unless the stream is gone."""
        if not self.gone:
            try:
                return self.inner.write(text)
            except (OSError, ValueError):
                self.gone = True
        return len(text)

    def flush(self) -> None:
        """Flush unless the stream is gone."""
        if not self.gone:
            try:
                self.inner.flush()
            except (OSError, ValueError):
                self.gone = True

    def isatty(self) -> bool:
        """Whether the stream is (still) a terminal."""
        return not self.gone and self.inner.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def tolerant(stream: TextIO) -> TextIO:
    """`stream` made `Tolerant` (typed as the stream it stands for)."""
    return cast(TextIO, Tolerant(stream))


__all__ = ["RECEIVED", "Tolerant", "leave", "requested", "tolerant"]
