"""A third-party plugin, as a package would ship it; the plugin tests install a copy of this file
as the module `bubu_echo_plugin` of a distribution on a temporary sys.path entry.

The provider `echo:MODEL` first calls the plugin's own tool `shout` with MODEL, then answers with
what the tool returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bubu.providers.base import (
    DeltaSink,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolResultsMessage,
)
from bubu.tools.base import Tool
from bubu.tools.decorator import tool


@dataclass
class EchoProvider:
    """A model that shouts its own name through a tool."""

    model: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        """The model spec."""
        return f"echo:{self.model}"

    @property
    def context_window(self) -> int:
        """Small and fixed."""
        return 10_000

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Call `shout`, then repeat its result."""
        if request.ordinal == 0:
            call = ToolCallPart(call_id="c0", name="shout", arguments={"text": self.model})
            return ModelResponse(parts=(call,), stop_reason="tool_use")
        results = [m for m in request.messages if isinstance(m, ToolResultsMessage)]
        return ModelResponse(parts=(TextPart(text=f"echo: {results[-1].results[0].content}"),))


def provider(model: str, /, **options: Any) -> EchoProvider:
    """The `bubu.providers` entry point."""
    return EchoProvider(model, dict(options))


@tool(effect="read_only")
def shout(text: str) -> str:
    """Shout the text back."""
    return text.upper() + "!"


def tools() -> list[Tool]:
    """The `bubu.tools` entry point."""
    return [shout]


def not_tools() -> list[object]:
    """A broken `bubu.tools` entry point: it returns something that is not a tool."""
    return ["not a tool"]


def clashing_tools() -> list[Tool]:
    """A `bubu.tools` entry point whose tool takes a built-in's name."""
    return [tool(effect="read_only", name="read_file")(shout.fn)]
