"""Prompt exits after a shutdown signal (SIGTERM, SIGHUP): the turn is already suspended and
committed, so nothing is left for the interpreter's exit to wait for.

A model call or a tool still running in a worker thread (a provider's slow stream, a blocking
read) would otherwise hold the process at exit until it returns, which can be minutes.
"""

from __future__ import annotations

import contextlib
import os
import sys

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


__all__ = ["RECEIVED", "leave", "requested"]
