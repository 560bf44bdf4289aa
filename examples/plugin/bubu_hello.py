"""An example Bubu plugin: the model provider ``hello:NAME`` and the tool ``greet``.

Installed, it registers both through entry points (see pyproject.toml beside this file):

    [project.entry-points."bubu.providers"]   hello = "bubu_hello:provider"
    [project.entry-points."bubu.tools"]       hello = "bubu_hello:tools"

`bubu run -m hello:world "say hello"` then runs with this provider, and the CLI offers `greet` to
every model. A provider factory takes the model name and keyword options (``base_url``,
``context_window``, ``thinking_budget`` when the user gave them) and must ignore the ones it does
not know. A tools function returns the tools to offer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bubu import tool
from bubu.providers.base import (
    DeltaSink,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolResultsMessage,
    Usage,
)
from bubu.tools.base import Tool


@tool(effect="read_only")
def greet(name: str) -> str:
    """Greet someone by name."""
    return f"Hello, {name}!"


def tools() -> list[Tool]:
    """The ``bubu.tools`` entry point."""
    return [greet]


@dataclass(frozen=True)
class HelloModel:
    """A toy model: it greets NAME through the tool, then repeats the greeting."""

    name: str
    window: int = 8_000

    @property
    def spec(self) -> str:
        """The model spec, as the log records it."""
        return f"hello:{self.name}"

    @property
    def context_window(self) -> int:
        """How many tokens the model can take."""
        return self.window

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """First call the tool; once its result is in, say it."""
        results = [m for m in request.messages if isinstance(m, ToolResultsMessage)]
        if not results:
            call = ToolCallPart(
                call_id=f"greet-{request.ordinal}", name="greet", arguments={"name": self.name}
            )
            return ModelResponse(
                parts=(call,), usage=Usage(output_tokens=5), stop_reason="tool_use"
            )
        text = f"The tool says: {results[-1].results[0].content}"
        return ModelResponse(
            parts=(TextPart(text=text),), usage=Usage(output_tokens=8), stop_reason="end_turn"
        )


def provider(model: str, /, *, context_window: int | None = None, **_: Any) -> HelloModel:
    """The ``bubu.providers`` entry point: ``hello:NAME``."""
    return HelloModel(model, window=context_window or 8_000)
