"""Bad input: damaged files, unknown kinds, text UTF-8 cannot carry, NaN, huge payloads.

Each is either refused with a clear BubuError (one sentence: what happened, what to do) or round
trips exactly; and a refused append leaves everything already committed as it was.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import msgspec
import pytest

from backends import tamper_payload
from bubu.errors import BubuError, CorruptLog, StorageError
from bubu.events import (
    Actions,
    BlobRef,
    Event,
    FunctionCall,
    FunctionResponse,
    Text,
    Thinking,
)
from bubu.log import codec
from bubu.log.codec import InvalidEvent
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Appended, Store

EventFactory = Callable[..., Event]
PAGE = 4096


@pytest.fixture(scope="module")
def healthy_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed database of a few hundred kilobytes: 300 events and a blob."""
    path = tmp_path_factory.mktemp("healthy") / "bubu.db"
    with closing(SQLiteStore(path)) as store:
        sid = store.create_session(title="healthy", workspace="/w").id
        blob = random.Random(1).randbytes(30_000)
        ref = BlobRef(sha256=codec.sha256_hex(blob), size=len(blob), lines=blob.count(b"\n"))
        for i in range(30):
            batch = [_text(sid, f"{i}.{j} " + "y" * 900, ts=i) for j in range(10)]
            if i == 7:
                batch[3] = msgspec.structs.replace(
                    batch[3],
                    content=FunctionResponse(call_id="c", name="grep", result="…", blob=ref),
                )
            store.append(sid, batch, expect=i * 10, blobs=[blob] if i == 7 else [])
    return path


def _text(session: str, text: str, ts: int = 1) -> Event:
    from bubu.events import make

    return make(session=session, role="user", author="user", ts=ts, content=Text(text=text))


def _probe(path: Path) -> str:
    """Open, list, read and verify everything; 'clean' if all looks sound, else what noticed."""
    try:
        with closing(SQLiteStore(path)) as store:
            reports = [store.verify(s.id) for s in store.sessions()]
            for s in store.sessions():
                store.head(s.id)
                store.read(s.id)
            integrity = store.integrity_check()
    except (CorruptLog, StorageError) as e:
        message = str(e)
        assert str(path) in message or "database" in message, message
        assert "\n" not in message
        return f"refused: {message}"
    if integrity != "ok":
        return f"integrity: {integrity}"
    bad = [r for r in reports if not r.ok]
    if bad:
        return f"verify: {bad[0].problem}"
    return "clean"


def test_the_healthy_database_is_clean(healthy_db: Path) -> None:
    assert _probe(healthy_db) == "clean"


@pytest.mark.parametrize("seed", range(6))
def test_random_bytes_over_pages_are_noticed(healthy_db: Path, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    damaged = tmp_path / "damaged.db"
    shutil.copyfile(healthy_db, damaged)
    pages = damaged.stat().st_size // PAGE
    with damaged.open("r+b") as f:
        for _ in range(rng.randint(1, 3)):
            f.seek(rng.randrange(1, pages) * PAGE)  # page 1 (the header) has its own test
            f.write(rng.randbytes(PAGE))
    assert _probe(damaged) != "clean"


@pytest.mark.parametrize(
    "keep",
    [lambda size: 100, lambda size: PAGE, lambda size: size // 2, lambda size: size - PAGE],
    ids=["100-bytes", "one-page", "half", "all-but-a-page"],
)
def test_a_truncated_database_is_noticed(
    healthy_db: Path, tmp_path: Path, keep: Callable[[int], int]
) -> None:
    damaged = tmp_path / "truncated.db"
    shutil.copyfile(healthy_db, damaged)
    size = damaged.stat().st_size
    os.truncate(damaged, keep(size))
    assert _probe(damaged) != "clean"


def test_a_damaged_header_is_refused(healthy_db: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "header.db"
    shutil.copyfile(healthy_db, damaged)
    with damaged.open("r+b") as f:
        f.write(b"definitely not SQLite")
    with pytest.raises(CorruptLog, match=r"header.db is not a readable Bubu database .*backup"):
        SQLiteStore(damaged)


def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not a database\n" * 200)
    before = notes.read_bytes()
    with pytest.raises(
        CorruptLog, match=r"notes.txt is not a readable Bubu database \(file is not a database\)"
    ):
        SQLiteStore(notes)
    assert notes.read_bytes() == before


def test_a_directory_or_a_missing_parent_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        SQLiteStore(tmp_path)
    with pytest.raises(StorageError, match="does not exist"):
        SQLiteStore(tmp_path / "missing" / "bubu.db")


# -- damaged or unknown events ----------------------------------------------------------------


def _insert_raw(store: SQLiteStore, session: str, payload: bytes) -> int:
    head = store.head(session)
    digest = codec.chain(bytes.fromhex(head.digest), payload)
    raw = sqlite3.connect(store.path, isolation_level=None)
    try:
        (sid,) = raw.execute("SELECT sid FROM sessions WHERE id = ?", (session,)).fetchone()
        raw.execute(
            "INSERT INTO events(pos, kind, payload, hash) VALUES (?,?,?,?)",
            ((sid << 32) | (head.high_water + 1), "hologram", payload, digest),
        )
    finally:
        raw.close()
    return head.high_water + 1


def test_an_unknown_event_kind_is_named_and_the_prefix_stays_readable(
    sqlite_store: SQLiteStore,
) -> None:
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    sqlite_store.append(sid, [_text(sid, "a"), _text(sid, "b")], expect=0)
    obj = json.loads(codec.encode(_text(sid, "c")))
    obj["content"] = {"kind": "hologram", "frames": 24}
    seq = _insert_raw(sqlite_store, sid, codec.canonical_json(obj))
    with pytest.raises(
        CorruptLog, match=f"at seq {seq} cannot be read: unknown event kind 'hologram'"
    ):
        sqlite_store.read(sid)
    assert [r.event.content for r in sqlite_store.read(sid, upto=2)] == [
        Text(text="a"),
        Text(text="b"),
    ]
    report = sqlite_store.verify(sid)
    assert (report.ok, report.first_bad_seq) == (False, seq)
    assert report.problem is not None
    assert "hologram" in report.problem


def test_a_damaged_event_that_names_a_blob_is_reported_not_raised(store: Store) -> None:
    sid = store.create_session(title="t", workspace="/w").id
    data = b"offloaded output\n" * 100
    ref = BlobRef(sha256=codec.sha256_hex(data), size=len(data), lines=100)
    response = msgspec.structs.replace(
        _text(sid, ""), content=FunctionResponse(call_id="c", name="grep", result="…", blob=ref)
    )
    store.append(sid, [_text(sid, "a"), response, _text(sid, "b")], expect=0, blobs=[data])
    tamper_payload(store, sid, 2, b'"sha256"', b'"sha257"')
    report = store.verify(sid)
    assert (report.ok, report.first_bad_seq) == (False, 2)
    assert report.problem is not None


# -- events that cannot be encoded ------------------------------------------------------------


def _refused_without_loss(
    store: Store, sid: str, head: Appended, bad: list[Event], match: str
) -> None:
    before = store.read(sid)
    with pytest.raises(InvalidEvent, match=match) as e:
        store.append(sid, [_text(sid, "fine"), *bad], expect=head.high_water, durable=True)
    assert isinstance(e.value, BubuError)
    assert store.head(sid) == head.head
    assert store.read(sid) == before
    assert store.verify(sid).ok


SURROGATE = "bad \ud83d half"


def _surrogate_events(sid: str) -> list[Event]:
    base = _text(sid, "x")
    return [
        _text(sid, SURROGATE),
        msgspec.structs.replace(base, content=Thinking(text="ok", signature=SURROGATE)),
        msgspec.structs.replace(
            base, content=FunctionCall(call_id="c", name="grep", arguments={"pattern": SURROGATE})
        ),
        msgspec.structs.replace(
            base, content=FunctionCall(call_id="c", name="grep", arguments={SURROGATE: 1})
        ),
        msgspec.structs.replace(base, content=FunctionCall(call_id="c", name=SURROGATE)),
        msgspec.structs.replace(
            base, content=None, actions=Actions(state_delta={"k": [SURROGATE]})
        ),
        msgspec.structs.replace(base, turn=SURROGATE),
    ]


def test_lone_surrogates_are_refused_clearly_and_nothing_is_written(store: Store) -> None:
    sid = store.create_session(title="t", workspace="/w").id
    head = store.append(sid, [_text(sid, "kept")], expect=0, durable=True)
    for bad in _surrogate_events(sid):
        _refused_without_loss(store, sid, head, [bad], "not valid Unicode.*sanitize_text")


def test_sanitized_text_round_trips(store: Store) -> None:
    sid = store.create_session(title="t", workspace="/w").id
    clean = codec.sanitize_text(SURROGATE)
    clean.encode("utf-8")
    odd = "nul\x00 bell\x07 bom\ufeff rtl\u202e max\U0010ffff nonchar\ufffe"
    assert codec.sanitize_text(odd) == odd
    events = [_text(sid, clean), _text(sid, odd)]
    store.append(sid, events, expect=0)
    assert [r.event for r in store.read(sid)] == events


def test_a_title_with_a_lone_surrogate_is_stored_sanitized(store: Store) -> None:
    info = store.create_session(title=f"title {SURROGATE}", workspace="/w")
    stored = store.session(info.id).title
    assert stored == codec.sanitize_text(f"title {SURROGATE}")
    stored.encode("utf-8")


@pytest.mark.parametrize(
    "number", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"]
)
def test_non_finite_numbers_are_refused_clearly(store: Store, number: float) -> None:
    sid = store.create_session(title="t", workspace="/w").id
    head = store.append(sid, [_text(sid, "kept")], expect=0)
    base = _text(sid, "x")
    for bad in (
        msgspec.structs.replace(
            base, content=FunctionCall(call_id="c", name="f", arguments={"x": number})
        ),
        msgspec.structs.replace(
            base,
            content=FunctionCall(call_id="c", name="f", arguments={"deep": [{"x": [1, number]}]}),
        ),
        msgspec.structs.replace(
            base,
            content=FunctionResponse(call_id="c", name="f", result="r", native={"score": number}),
        ),
        msgspec.structs.replace(base, actions=Actions(state_delta={"x": number})),
    ):
        _refused_without_loss(store, sid, head, [bad], "non-finite number")
    with pytest.raises(InvalidEvent, match="non-finite"):
        codec.args_digest({"x": number})


# -- size -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_50_mb_payload_and_blob_round_trip(store: Store) -> None:
    sid = store.create_session(title="big", workspace="/w").id
    line = "0123456789 abcdef — ünïcødé ✓\n"
    result = line * (50_000_000 // len(line.encode()))
    blob = result.encode()
    assert len(blob) >= 49_000_000
    ref = BlobRef(sha256=codec.sha256_hex(blob), size=len(blob), lines=blob.count(b"\n"))
    big = msgspec.structs.replace(
        _text(sid, ""),
        content=FunctionResponse(call_id="c", name="run_command", result=result, blob=ref),
    )
    head = store.append(
        sid, [_text(sid, "before"), big, _text(sid, "after")], expect=0, durable=True, blobs=[blob]
    )
    records = store.read(sid)
    assert [r.seq for r in records] == [1, 2, 3]
    content = records[1].event.content
    assert isinstance(content, FunctionResponse)
    assert content.result == result
    assert store.blob(ref.sha256) == blob
    report = store.verify(sid)
    assert report.ok
    assert report.digest == head.digest
