"""How an OpenAI-compatible server is asked to call tools, learned from what it refuses.

Servers differ: llama-cpp-python's server drops the tools when no `tool_choice` is sent and
fails (500, "Automatic streaming tool choice is not supported") when `tool_choice: "auto"` is
streamed; vLLM without `--enable-auto-tool-choice` refuses `"auto"`; llama-server without
`--jinja` refuses tools altogether. So a compatible server is first asked with `"auto"`,
streamed; what it refuses moves it down one mode, for the rest of the run, with one line that
says so (recorded in the log):

- ``stream``: tools with `tool_choice: "auto"`, streamed (every server that can);
- ``whole``: the same, not streamed (llama-cpp-python);
- ``omit``: tools without `tool_choice` (a server that refuses the field);
- ``none``: no tools at all (a server that refuses tools): the model answers in text only.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

ToolMode: TypeAlias = Literal["stream", "whole", "omit", "none"]

_STREAMED_CHOICE = ("streaming tool choice",)
_CHOICE = ("tool_choice", "tool choice", "--enable-auto-tool-choice")
_TOOLS = ("--jinja", "tools param", "does not support tools", "tools are not supported")


def next_mode(mode: ToolMode, error_text: str) -> ToolMode | None:
    """The mode to try after `mode` was refused with `error_text`, or None when the refusal is
    not about tools (the ordinary retry policy decides)."""
    text = error_text.lower()
    if mode == "stream" and any(w in text for w in _STREAMED_CHOICE):
        return "whole"
    if mode in ("stream", "whole") and any(w in text for w in _CHOICE):
        return "omit"
    if mode != "none" and any(w in text for w in _TOOLS):
        return "none"
    return None


def notice(mode: ToolMode, server: str, error_text: str) -> str:
    """The one line that says what the server cannot do, and what Bubu does instead."""
    said = " ".join(error_text.split())[:160]
    match mode:
        case "whole":
            return f"{server} cannot stream tool calls ({said}); its answers arrive whole"
        case "omit":
            return (
                f"{server} refuses tool_choice ({said}); tools are sent without it, and the "
                "server may not let the model call them"
            )
        case "none":
            return f"{server} cannot call tools ({said}); the model answers in text only"
        case "stream":
            return f"{server} calls tools"


__all__ = ["ToolMode", "next_mode", "notice"]
