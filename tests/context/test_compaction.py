"""Compaction checkpoints (DESIGN §6): when they are built, what they store, what the next request
holds, incremental folding, and validation failures that fall back to the raw tail."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from bubu.context.compaction import (
    PROMPT_VERSION,
    SECTIONS,
    SUMMARY_SYSTEM,
    VIEW_KIND,
    body_digest,
)
from bubu.errors import ProviderError
from bubu.events import CheckpointBody, SummaryChunk
from bubu.log.codec import sha256_hex
from bubu.log.sqlite import SQLiteStore
from bubu.providers.base import AssistantMessage, ModelRequest, ModelResponse, ToolCallPart

from .helpers import (
    WINDOW,
    Summarizer,
    compactions,
    digest_at,
    model_requests,
    noisy_turn,
    notes,
    summary_text,
    texts,
)

BUDGET = min(int(0.8 * WINDOW), WINDOW - WINDOW // 4)
"""The compaction threshold for the default policy and the test window."""


def _keys(request: ModelRequest) -> list[str]:
    """The emit keys of the steps a request shows raw."""
    return [
        str(p.arguments["key"])
        for m in request.messages
        if isinstance(m, AssistantMessage)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    ]


def _raw_tail(request: ModelRequest) -> bool:
    """True when the request shows the newest 1–4 steps raw, in order, up to the newest one."""
    keys = _keys(request)
    n = request.ordinal
    return 1 <= len(keys) <= 4 and keys == [f"k{j}" for j in range(n - len(keys), n)]


def test_a_checkpoint_is_stored_with_its_provenance_and_every_later_call_names_it(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    info, provider = noisy_turn(tmp_path, sqlite_store, steps=22)
    records = sqlite_store.read(info.id)

    cps = compactions(records)
    assert len(cps) == 2
    assert all(n.ok and n.checkpoint is not None for _, n in cps)
    bodies = dict(notes(records, CheckpointBody))
    chunks = [n for _, n in notes(records, SummaryChunk)]
    previous = None
    for seq, n in cps:
        assert n.checkpoint is not None
        # The checkpoint's text is an event committed with its note, right before it.
        body = bodies[seq - 1]
        assert (body.key, body.watermark, body.source_digest) == (
            n.checkpoint,
            n.watermark,
            n.source_digest,
        )
        assert n.body_digest == body_digest(body)
        assert n.source_digest == digest_at(sqlite_store, info.id, n.watermark)
        assert (body.model, body.prompt_version, body.previous) == (
            provider.spec,
            PROMPT_VERSION,
            previous,
        )
        assert body.summarized_upto == body.watermark
        assert all(s in body.summary for s in SECTIONS)
        assert body.facts.startswith("## Facts from the log (exact)\nGoal: make noise")
        assert body.covered_bytes > 0
        # It names the summarizer calls that built it: one traced call per chunk.
        assert body.chunks == n.chunks == len(body.calls) >= 1
        assert body.calls == n.calls
        mine = [c for c in chunks if c.watermark == n.watermark]
        assert [c.request_digest for c in mine] == body.calls
        assert mine[-1].text == body.summary
        # The view is a cache of the event and carries the digest of what it caches.
        view = sqlite_store.get_view(VIEW_KIND, info.id, n.checkpoint)
        assert view is not None
        assert view.source_digest == n.body_digest == sha256_hex(view.data)
        assert view.source_high_water == seq - 1
        previous = n.checkpoint

    # Every model call after a compaction names the checkpoint it was given; none before the first.
    calls = [(s, n) for s, n in model_requests(records) if n.purpose == "turn"]
    for seq, note in calls:
        before = [n.checkpoint for s, n in cps if s < seq]
        assert note.checkpoint == (before[-1] if before else None)
    assert sum(1 for _, n in calls if n.checkpoint is None) > 0
    # The estimate never passes the compaction threshold.
    assert max(n.estimated_tokens for _, n in calls) <= BUDGET


def test_the_next_request_is_the_summary_then_the_raw_tail(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    info, provider = noisy_turn(tmp_path, sqlite_store, steps=16)
    ((_, cp),) = compactions(sqlite_store.read(info.id))
    turns = provider.turns()
    i = next(i for i, r in enumerate(provider.requests) if r.purpose == "summary")
    before = provider.requests[i - 1]
    after = next(r for r in provider.requests[i:] if r.purpose == "turn")

    head = texts(after.messages)[0]
    assert head.startswith(f"[Summary of this session's events 1–{cp.watermark};")
    assert all(s in head for s in SECTIONS)
    assert "## Facts from the log (exact)" in head
    # The user's request and the early steps are covered; the newest steps follow raw, in order.
    assert "make noise" not in texts(after.messages)[1:]
    assert _raw_tail(after)
    assert len(msgspec.json.encode(after)) < len(msgspec.json.encode(before))
    # The system prompt and tools do not move.
    assert all((r.system, r.tools) == (turns[0].system, turns[0].tools) for r in turns)


def test_the_summary_request_folds_the_previous_summary_and_only_the_new_events(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    info, provider = noisy_turn(tmp_path, sqlite_store, steps=22)
    (_, first), (_, second) = compactions(sqlite_store.read(info.id))
    summaries = provider.summaries()
    assert len(summaries) == first.chunks + second.chunks
    one, two = summaries[: first.chunks], summaries[first.chunks :]
    assert all((r.system, r.tools) == (SUMMARY_SYSTEM, ()) for r in summaries)
    text_a = [texts(r.messages)[0] for r in one]
    text_b = [texts(r.messages)[0] for r in two]
    assert "# Previous summary" not in text_a[0]
    # Chunks after the first fold the answer to the one before, in order.
    for i, t in enumerate(text_a[1:] + text_b[1:]):
        assert t.startswith("# Previous summary\n## Goal"), i
    assert text_b[0].startswith(
        f"# Previous summary\n[Summary of this session's events 1–{first.watermark};"
    )
    history_a = "".join(t.rsplit("# History since then", 1)[1] for t in text_a)
    history_b = "".join(t.rsplit("# History since then", 1)[1] for t in text_b)
    # The second span holds only steps after the first watermark (emit keys are per step).
    assert '{"key":"k0"}' in history_a
    assert '{"key":"k0"}' not in history_b
    assert all("# Facts from the log (exact)\nGoal: make noise" in t for t in text_a + text_b)
    assert second.watermark > first.watermark


def _raises(request: ModelRequest) -> ModelResponse:
    raise ProviderError("the summarizer is overloaded", status=529, retryable=True)


HEADINGS_ONLY = "\n".join(f"{s}\n2024-05-01 12:00:00 — 13:05" for s in SECTIONS) + "\n" * 200
"""What a small model once sent: the prompt's headings and invented timestamps, nothing else."""

PROMPT_ECHO = "\n\n".join(
    f"{s}\nWhat remains, in order, as concrete actions. Be specific and complete." for s in SECTIONS
)

NO_GOAL = (
    "## Goal\nRefactor the billing module and publish the wheel to the registry.\n\n"
    "## Progress\nThe parser module was rewritten; pytest reported green afterwards.\n\n"
    "## Next steps\nTag release v2.1 and upload it with twine.\n\n"
    "## Critical context\nThe registry token lives in CI secrets, never in the repository.\n"
)
"""A specific summary of some other task: it does not carry this session's request."""


BAD: list[tuple[str, Summarizer, str]] = [
    (
        "no_sections",
        summary_text("All good, carry on. " * 40),
        "the summary lacks the sections ## Goal",
    ),
    ("headings_only", summary_text(HEADINGS_ONLY), "the summary's Goal section says nothing"),
    ("prompt_echo", summary_text(PROMPT_ECHO), "the summary's Goal section says nothing"),
    (
        "no_goal",
        summary_text(NO_GOAL),
        "the summary's Goal section does not carry the user's request",
    ),
    ("provider_error", _raises, "the summarizer failed: the summarizer is overloaded"),
]


@pytest.mark.parametrize(("summarize", "why"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_summary_that_fails_validation_keeps_the_goal_and_the_facts(
    tmp_path: Path, sqlite_store: SQLiteStore, summarize: Summarizer, why: str
) -> None:
    info, provider = noisy_turn(tmp_path, sqlite_store, steps=16, model_kw={"summarize": summarize})
    records = sqlite_store.read(info.id)

    cps = compactions(records)
    assert cps
    bodies = dict(notes(records, CheckpointBody))
    for seq, n in cps:
        assert n.ok is False
        assert n.message is not None
        assert n.message.startswith(why)
        assert "kept the last valid checkpoint and the fact sheet" in n.message
        assert n.source_digest == digest_at(sqlite_store, info.id, n.watermark)
        # A fallback checkpoint: no model summary, the deterministic fact sheet for the rest.
        body = bodies[seq - 1]
        assert (body.key, body.summary, body.summarized_upto) == (n.checkpoint, "", 0)
        assert body.facts.startswith("## Facts from the log (exact)\nGoal: make noise")
    # Each failure is retried at the next compaction, never passed off as a summary.
    assert len(provider.summaries()) >= len(cps)
    i = next(i for i, r in enumerate(provider.requests) if r.purpose == "summary")
    after = next(r for r in provider.requests[i:] if r.purpose == "turn")
    head = texts(after.messages)[0]
    assert head.startswith(f"[Events 1–{cps[0][1].watermark} of this session are not shown raw.")
    assert "could not be summarized yet" in head
    assert "Goal: make noise" in head
    for r in provider.turns():
        assert any("make noise" in t for t in texts(r.messages))
        assert not any("carry on" in t or t.startswith("## Goal") for t in texts(r.messages))
    assert _raw_tail(after)
    # Calls after the fallback name it: the log says what the model was given.
    calls = [(s, n) for s, n in model_requests(records) if n.purpose == "turn"]
    assert calls[-1][1].checkpoint == cps[-1][1].checkpoint
