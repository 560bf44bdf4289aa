"""SQLite stores a large event payload as a zlib stream of its canonical bytes.

Everything above the table sees the canonical bytes: reads, `raw`, the chain and `verify`, the
blob references, export and import, the session list's last time and the full-text index. A
database written before (canonical bytes only) reads as it did, and an older Bubu refuses one
that may hold compressed rows.
"""

from __future__ import annotations

import base64
import os
import shutil
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from bubu.errors import LogError, NewerLogError
from bubu.events import BlobRef, Event, FunctionResponse, Text
from bubu.log import codec
from bubu.log import sqlite as sqlite_mod
from bubu.log.migrations import SQLITE_MIGRATIONS
from bubu.log.search import search
from bubu.log.sqlite import COMPRESS_OVER, Packer, SQLiteStore, canonical_payload
from bubu.log.transfer import export_lines, import_lines

from .samples import BLOB

EventFactory = Callable[..., Event]
OLD_FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "sqlite_migration1.db"
LINE = "src/bubu/module.py:{n}: def handler_{n}(request, response):  # line of output\n"


def _result(word: str = "") -> str:
    return "".join(LINE.format(n=n) for n in range(30)) + word


def _response(
    make_event: EventFactory,
    sid: str,
    result: str,
    *,
    ts: int = 1_700_000_000_000,
    blob: BlobRef | None = None,
) -> Event:
    content = FunctionResponse(call_id="c1", name="grep", result=result, blob=blob)
    return make_event(sid, content, role="tool", author="tool", ts=ts)


def _stored(path: Path) -> list[tuple[int, bytes]]:
    raw = sqlite3.connect(path)
    try:
        return [
            (int(s), bytes(p))
            for s, p in raw.execute("SELECT seq, payload FROM events ORDER BY pos")
        ]
    finally:
        raw.close()


def test_a_large_payload_is_stored_compressed_and_reads_back_canonical(
    sqlite_store: SQLiteStore, make_event: EventFactory
) -> None:
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    small = make_event(sid, Text(text="hello"))
    big = _response(make_event, sid, _result())
    encoded = _response(make_event, sid, base64.b64encode(os.urandom(3000)).decode())
    # One event onto a known head (the single-INSERT path), then a batch (the group commit).
    sqlite_store.append(sid, [small], expect=0)
    sqlite_store.append(sid, [big], expect=1)
    sqlite_store.append(sid, [big, encoded, small], expect=2)

    canonical = [codec.encode(e) for e in (small, big, big, encoded, small)]
    stored = dict(_stored(Path(sqlite_store.path)))
    assert len(canonical[1]) > COMPRESS_OVER
    for seq in (2, 3):  # the result: a zlib stream, a fraction of its size
        assert stored[seq][0] == 0x78
        assert len(stored[seq]) < len(canonical[1]) // 2
        assert zlib.decompress(stored[seq]) == canonical[1]
    assert stored[1] == stored[5] == canonical[0]  # small: as it is
    # base64 of random bytes: six bits a character, still a quarter smaller
    assert zlib.decompress(stored[4]) == canonical[3]
    assert len(stored[4]) < len(canonical[3]) * 7 // 8

    records = sqlite_store.read(sid)
    assert [codec.encode(r.event) for r in records] == canonical
    assert [p for _, _, p in sqlite_store.raw(sid)] == canonical
    prev = codec.GENESIS
    for r, payload in zip(records, canonical, strict=True):
        prev = codec.chain(prev, payload)  # the chain is over the canonical bytes
        assert r.hash == prev.hex()
    assert [r.seq for r in sqlite_store.read(sid, kinds=["function_response"])] == [2, 3, 4]
    report = sqlite_store.verify(sid)
    assert report.ok, report.problem
    assert report.digest == prev.hex() == sqlite_store.head(sid).digest


def test_a_compressed_row_reads_the_same_after_reopening_and_read_only(
    tmp_path: Path, make_event: EventFactory
) -> None:
    path = tmp_path / "bubu.db"
    with SQLiteStore(path) as store:
        sid = store.create_session(title="t", workspace="/w").id
        event = _response(make_event, sid, _result())
        store.append(sid, [event], expect=0)
    for readonly in (False, True):
        with SQLiteStore(path, readonly=readonly) as store:
            (r,) = store.read(sid)
            assert codec.encode(r.event) == codec.encode(event)
            assert store.verify(sid).ok


def test_the_session_list_takes_the_last_time_from_a_compressed_event(
    sqlite_store: SQLiteStore, make_event: EventFactory
) -> None:
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    last = _response(make_event, sid, _result(), ts=1_777_000_000_123)
    sqlite_store.append(sid, [make_event(sid, ts=5), last], expect=0)
    assert _stored(Path(sqlite_store.path))[-1][1][0] == 0x78
    (info,) = sqlite_store.sessions()
    assert (info.high_water, info.last_ms) == (2, 1_777_000_000_123)
    assert sqlite_store.session(sid[:8]).last_ms == 1_777_000_000_123


def test_blob_references_inside_a_compressed_payload_are_verified(
    sqlite_store: SQLiteStore, make_event: EventFactory
) -> None:
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    ref = BlobRef(sha256=codec.sha256_hex(BLOB), size=len(BLOB), lines=1)
    kept = _response(make_event, sid, _result(), blob=ref)
    sqlite_store.append(sid, [kept], expect=0, blobs=[BLOB])
    assert _stored(Path(sqlite_store.path))[0][1][0] == 0x78
    assert sqlite_store.verify(sid).ok
    other = sqlite_store.create_session(title="t2", workspace="/w").id
    missing = _response(
        make_event, other, _result(), blob=BlobRef(sha256="ab" * 32, size=3, lines=1)
    )
    sqlite_store.append(other, [missing], expect=0)
    report = sqlite_store.verify(other)
    assert not report.ok
    assert report.first_bad_seq == 1
    assert "blob" in (report.problem or "")


def test_export_carries_canonical_bytes_and_an_import_compresses_again(
    tmp_path: Path, make_event: EventFactory
) -> None:
    with SQLiteStore(tmp_path / "a.db") as src:
        sid = src.create_session(title="t", workspace="/w").id
        events = [make_event(sid), _response(make_event, sid, _result("zebra"))]
        src.append(sid, events, expect=0)
        lines = list(export_lines(src, src.session(sid)))
        head = src.head(sid)
    assert b"x\x01" not in b"".join(lines)
    for line, event in zip(lines[-2:], events, strict=True):
        assert line.startswith(b'{"event":' + codec.encode(event) + b',"hash":')
    with SQLiteStore(tmp_path / "b.db") as dst:
        info, got = import_lines(dst, lines)
        assert (info.id, got) == (sid, head)
        copied = dst.read(sid, upto=len(events))  # (the import notes its origin after them)
        assert [codec.encode(r.event) for r in copied] == [codec.encode(e) for e in events]
        assert dst.verify(sid).ok
    assert _stored(tmp_path / "b.db")[1][1][0] == 0x78


def test_full_text_search_finds_a_word_inside_a_compressed_result(
    sqlite_store: SQLiteStore, make_event: EventFactory
) -> None:
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    sqlite_store.append(sid, [_response(make_event, sid, _result("okapi sighting"))], expect=0)
    assert _stored(Path(sqlite_store.path))[0][1][0] == 0x78
    (hit,) = search(sqlite_store, '"okapi sighting"')
    assert (hit.session, hit.seq) == (sid, 1)
    assert "okapi sighting" in hit.snippet
    assert search(sqlite_store, "giraffe") == []


def test_a_damaged_compressed_row_fails_verify_at_its_seq(
    sqlite_store: SQLiteStore, make_event: EventFactory
) -> None:
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    events = [make_event(sid), _response(make_event, sid, _result()), make_event(sid)]
    sqlite_store.append(sid, events, expect=0)
    path = Path(sqlite_store.path)
    (_, payload) = _stored(path)[1]
    assert payload[0] == 0x78
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        raw.execute("DROP TRIGGER events_no_update")
        damaged = payload[:20] + bytes([payload[20] ^ 0xFF]) + payload[21:]
        raw.execute("UPDATE events SET payload = ? WHERE seq = 2", (damaged,))
    finally:
        raw.close()
    with SQLiteStore(path) as store:
        report = store.verify(sid)
        assert not report.ok
        assert report.first_bad_seq == 2
        with pytest.raises(LogError):
            store.read(sid)


def test_a_stored_stream_that_would_inflate_past_any_event_is_a_damaged_row(
    sqlite_store: SQLiteStore, make_event: EventFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planted zlib bomb is never inflated whole: past the cap it is read as a damaged row."""
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    events = [make_event(sid), _response(make_event, sid, _result()), make_event(sid)]
    sqlite_store.append(sid, events, expect=0)
    (_, payload) = _stored(Path(sqlite_store.path))[1]
    whole = canonical_payload(payload)
    assert whole != payload
    assert whole.startswith(b"{")
    bomb = zlib.compress(b"{" + b" " * (8 << 20))
    assert len(bomb) < 16 << 10
    monkeypatch.setattr(sqlite_mod, "MAX_INFLATED", 1 << 20)
    assert canonical_payload(bomb) == bomb
    monkeypatch.setattr(sqlite_mod, "MAX_INFLATED", len(whole) - 1)
    assert canonical_payload(payload) == payload
    report = sqlite_store.verify(sid)
    assert not report.ok
    assert report.first_bad_seq == 2


def test_the_packer_keeps_small_and_incompressible_bytes_and_its_streams_stand_alone() -> None:
    packer = Packer()
    small = b'{"kind":"text","text":"' + b"a" * (COMPRESS_OVER - 30) + b'"}'
    assert len(small) <= COMPRESS_OVER
    assert packer.stored(small) == small
    noise = b'{"r":"' + os.urandom(2000) + b'"}'  # nothing to gain: stored as it is
    assert packer.stored(noise) == noise
    texts = [b'{"r":"' + _result(f"word{i}").encode() + b'"}' for i in range(3)]
    packed = [packer.stored(t) for t in [*texts, texts[0]]]
    for p, t in zip(packed, [*texts, texts[0]], strict=True):
        assert p[0] == 0x78
        assert len(p) < len(t) // 2
        assert zlib.decompress(p) == t  # a complete zlib stream of its own, checksum and all
    assert packed[3] == packed[0]  # nothing of an earlier payload leaks into a later stream
    for value in (small, noise, *texts):
        assert canonical_payload(packer.stored(value)) == value
    assert canonical_payload(b"x not zlib") == b"x not zlib"  # damaged: left for the chain check
    damaged = bytearray(packed[1])
    damaged[-1] ^= 1  # the checksum no longer matches
    assert canonical_payload(bytes(damaged)) == bytes(damaged)


# -- older databases, older Bubus ---------------------------------------------------------------


def test_an_old_database_reads_and_verifies_and_its_rows_stay_as_written(
    tmp_path: Path, make_event: EventFactory
) -> None:
    path = tmp_path / "old.db"
    shutil.copyfile(OLD_FIXTURE, path)
    before = _stored(path)
    assert all(p[0] == ord("{") for _, p in before)  # canonical bytes only
    with SQLiteStore(path) as store:
        assert 4 in {v for v, _ in store.migrations()}
        for info in store.sessions():
            report = store.verify(info.id)
            assert report.ok, report.problem
            assert [p for _, _, p in store.raw(info.id)] == [
                codec.encode(r.event) for r in store.read(info.id)
            ]
        sid = store.sessions()[0].id
        hw = store.head(sid).high_water
        store.append(sid, [_response(make_event, sid, _result())], expect=hw)
        assert store.verify(sid).ok
    after = _stored(path)
    assert after[: len(before)] == before  # no old row was rewritten
    assert after[-1][1][0] == 0x78


def test_a_database_without_the_compression_step_opens_read_only(
    tmp_path: Path, make_event: EventFactory
) -> None:
    path = tmp_path / "bubu.db"
    with SQLiteStore(path) as store:
        sid = store.create_session(title="t", workspace="/w").id
        store.append(sid, [make_event(sid)], expect=0)
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("DELETE FROM bubu_migrations WHERE version >= 4")  # as the Bubu before it left it
    raw.close()
    with SQLiteStore(path, readonly=True) as store:
        assert store.verify(sid).ok
        assert [v for v, _ in store.migrations()] == [1, 2, 3]
    # Without a step that reading needs, a read-only open still refuses.
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("DELETE FROM bubu_migrations WHERE version = 3")
    raw.close()
    with pytest.raises(LogError, match="older Bubu"):
        SQLiteStore(path, readonly=True)


def test_a_bubu_before_compression_refuses_a_database_that_may_hold_it(
    tmp_path: Path, make_event: EventFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bubu.db"
    with SQLiteStore(path) as store:
        sid = store.create_session(title="t", workspace="/w").id
        store.append(sid, [_response(make_event, sid, _result())], expect=0)
    older = tuple(m for m in SQLITE_MIGRATIONS if m.version < 4)
    monkeypatch.setattr(sqlite_mod, "SQLITE_MIGRATIONS", older)
    for readonly in (False, True):
        latest = max(m.version for m in SQLITE_MIGRATIONS)
        with pytest.raises(NewerLogError, match=rf"newer Bubu \(migration {latest}"):
            SQLiteStore(path, readonly=readonly)
