"""A checkpoint is a derived view: when it is missing, unreadable or built from a different prefix,
the next runner ignores it and rebuilds it before any model call uses it (DESIGN §1, §6)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from bubu.context.compaction import VIEW_KIND, CheckpointData
from bubu.engine.session import new_session, start_turn
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store, View

from .helpers import (
    Model,
    compactions,
    digest_at,
    emit_line,
    host,
    model,
    model_requests,
    noisy_lines,
    noisy_payloads,
    texts,
    write_script,
)

STEPS = 16


def _two_turns(
    tmp_path: Path, store: SQLiteStore, between: Callable[[Store, str, View], None]
) -> tuple[str, Model, int]:
    """Turn 1 compacts once; `between` tampers with its checkpoint; turn 2 runs one more step.
    Returns the session, the provider of turn 2, and the seq where turn 2 starts."""
    lines: list[dict[str, object]] = [
        *noisy_lines(STEPS),
        emit_line("again"),
        {"text": "done again"},
    ]
    script = write_script(tmp_path / "s.jsonl", lines)
    payloads = {**noisy_payloads(STEPS), "again": b"small\n"}
    ws = tmp_path / "ws"
    ws.mkdir()
    first = model(script)
    info = new_session(store, task="make noise", workspace=ws, model=first.spec)
    assert start_turn(host(store, first, payloads), info, "make noise") == "completed"
    ((_, cp),) = compactions(store.read(info.id))
    assert cp.checkpoint is not None
    view = store.get_view(VIEW_KIND, info.id, cp.checkpoint)
    assert view is not None
    between(store, info.id, view)
    start = store.head(info.id).high_water
    second = model(script)
    assert start_turn(host(store, second, payloads), info, "again") == "completed"
    return info.id, second, start


def _drop(store: Store, session: str, view: View) -> None:
    assert store.drop_views(session) == 1


def _wrong_digest(store: Store, session: str, view: View) -> None:
    store.put_view(
        View(kind=view.kind, session=session, key=view.key, source_high_water=view.source_high_water,
             source_digest="0" * 64, data=view.data)
    )  # fmt: skip


def _wrong_data(store: Store, session: str, view: View) -> None:
    # The row claims the right prefix, but what it holds was built from another one.
    data = msgspec.json.decode(view.data, type=CheckpointData)
    forged = msgspec.structs.replace(data, source_digest="1" * 64, summary="forged")
    store.put_view(
        View(kind=view.kind, session=session, key=view.key, source_high_water=view.source_high_water,
             source_digest=view.source_digest, data=msgspec.json.encode(forged))
    )  # fmt: skip


def _garbage(store: Store, session: str, view: View) -> None:
    store.put_view(
        View(kind=view.kind, session=session, key=view.key, source_high_water=view.source_high_water,
             source_digest=view.source_digest, data=b"{not json")
    )  # fmt: skip


@pytest.mark.parametrize("tamper", [_drop, _wrong_digest, _wrong_data, _garbage])
def test_the_next_runner_rebuilds_a_missing_or_mismatched_checkpoint(
    tmp_path: Path, sqlite_store: SQLiteStore, tamper: Callable[[Store, str, View], None]
) -> None:
    sid, provider, start = _two_turns(tmp_path, sqlite_store, tamper)
    records = sqlite_store.read(sid)
    (_, old), (seq, new) = compactions(records)

    # Rebuilt from the log, at the recorded watermark, before turn 2's first model call.
    assert seq > start
    assert (new.ok, new.watermark, new.checkpoint) == (True, old.watermark, old.checkpoint)
    assert new.source_digest == digest_at(sqlite_store, sid, new.watermark)
    assert new.checkpoint is not None
    view = sqlite_store.get_view(VIEW_KIND, sid, new.checkpoint)
    assert view is not None
    assert view.source_digest == new.source_digest
    data = msgspec.json.decode(view.data, type=CheckpointData)
    assert (data.source_digest, data.watermark) == (new.source_digest, new.watermark)
    assert "forged" not in data.summary
    # The rebuild summarized everything up to the watermark, and turn 2's calls use it.
    (summary,) = provider.summaries()
    assert '{"key":"k0"}' in texts(summary.messages)[0]
    later = [n for s, n in model_requests(records) if s > start]
    assert later
    assert all(n.checkpoint == new.checkpoint for n in later)
    first = provider.turns()[0]
    assert texts(first.messages)[0].startswith(
        f"[Summary of this session's events 1–{new.watermark};"
    )


def test_a_sound_checkpoint_is_reused_without_a_new_summary(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    sid, provider, start = _two_turns(tmp_path, sqlite_store, lambda *_: None)
    records = sqlite_store.read(sid)

    ((_, cp),) = compactions(records)
    assert provider.summaries() == []
    later = [n for s, n in model_requests(records) if s > start]
    assert later
    assert all(n.checkpoint == cp.checkpoint for n in later)
