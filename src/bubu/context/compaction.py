"""Compaction checkpoints: a validated summary of events 1..watermark plus the log's fact sheet.

A checkpoint folds the previous checkpoint and the events after it (incremental). The summarizer
reads the real events — offloaded results whole, nothing cut — and a span larger than its window
is cut into chunks that fit, each chunk's summary folded into the next, in order. A summary is
validated before anything may use it: each section must say something of its own (not the
prompt's headings and wording), and the goal must carry the user's request. The checkpoint is a
hidden event committed with its compaction note; the derived view is only a cache of that event.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence

import msgspec

from bubu.events import CheckpointBody
from bubu.messages import (
    AssistantMessage,
    Message,
    ModelRequest,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultsMessage,
    UserMessage,
)

PROMPT_VERSION = "bubu-summary/2"
VIEW_KIND = "checkpoint"
"""The kind of a checkpoint's derived view (`bubu.log.verify.CHECKPOINT_VIEW` checks the same)."""
SECTIONS = ("## Goal", "## Progress", "## Next steps", "## Critical context")
INSTRUCTION = "Write the summary now, with the four sections."

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
When the history comes in parts, the previous summary already folds the parts before this one.
"""

_enc = msgspec.json.Encoder(order="sorted")


def render_items(messages: Sequence[Message]) -> list[str]:
    """The messages as plain-text items for the summarizer, one per part, nothing cut."""
    items: list[str] = []
    for m in messages:
        if isinstance(m, UserMessage):
            items.append(f"USER: {m.text}")
        elif isinstance(m, AssistantMessage):
            for p in m.parts:
                if isinstance(p, TextPart):
                    items.append(f"ASSISTANT: {p.text}")
                elif isinstance(p, ThinkingPart):
                    items.append(f"(thinking) {p.text}")
                elif isinstance(p, ToolCallPart):
                    args = p.raw_arguments or _enc.encode(p.arguments).decode("utf-8", "replace")
                    items.append(f"CALL {p.name} {args}")
        elif isinstance(m, ToolResultsMessage):
            for r in m.results:
                items.append(f"RESULT {r.name}: {'ERROR ' if r.is_error else ''}{r.content}")
    return items


def chunk_items(items: Sequence[str], limit: int) -> list[str]:
    """The items joined into chunks of at most `limit` characters, in order; an item larger than
    a chunk is split into numbered parts rather than cut, so no content is dropped."""
    limit = max(limit, 256)
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for item in items:
        pieces = [item]
        if len(item) > limit:
            n = -(-len(item) // (limit - 64))
            step = -(-len(item) // n)
            pieces = [
                f"(part {i + 1}/{n} of one item) {item[i * step : (i + 1) * step]}"
                for i in range(n)
            ]
        for piece in pieces:
            if current and used + len(piece) + 1 > limit:
                chunks.append("\n".join(current))
                current, used = [], 0
            current.append(piece)
            used += len(piece) + 1
    if current:
        chunks.append("\n".join(current))
    return chunks or [""]


def summary_request(
    previous: str | None,
    span: str,
    facts: str,
    *,
    max_tokens: int,
    ordinal: int,
    part: tuple[int, int] = (1, 1),
) -> ModelRequest:
    """The request that asks the session's model for the summary (of part `part` of the span)."""
    parts = []
    if previous:
        parts.append(f"# Previous summary\n{previous}")
    i, n = part
    title = "# History since then" if n == 1 else f"# History since then, part {i} of {n}"
    parts.append(f"{title}\n{span}")
    parts.append(f"# {facts.lstrip('# ')}")
    parts.append(INSTRUCTION)
    return ModelRequest(
        system=SUMMARY_SYSTEM,
        tools=(),
        messages=(UserMessage(text="\n\n".join(parts)),),
        max_tokens=max_tokens,
        ordinal=ordinal,
        purpose="summary",
    )


def request_overhead(previous: str | None, facts: str) -> int:
    """Characters of a summary request besides its span."""
    return len(SUMMARY_SYSTEM) + len(previous or "") + len(facts) + len(INSTRUCTION) + 128


# ---- validation ---------------------------------------------------------------------------------

_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "do",
        "for",
        "from",
        "has",
        "have",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "so",
        "that",
        "the",
        "then",
        "this",
        "to",
        "was",
        "were",
        "will",
        "with",
        "what",
        "when",
        "which",
        "who",
        "why",
        "how",
        "all",
        "any",
        "each",
        "no",
        "not",
        "only",
        "it's",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "they",
        "them",
        "their",
        "there",
        "here",
    ]
)
MIN_OWN_WORDS = 1
"""Words of its own (not the prompt's, not stop words, not numbers or times) each section needs:
"Nothing remains; all done." passes, headings with timestamps or the prompt echoed back do not."""
MIN_OWN_TOTAL = 15
"""Distinct words of its own the whole summary needs (a real summary names files, commands …)."""


class _Words:
    """The patterns that find a summary's words, compiled when a summary is first checked (a
    reader that only folds checkpoints never pays for them)."""

    def __init__(self) -> None:
        self.word = re.compile(r"[^\W_]+(?:[.'/:-][^\W_]+)*")
        self.cjk = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]+")
        self.stamp = re.compile(r"^(?:\d+|\d{1,4}(?:[-/:.]\d{1,4})+|t?\d{1,2}h\d*|[ap]m|utc|z)$")
        self.prompt = frozenset(w.lower() for w in self.word.findall(SUMMARY_SYSTEM + INSTRUCTION))
        """The words of the summary prompt itself."""


@functools.cache
def _words() -> _Words:
    return _Words()


def terms(text: str) -> list[str]:
    """The distinctive words of `text`, lower-cased, in order: words of three letters or more that
    are not stop words; a run of CJK characters gives its character pairs."""
    out: list[str] = []
    words = _words()
    for word in words.word.findall(text.lower()):
        for run in words.cjk.findall(word):
            out += [run] if len(run) < 2 else [run[i : i + 2] for i in range(len(run) - 1)]
        w = words.cjk.sub("", word)
        if len(w) >= 3 and w not in _STOP and not words.stamp.match(w):
            out.append(w)
    return list(dict.fromkeys(out))


def sections(summary: str) -> dict[str, str]:
    """The body of each required section (the text up to the next `## ` heading)."""
    out: dict[str, str] = {}
    lower = summary.lower()
    for s in SECTIONS:
        i = lower.find(s.lower())
        if i < 0:
            continue
        start = i + len(s)
        nxt = lower.find("\n## ", start)
        out[s] = summary[start : nxt if nxt >= 0 else len(summary)].strip()
    return out


def validate(summary: str, goal: str | None) -> str | None:
    """Why `summary` may not replace the history it covers, or None when it may."""
    found = sections(summary)
    missing = [s for s in SECTIONS if s not in found]
    if missing:
        return f"the summary lacks the sections {', '.join(missing)}"
    words = _words()
    heads = {w.lower() for s in SECTIONS for w in words.word.findall(s)}
    everything: set[str] = set()
    for s in SECTIONS:
        own = [w for w in terms(found[s]) if w not in words.prompt and w not in heads]
        everything.update(own)
        if len(own) < MIN_OWN_WORDS:
            return (
                f"the summary's {s[3:]} section says nothing of its own (only the prompt's words, "
                "headings or numbers)"
            )
    if len(everything) < MIN_OWN_TOTAL:
        return (
            f"the summary says too little of its own ({len(everything)} distinct words beyond "
            f"the prompt's, at least {MIN_OWN_TOTAL} needed)"
        )
    if goal and not carries(found[SECTIONS[0]], goal):
        return "the summary's Goal section does not carry the user's request"
    return None


def carries(section: str, goal: str) -> bool:
    """True when `section` quotes `goal` or holds at least half of its key terms (the first 24)."""
    flat = " ".join(section.lower().split())
    if " ".join(goal.lower().split())[:200] in flat:
        return True
    key = terms(goal)[:24]
    if not key:
        return True
    have = set(terms(section))
    return sum(1 for k in key if k in have or k in flat) * 2 >= len(key)


# ---- the checkpoint's text -----------------------------------------------------------------------


def body_digest(body: CheckpointBody) -> str:
    """The sha-256 of a checkpoint body's canonical bytes (what its view must cache)."""
    return hashlib.sha256(_enc.encode(body)).hexdigest()


def encode_body(body: CheckpointBody) -> bytes:
    """The canonical bytes a checkpoint view stores."""
    return _enc.encode(body)


def checkpoint_text(body: CheckpointBody) -> str:
    """What the model sees in place of events 1..watermark."""
    if body.summarized_upto >= body.watermark:
        return (
            f"[Summary of this session's events 1–{body.watermark}; everything after follows "
            "as it happened.]\n\n"
            f"{body.summary.strip()}\n\n{body.facts}"
        )
    head = (
        f"[Events 1–{body.watermark} of this session are not shown raw. "
        + (
            f"Events 1–{body.summarized_upto} are summarized below; "
            if body.summary.strip()
            else ""
        )
        + f"events {body.summarized_upto + 1}–{body.watermark} could not be summarized yet, and "
        "the exact facts from the log below cover them. Everything after follows as it happened.]"
    )
    return "\n\n".join(p for p in (head, body.summary.strip(), body.facts) if p)
