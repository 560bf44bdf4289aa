"""A model's context window and where the figure came from, as the views say it: the vocabulary
`bubu.providers.windows` finds windows in, free of the providers (the read-only commands that show
a window load this alone)."""

from __future__ import annotations

import msgspec

UNKNOWN_WINDOW = 32_768
"""The window assumed for a model whose window no table or server states."""
MIN_CONTEXT_WINDOW = 4096
"""The smallest window that holds the system prompt, the tool schemas and a reply."""
SCRIPTED_WINDOW = 200_000
"""The window of the scripted model (``scripted:``) unless one is given."""
USER = "--context-window"
LEARNED = "the server's overflow error"
"""The source of a window learned from an overflow error: it wins over every other figure."""
UNKNOWN = "default: unknown model"


class Window(msgspec.Struct, frozen=True):
    """A window in tokens and where it came from (e.g. ``llama.cpp /props``)."""

    tokens: int
    source: str

    def describe(self) -> str:
        """E.g. ``32,768 tokens (from llama.cpp /props)`` or ``(default: unknown model)``."""
        if self.source.startswith("default"):
            return f"{self.tokens:,} tokens ({self.source})"
        return f"{self.tokens:,} tokens (from {self.source})"


def learned(source: str | None) -> bool:
    """Whether a window with this source was learned from the server's own overflow error."""
    return source is not None and source.startswith(LEARNED)
