"""A stdio MCP server that writes lines other than JSON-RPC to its stdout (a stray `print`, a
banner): the SDK logs a traceback for each such line; here they become one warning line per
server, and a server that does so before answering is dropped (its tools unavailable) at once
instead of holding the run until the start-up timeout."""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Callable

SDK_LOGGER = "mcp.client.stdio"
SDK_MESSAGE = "Failed to parse JSONRPC message from server"

SERVER: contextvars.ContextVar[str | None] = contextvars.ContextVar("bubu_mcp_server", default=None)
"""The server whose connection the current task serves (inherited by the SDK's reader tasks)."""

_handlers: dict[str, Callable[[str], None]] = {}


class NotJsonRpc(Exception):
    """The server's stdout carried a line that is not JSON-RPC before it answered."""


def sample(record: logging.LogRecord) -> str:
    """The offending line (cut to 80 characters), as far as the SDK's error names it."""
    exc = record.exc_info[1] if record.exc_info else None
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0].get("input")
        except Exception:  # another shape of error: say what we can
            first = None
        if isinstance(first, str):
            return first if len(first) <= 80 else first[:79] + "…"
    return str(exc)[:80] if exc is not None else "?"


class _Filter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != SDK_MESSAGE:
            return True
        name = SERVER.get()
        handler = _handlers.get(name) if name is not None else None
        if handler is None:
            return True  # not one of ours: the SDK's own report stands
        handler(sample(record))
        return False


_FILTER = _Filter()


def watch(name: str, handler: Callable[[str], None]) -> None:
    """Call `handler(line)` (in the loop thread) for each non-JSON-RPC line of server `name`,
    whose connection runs in the current context, instead of the SDK's traceback."""
    logger = logging.getLogger(SDK_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    SERVER.set(name)
    _handlers[name] = handler


def unwatch(name: str) -> None:
    """Stop watching server `name`."""
    _handlers.pop(name, None)


def warn(text: str) -> None:
    """One warning line on stderr (never stdout, which may carry `--jsonl` events)."""
    sys.stderr.write(f"bubu: warning: {text}\n")
    sys.stderr.flush()


__all__ = ["SERVER", "NotJsonRpc", "sample", "unwatch", "warn", "watch"]
