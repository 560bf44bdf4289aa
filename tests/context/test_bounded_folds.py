"""The folds a running session keeps hold its window, not its length: what a valid checkpoint
covers is forgotten (the log keeps it), and the next request is the same either way."""

from __future__ import annotations

from pathlib import Path

from bubu.context.policy import ContextPolicy
from bubu.log.sqlite import SQLiteStore
from bubu.projections.request import Prefix, build, fold_request
from bubu.projections.turn import fold

from .helpers import compactions, noisy_turn

PREFIX = Prefix(model="m", system="s", tools=())


def test_a_fold_forgets_what_the_valid_checkpoint_covers_and_builds_the_same_request(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    info, _ = noisy_turn(tmp_path, sqlite_store, steps=22)
    records = sqlite_store.read(info.id)
    cps = compactions(records)
    assert len(cps) == 2
    whole = fold_request(records, ContextPolicy())
    assert whole.valid is not None
    assert whole.valid.watermark == cps[-1][1].watermark
    # Only the steps after the last valid watermark are kept.
    assert whole.context.entries
    assert all(e.first_seq > whole.valid.watermark for e in whole.context.entries)
    # Folding in two parts (across the compactions) gives the same request as one fold, and
    # the same as a fold that never forgot anything (the raw tail above the watermark).
    cut = cps[0][0] + 3
    parts = fold_request(records[:cut], ContextPolicy())
    for r in records[cut:]:
        parts.apply(r)
    a = build(whole, PREFIX, ordinal=22, blobs={})
    b = build(parts, PREFIX, ordinal=22, blobs={})
    assert (a.digest, a.estimate) == (b.digest, b.estimate)
    assert a.request.messages == b.request.messages


def test_a_turn_fold_retires_the_calls_a_checkpoint_covers(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    info, _ = noisy_turn(tmp_path, sqlite_store, steps=22)
    records = sqlite_store.read(info.id)
    watermark = compactions(records)[-1][1].watermark
    t = fold(records)
    assert t.model_responses == 23
    assert t.calls
    assert all((c.outcome_seq or 0) > watermark or c is t.last_outcome for c in t.calls.values())
    assert not t.open_calls
