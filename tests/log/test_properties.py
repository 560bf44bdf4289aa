"""Properties of the log over generated sessions: read-back, prefix digests, tamper evidence."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bubu.events import BlobRef, Event, FunctionResponse, SystemNote, TurnEnded, TurnStarted
from bubu.log import codec
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Head, Store
from hypo import examples

from .strategies import events

# Each example makes its own session (or its own file), so a function-scoped store is safe.
SETTINGS = settings(
    max_examples=examples(50),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

batches = st.lists(st.lists(events(), min_size=1, max_size=6), min_size=1, max_size=6)


def _retarget(evs: list[Event], session: str) -> tuple[list[Event], list[bytes]]:
    """The events moved to `session`, with every blob reference pointing at bytes that exist."""
    out: list[Event] = []
    blobs: list[bytes] = []
    for ev in evs:
        c = ev.content
        moved = msgspec.structs.replace(ev, session=session)
        if isinstance(c, FunctionResponse) and c.blob is not None:
            data = f"{c.call_id}\n{c.result}".encode()
            ref = BlobRef(sha256=codec.sha256_hex(data), size=len(data), lines=data.count(b"\n"))
            moved = msgspec.structs.replace(moved, content=msgspec.structs.replace(c, blob=ref))
            blobs.append(data)
        out.append(moved)
    return out, blobs


def _append_all(
    store: Store, session: str, generated: list[list[Event]]
) -> tuple[list[Event], list[Head]]:
    appended: list[Event] = []
    heads: list[Head] = []
    expect = 0
    for batch in generated:
        evs, blobs = _retarget(batch, session)
        # Not durable: what is checked here is content and order, and fsyncs only cost time.
        head = store.append(session, evs, expect=expect, blobs=blobs)
        assert head.high_water == expect + len(evs)
        expect = head.high_water
        appended.extend(evs)
        heads.append(head)
    return appended, heads


@pytest.mark.heavy
@SETTINGS
@given(generated=batches)
def test_any_appends_read_back_identically_with_gapless_seq(
    store: Store, generated: list[list[Event]]
) -> None:
    sid = store.create_session(title="prop", workspace="/w").id
    appended, _ = _append_all(store, sid, generated)
    records = store.read(sid)
    assert [r.seq for r in records] == list(range(1, len(appended) + 1))
    assert [r.event for r in records] == appended
    assert [codec.encode(r.event) for r in records] == [codec.encode(e) for e in appended]


@pytest.mark.heavy
@SETTINGS
@given(generated=batches)
def test_every_prefix_digest_is_the_recomputed_chain(
    store: Store, generated: list[list[Event]]
) -> None:
    sid = store.create_session(title="prop", workspace="/w").id
    appended, heads = _append_all(store, sid, generated)
    records = store.read(sid)
    prev = codec.GENESIS
    for k, (ev, rec) in enumerate(zip(appended, records, strict=True), start=1):
        prev = codec.chain(prev, codec.encode(ev))
        assert rec.hash == prev.hex(), f"digest at seq {k}"
        # The prefix 1..k, read on its own, ends in the same digest.
        assert store.read(sid, upto=k)[-1].hash == rec.hash
    for head in heads:
        assert records[head.high_water - 1].hash == head.digest
    report = store.verify(sid)
    if not report.ok and "ended twice" in (report.problem or ""):
        return  # random events can end one turn twice: verify rightly says so
    assert report.ok
    assert (report.high_water, report.digest) == (heads[-1].high_water, heads[-1].digest)


def _ends_each_turn_once(generated: list[list[Event]]) -> bool:
    """No turn of the generated log ends twice without a start between (verify refuses that)."""
    ended: set[str | None] = set()
    for ev in (e for batch in generated for e in batch):
        note = ev.content.note if isinstance(ev.content, SystemNote) else None
        if isinstance(note, TurnStarted):
            ended.discard(ev.turn)
        elif isinstance(note, TurnEnded):
            if ev.turn in ended:
                return False
            ended.add(ev.turn)
    return True


@st.composite
def _tampering(draw: st.DrawFn) -> tuple[list[list[Event]], int, str, int, int]:
    generated = draw(batches.filter(_ends_each_turn_once))
    n = sum(len(b) for b in generated)
    seq = draw(st.integers(min_value=1, max_value=n))
    column = draw(st.sampled_from(["payload", "hash"]))
    offset = draw(st.integers(min_value=0, max_value=10**6))
    flip = draw(st.integers(min_value=1, max_value=255))
    return generated, seq, column, offset, flip


@pytest.mark.heavy
@settings(max_examples=examples(50), deadline=None)
@given(case=_tampering())
def test_changing_any_byte_of_any_event_is_caught_at_its_seq(
    case: tuple[list[list[Event]], int, str, int, int],
) -> None:
    generated, seq, column, offset, flip = case
    with tempfile.TemporaryDirectory() as tmp:
        original, copy = Path(tmp) / "log.db", Path(tmp) / "copy.db"
        with closing(SQLiteStore(original)) as store:
            sid = store.create_session(title="prop", workspace="/w").id
            _append_all(store, sid, generated)
            assert store.verify(sid).ok
        shutil.copyfile(original, copy)  # closed: the WAL is checkpointed into the file

        raw = sqlite3.connect(copy, isolation_level=None)
        try:
            raw.execute("DROP TRIGGER events_no_update")
            (value,) = raw.execute(f"SELECT {column} FROM events WHERE seq = ?", (seq,)).fetchone()
            data = bytearray(value)
            i = offset % len(data)
            data[i] ^= flip
            raw.execute(f"UPDATE events SET {column} = ? WHERE seq = ?", (bytes(data), seq))
        finally:
            raw.close()

        with closing(SQLiteStore(copy)) as tampered:
            report = tampered.verify(sid)
        assert not report.ok
        assert report.first_bad_seq == seq
        assert report.problem is not None
        with closing(SQLiteStore(original)) as untouched:
            assert untouched.verify(sid).ok
