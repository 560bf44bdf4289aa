"""Prompt exits after a shutdown signal (SIGTERM, SIGHUP): the turn is already suspended and
committed, so nothing is left for the interpreter's exit to wait for.

A model call or a tool still running in a worker thread (a provider's slow stream, a blocking
read) would otherwise hold the process at exit until it returns, which can be minutes.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO, cast

RECEIVED: list[int] = []
"""The shutdown signals this process received, in order."""


def requested() -> bool:
    """Whether a shutdown signal arrived."""
    return bool(RECEIVED)


def leave(code: int) -> None:
    """Exit with `code` now when a shutdown signal arrived (exit handlers run and output flushed
    first); else return."""
    if not RECEIVED:
        return
    # Our own exit work still runs (a pending notification, stopping MCP servers, all bounded);
    # only the interpreter's wait for worker threads is skipped.
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # the terminal that went away
            stream.flush()
    os._exit(code)


def stop_when_started(signum: int, stop: Callable[[], bool], wait_s: float = 5.0) -> None:
    """A shutdown signal arrived before the turn's runner was registered (the turn may be
    committing its start right now): stop the runner as soon as it appears, so the turn ends
    `suspended` rather than open; exit if none appears within `wait_s`."""

    def watch() -> None:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if stop():
                return
            time.sleep(0.02)
        leave(128 + signum)

    threading.Thread(target=watch, name="bubu-shutdown", daemon=True).start()


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


__all__ = ["RECEIVED", "Tolerant", "leave", "requested", "stop_when_started", "tolerant"]
