"""The scripted model: a JSONL file, one response per line, its position derived from the log.

Each line is an object with optional keys ``text``, ``thinking``, ``tool_calls`` (a list of
``{"name": …, "arguments": {…}}``), and for tests and demos ``delay_s`` (seconds to spend
streaming) and ``error`` (``{"status": 429, "message": …, "retry_after": 1}``: fail this attempt
once per line … the next attempt at the same position succeeds). Summary requests (compaction) are
answered deterministically from the request itself.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import msgspec

from bubu.errors import ConfigError, ProviderError
from bubu.lines import LineTooLong, bounded_lines
from bubu.messages import canonical
from bubu.providers.base import (
    AssistantPart,
    Delta,
    DeltaSink,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    Usage,
    UserMessage,
)


class _Call(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    id: str | None = None


Seconds = Annotated[float, msgspec.Meta(ge=0, le=86_400)]
"""A scripted wait: at most a day (a timer cannot sleep for 1e308 seconds)."""


class _Err(msgspec.Struct, forbid_unknown_fields=True):
    status: int = 500
    message: str = "scripted failure"
    retry_after: Seconds | None = None


class _Line(msgspec.Struct, forbid_unknown_fields=True):
    text: str | None = None
    thinking: str | None = None
    tool_calls: list[_Call] = msgspec.field(default_factory=list)
    delay_s: Seconds = 0.0
    error: _Err | None = None


def absolute_spec(spec: str) -> str:
    """`spec` with a `scripted:` path made absolute (what the session records: a later run from
    another directory must find the same script); any other spec unchanged."""
    kind, sep, path = spec.partition(":")
    if kind != "scripted" or not sep or not path:
        return spec
    return f"scripted:{os.path.abspath(os.path.expanduser(path))}"


SCRIPT_LINE_LIMIT = 16 << 20
"""The longest line a script may have: one scripted response."""


def load_script(path: str | Path) -> list[_Line]:
    """Parse a script file; a bad line is a ConfigError naming the line."""
    p = Path(path).expanduser()
    lines: list[_Line] = []
    try:
        with p.open("rb") as f:
            for n, line in bounded_lines(f, limit=SCRIPT_LINE_LIMIT, what=f"the script {p}"):
                if not line.strip() or line.lstrip().startswith(b"//"):
                    continue
                try:
                    lines.append(msgspec.json.decode(line, type=_Line))
                except (msgspec.DecodeError, msgspec.ValidationError) as e:
                    raise ConfigError(
                        f"line {n} of the script {p} is not a valid response: {e}"
                    ) from e
    except OSError as e:
        raise ConfigError(f"cannot read the script {p}: {e.strerror}") from e
    except LineTooLong as e:
        raise ConfigError(str(e)) from e
    return lines


def _estimate(request: ModelRequest) -> int:
    size = len(request.system)
    for m in request.messages:
        size += len(canonical(m))
    return max(1, size // 4)


@dataclass
class ScriptedProvider:
    """A deterministic model that replays a script; answers past its end with a closing text."""

    path: str
    window: int = 200_000
    failed_once: set[int] | None = None
    accepts_images: bool = False
    """Whether the scripted model is shown images (off unless a test or embedder says so)."""

    def __post_init__(self) -> None:
        # Stored in the log as an absolute path, so a later `-c` from another directory finds it.
        self.path = os.path.abspath(os.path.expanduser(self.path))
        self.lines = load_script(self.path)
        self.failed_once = set()

    @property
    def spec(self) -> str:
        """The model spec."""
        return f"scripted:{self.path}"

    @property
    def context_window(self) -> int:
        """The window the script pretends to have."""
        return self.window

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Answer with script line `request.ordinal`."""
        if request.purpose == "summary":
            return summary_response(request)
        if request.ordinal >= len(self.lines):
            line = _Line(text="(the script has no more steps)")
        else:
            line = self.lines[request.ordinal]
        assert self.failed_once is not None
        if line.error is not None and request.ordinal not in self.failed_once:
            self.failed_once.add(request.ordinal)
            e = line.error
            raise ProviderError(
                f"scripted failure ({e.status}): {e.message}",
                status=e.status,
                retryable=e.status in (408, 409, 429) or e.status >= 500,
                retry_after=e.retry_after,
                error_class="rate_limited" if e.status == 429 else "server_error",
            )
        parts: list[AssistantPart] = []
        chunks: list[tuple[str, str]] = []
        if line.thinking:
            parts.append(ThinkingPart(text=line.thinking, signature=f"scripted-{request.ordinal}"))
            chunks.append(("thinking", line.thinking))
        if line.text:
            parts.append(TextPart(text=line.text))
            chunks.append(("text", line.text))
        self._stream(chunks, line.delay_s, on_delta)
        for i, call in enumerate(line.tool_calls):
            cid = call.id or f"call_{request.ordinal}_{i}"
            parts.append(ToolCallPart(call_id=cid, name=call.name, arguments=call.arguments))
        out_tokens = sum(len(t) for _, t in chunks) // 4 + 10 * len(line.tool_calls)
        return ModelResponse(
            parts=tuple(parts),
            usage=Usage(input_tokens=_estimate(request), output_tokens=max(1, out_tokens)),
            stop_reason="tool_use" if line.tool_calls else "end_turn",
            model=self.spec,
        )

    @staticmethod
    def _stream(chunks: list[tuple[str, str]], delay_s: float, on_delta: DeltaSink) -> None:
        words = [
            (k, w if n == 0 else " " + w)
            for k, text in chunks
            for n, w in enumerate(text.split(" "))
        ]
        pause = delay_s / max(1, len(words)) if delay_s > 0 else 0.0
        if not words and delay_s > 0:
            time.sleep(delay_s)
        for kind, word in words:
            on_delta(Delta(kind="text" if kind == "text" else "thinking", text=word))
            if pause:
                time.sleep(pause)


def summary_response(request: ModelRequest) -> ModelResponse:
    """A deterministic summary with the four required sections, built from the request: the
    goal from its fact sheet, the tools whose results it saw, the newest call."""
    text = "\n".join(m.text for m in request.messages if isinstance(m, UserMessage))
    goal = next((ln[6:] for ln in text.splitlines() if ln.startswith("Goal: ")), text[:200])
    tools = [ln.split(":", 1)[0][7:] for ln in text.splitlines() if ln.startswith("RESULT ")]
    calls = [ln[5:] for ln in text.splitlines() if ln.startswith("CALL ")]
    names = sorted(set(tools)) or ["none"]
    text = (
        f"## Goal\n{goal[:2000]}\n\n"
        f"## Progress\n{len(tools)} tool results in this span, from: {', '.join(names)}.\n\n"
        f"## Next steps\nCarry on after the newest call "
        f"({(calls[-1] if calls else 'none')[:200]}).\n\n"
        f"## Critical context\nEvery output came from {', '.join(names)}; see the fact sheet "
        "below for edits and shell invocations.\n"
    )
    return ModelResponse(parts=(TextPart(text=text),), usage=Usage(output_tokens=len(text) // 4))
