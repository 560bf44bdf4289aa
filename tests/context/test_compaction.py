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
    CheckpointData,
)
from bubu.errors import ProviderError
from bubu.log.sqlite import SQLiteStore
from bubu.providers.base import AssistantMessage, ModelRequest, ModelResponse, ToolCallPart

from .helpers import (
    WINDOW,
    Summarizer,
    compactions,
    digest_at,
    model_requests,
    noisy_turn,
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
    info, provider = noisy_turn(tmp_path, sqlite_store, steps=24)
    records = sqlite_store.read(info.id)

    cps = compactions(records)
    assert len(cps) == 2
    assert all(n.ok and n.checkpoint is not None for _, n in cps)
    previous = None
    for _, n in cps:
        assert n.checkpoint is not None
        view = sqlite_store.get_view(VIEW_KIND, info.id, n.checkpoint)
        assert view is not None
        assert (view.source_high_water, view.source_digest) == (n.watermark, n.source_digest)
        assert n.source_digest == digest_at(sqlite_store, info.id, n.watermark)
        data = msgspec.json.decode(view.data, type=CheckpointData)
        assert (data.key, data.watermark, data.source_digest) == (
            n.checkpoint,
            n.watermark,
            n.source_digest,
        )
        assert (data.model, data.prompt_version, data.previous) == (
            provider.spec,
            PROMPT_VERSION,
            previous,
        )
        assert all(s in data.summary for s in SECTIONS)
        assert data.facts.startswith("## Facts from the log (exact)\nGoal: make noise")
        assert data.covered_bytes > 0
        previous = n.checkpoint

    # Every model call after a compaction names the checkpoint it was given; none before the first.
    calls = model_requests(records)
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
    before, after = provider.requests[i - 1], provider.requests[i + 1]

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
    info, provider = noisy_turn(tmp_path, sqlite_store, steps=24)
    (_, first), (_, second) = compactions(sqlite_store.read(info.id))
    one, two = provider.summaries()
    assert (one.system, one.tools, two.system, two.tools) == (
        SUMMARY_SYSTEM,
        (),
        SUMMARY_SYSTEM,
        (),
    )
    text_a, text_b = texts(one.messages)[0], texts(two.messages)[0]
    assert "# Previous summary" not in text_a
    assert text_b.startswith(
        f"# Previous summary\n[Summary of this session's events 1–{first.watermark};"
    )
    history_b = text_b.rsplit("# History since then\n", 1)[1]
    # The second span holds only steps after the first watermark (emit keys are per step).
    assert '{"key":"k0"}' in text_a
    assert '{"key":"k0"}' not in history_b
    assert "## Facts from the log (exact)" in text_b
    assert second.watermark > first.watermark


def _raises(request: ModelRequest) -> ModelResponse:
    raise ProviderError("the summarizer is overloaded", status=529, retryable=True)


FOUR_TINY = "\n".join(f"{s}\nx" for s in SECTIONS)

BAD: list[tuple[str, Summarizer, str]] = [
    (
        "no_sections",
        summary_text("All good, carry on. " * 40),
        "the summary lacks the sections ## Goal",
    ),
    ("too_short", summary_text(FOUR_TINY), f"the summary is {len(FOUR_TINY)} characters for"),
    ("provider_error", _raises, "the summarizer failed: the summarizer is overloaded"),
]


@pytest.mark.parametrize(("summarize", "why"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_summary_that_fails_validation_is_noted_and_the_raw_tail_is_used(
    tmp_path: Path, sqlite_store: SQLiteStore, summarize: Summarizer, why: str
) -> None:
    info, provider = noisy_turn(tmp_path, sqlite_store, steps=16, model_kw={"summarize": summarize})
    records = sqlite_store.read(info.id)

    cps = compactions(records)
    assert cps
    for _, n in cps:
        assert (n.ok, n.checkpoint) == (False, None)
        assert n.message is not None
        assert n.message.startswith(why)
        assert n.message.endswith("; using the raw history")
        assert n.source_digest == digest_at(sqlite_store, info.id, n.watermark)
    # Nothing was stored, no call claims a checkpoint, and no fragment is passed off as a summary.
    assert sqlite_store.drop_views(info.id) == 0
    assert all(n.checkpoint is None for _, n in model_requests(records))
    i = next(i for i, r in enumerate(provider.requests) if r.purpose == "summary")
    after = provider.requests[i + 1]
    head = texts(after.messages)[0]
    assert head.startswith(f"[Events 1–{cps[0][1].watermark} of this session are not shown")
    assert "could not be summarized" in head
    assert not any(
        "carry on" in t or t.startswith("## Goal")
        for r in provider.turns()
        for t in texts(r.messages)
    )
    assert _raw_tail(after)
