"""Compaction checkpoints: a validated summary of events 1..watermark plus the log's fact sheet.

A checkpoint folds the previous checkpoint and the events after it (incremental), is validated
before anything may use it (the four sections, and a minimum size relative to what it covers —
never a fragment passed off as a summary), and is stored as a derived view naming the watermark
and the chain digest it was built from. A view whose digest no longer matches the log is ignored
and rebuilt.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from bubu.providers.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultsMessage,
    UserMessage,
)

PROMPT_VERSION = "bubu-summary/1"
VIEW_KIND = "checkpoint"
SECTIONS = ("## Goal", "## Progress", "## Next steps", "## Critical context")

SUMMARY_SYSTEM = """\
You compress the history of a long coding task so that the work can continue without it.
Write a summary with exactly these four sections, in this order:

## Goal
What the user asked for, in their words where it matters, including later changes of plan.

## Progress
What has been done: files read, changed and created (exact paths), commands run and what they
showed (exact error messages and test names), decisions taken and why.

## Next steps
What remains, in order, as concrete actions.

## Critical context
Facts that must not be lost: exact paths, identifiers, commands, error strings, constraints the
user gave, anything interrupted by a crash that still needs checking.

Be specific and complete; keep exact strings exact. Do not invent anything that is not in the
history. The previous summary (if any) is part of the history: fold it in, do not drop it.
"""


class CheckpointData(msgspec.Struct, frozen=True, kw_only=True):
    """What a checkpoint view stores."""

    key: str
    watermark: int
    source_digest: str
    summary: str
    facts: str
    model: str
    prompt_version: str
    previous: str | None
    covered_bytes: int


def render_span(messages: Sequence[Message], limit: int) -> str:
    """The messages as plain text for the summarizer, each large item cut, the whole at most
    `limit` characters (the oldest items are cut first)."""
    lines: list[str] = []
    for m in messages:
        if isinstance(m, UserMessage):
            lines.append(f"USER: {_cut(m.text, 4000)}")
        elif isinstance(m, AssistantMessage):
            for p in m.parts:
                if isinstance(p, TextPart):
                    lines.append(f"ASSISTANT: {_cut(p.text, 2000)}")
                elif isinstance(p, ThinkingPart):
                    lines.append(f"(thinking) {_cut(p.text, 500)}")
                elif isinstance(p, ToolCallPart):
                    args = msgspec.json.encode(p.arguments).decode("utf-8", "replace")
                    lines.append(f"CALL {p.name} {_cut(args, 600)}")
        elif isinstance(m, ToolResultsMessage):
            for r in m.results:
                mark = "ERROR " if r.is_error else ""
                lines.append(f"RESULT {r.name}: {mark}{_cut(r.content, 1500)}")
    text = "\n".join(lines)
    if len(text) > limit:
        text = "[… older part of this span cut …]\n" + text[-limit:]
    return text


def _cut(text: str, n: int) -> str:
    if len(text) <= n:
        return text
    return f"{text[: n // 2]} … [{len(text) - n:,} chars cut] … {text[-n // 2 :]}"


def summary_request(
    previous: str | None, span: str, facts: str, *, max_tokens: int, ordinal: int
) -> ModelRequest:
    """The request that asks the session's model for the summary."""
    parts = []
    if previous:
        parts.append(f"# Previous summary\n{previous}")
    parts.append(f"# History since then\n{span}")
    parts.append(f"# {facts.lstrip('# ')}")
    parts.append("Write the summary now, with the four sections.")
    return ModelRequest(
        system=SUMMARY_SYSTEM,
        tools=(),
        messages=(UserMessage(text="\n\n".join(parts)),),
        max_tokens=max_tokens,
        ordinal=ordinal,
        purpose="summary",
    )


def validate(summary: str, covered_bytes: int) -> str | None:
    """Why `summary` may not replace the history it covers, or None when it may."""
    missing = [s for s in SECTIONS if s.lower() not in summary.lower()]
    if missing:
        return f"the summary lacks the sections {', '.join(missing)}"
    minimum = max(200, min(2000, covered_bytes // 100))
    if len(summary.strip()) < minimum:
        return f"the summary is {len(summary.strip())} characters for {covered_bytes:,} bytes of history (at least {minimum} needed)"
    return None


def checkpoint_text(data: CheckpointData) -> str:
    """What the model sees in place of events 1..watermark."""
    return (
        f"[Summary of this session's events 1–{data.watermark}; everything after follows as it happened.]\n\n"
        f"{data.summary.strip()}\n\n{data.facts}"
    )
