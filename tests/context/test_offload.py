"""Offloading large tool results (DESIGN §6): the threshold, the placeholder, hot and cold results,
and the inline fallback when the blob cannot be stored. In-process engine on a real SQLite file."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from bubu.engine.session import new_session, start_turn
from bubu.errors import StorageError
from bubu.events import Event
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Appended, Lease

from .helpers import config, emit_line, host, model, noise, responses, results, sha, write_script


def _run(
    tmp_path: Path,
    store: SQLiteStore,
    payloads: dict[str, bytes],
    keys: Sequence[str],
    **kw: object,
) -> tuple[str, list[str]]:
    """Run one turn that emits each key in its own step, then ends; the session id and turn
    texts."""
    script = write_script(tmp_path / "s.jsonl", [*(emit_line(k) for k in keys), {"text": "done"}])
    provider = model(script)
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    info = new_session(store, task="emit", workspace=ws, model=provider.spec)
    assert start_turn(host(store, provider, payloads, **kw), info, "emit") == "completed"
    return info.id, [r.content for req in provider.turns() for r in results(req)]


def test_a_result_up_to_the_threshold_stays_inline_and_one_byte_more_is_offloaded(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    payloads = {"below": noise(8191), "at": noise(8192, "at"), "above": noise(8193, "above")}
    sid, _ = _run(tmp_path, sqlite_store, payloads, ["below", "at", "above"], config=config(None))

    below, at, above = (r for _, r in responses(sqlite_store.read(sid)))
    assert (below.blob, below.result) == (None, payloads["below"].decode())
    assert (at.blob, at.result) == (None, payloads["at"].decode())
    assert above.blob is not None
    assert (above.blob.sha256, above.blob.size) == (sha(payloads["above"]), 8193)
    assert above.blob.lines == payloads["above"].count(b"\n")
    assert sqlite_store.blob(above.blob.sha256) == payloads["above"]
    assert above.result.startswith("[large result of emit stored whole")
    assert sqlite_store.verify(sid).ok


def test_the_threshold_is_configurable(tmp_path: Path, sqlite_store: SQLiteStore) -> None:
    payloads = {"a": noise(3000)}
    sid, _ = _run(tmp_path, sqlite_store, payloads, ["a"], config=config(None, offload_bytes=2999))

    ((_, r),) = responses(sqlite_store.read(sid))
    assert r.blob is not None
    assert r.blob.size == 3000


def test_the_placeholder_names_tool_size_lines_hash_handle_and_shows_head_and_tail(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    data = noise(20_000, "big")
    lines = data.decode().splitlines()
    sid, _ = _run(tmp_path, sqlite_store, {"big": data}, ["big"], config=config(None))

    ((_, r),) = responses(sqlite_store.read(sid))
    text = r.result
    digest = sha(data)
    assert r.blob is not None
    assert r.blob.lines == len(lines)
    assert text.startswith(
        f"[large result of emit stored whole: 20,000 bytes, {len(lines):,} lines, sha256 {digest}]"
    )
    assert f"handle: {digest}\n" in text
    assert "read_result{handle, offset, limit}" in text
    assert "search_result{handle, pattern}" in text
    head, tail = text.split("--- first lines ---\n")[1].split("--- last lines ---\n")
    assert head.splitlines()[0] == lines[0]
    assert tail.splitlines()[-1] == lines[-1]
    # Only an excerpt: the middle of the result is not inline, and the placeholder stays small.
    assert lines[len(lines) // 2] not in text
    assert len(text.encode()) < 2000


def test_the_newest_result_is_whole_until_another_step_follows(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    data = noise(12_000, "big")
    payloads = {"big": data, "small": b"small result\n"}
    _, seen = _run(tmp_path, sqlite_store, payloads, ["big", "small"], config=config(None))

    # Request 2 holds the big result whole (hot); request 3 shows it as a placeholder (cold).
    assert seen[0] == data.decode()
    assert seen[1].startswith("[large result of emit stored whole: 12,000 bytes")
    assert f"handle: {sha(data)}" in seen[1]
    assert seen[2] == "small result\n"


def test_a_result_larger_than_the_hot_limit_is_a_placeholder_even_when_newest(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    data = noise(40_000, "huge")
    _, seen = _run(tmp_path, sqlite_store, {"huge": data}, ["huge"], config=config(None))

    (newest,) = seen
    assert newest.startswith("[large result of emit stored whole: 40,000 bytes")


def test_more_hot_steps_keep_more_results_whole(tmp_path: Path, sqlite_store: SQLiteStore) -> None:
    payloads = {"a": noise(10_000, "a"), "b": noise(10_000, "b"), "c": b"c\n"}
    _, seen = _run(
        tmp_path, sqlite_store, payloads, ["a", "b", "c"], config=config(None, hot_steps=2)
    )

    # Requests: [a] · [a, b] · [a, b, c]: a stays whole while it is one of the two newest steps.
    assert seen[0] == seen[1] == payloads["a"].decode()
    assert seen[2] == payloads["b"].decode()
    assert seen[3].startswith("[large result of emit")
    assert seen[4] == payloads["b"].decode()


class BlobFailure(SQLiteStore):
    """A store whose first append carrying blobs fails, as a full disk would make it."""

    failed = False

    def append(
        self,
        session: str,
        events: Sequence[Event],
        *,
        expect: int,
        durable: bool = False,
        lease: Lease | None = None,
        blobs: Sequence[bytes] = (),
    ) -> Appended:
        """Fail once when blobs come along; otherwise append."""
        if blobs and not self.failed:
            self.failed = True
            raise StorageError("the disk is full (simulated)")
        return super().append(
            session, events, expect=expect, durable=durable, lease=lease, blobs=blobs
        )


@pytest.fixture
def failing(tmp_path: Path) -> Iterator[BlobFailure]:
    """A store in `tmp_path` whose first append with blobs fails."""
    store = BlobFailure(tmp_path / "bubu.db")
    try:
        yield store
    finally:
        store.close()


def _no_dangling_blob(store: SQLiteStore, sid: str) -> None:
    for _, r in responses(store.read(sid)):
        if r.blob is not None:
            assert store.blob(r.blob.sha256) is not None, r.blob
    assert store.verify(sid).ok


def test_when_storing_the_blob_fails_the_whole_result_stays_inline(
    tmp_path: Path, failing: BlobFailure
) -> None:
    first, second = noise(20_000, "first"), noise(20_000, "second")
    payloads = {"1": first, "2": second}
    sid, seen = _run(tmp_path, failing, payloads, ["1", "2"], config=config(None))

    rs = responses(failing.read(sid))
    assert failing.failed
    # One outcome per call: the failed transaction committed nothing.
    assert [r.call_id for _, r in rs] == ["call_0_0", "call_1_0"]
    assert (rs[0][1].blob, rs[0][1].result) == (None, first.decode())
    assert failing.blob(sha(first)) is None
    # The next result is offloaded as usual: the failure was not remembered as a policy.
    assert rs[1][1].blob is not None
    assert failing.blob(sha(second)) == second
    # The inline result is what the model sees, now and later (there is no handle to page).
    assert seen[0] == seen[1] == first.decode()
    _no_dangling_blob(failing, sid)


def test_when_storing_fails_a_result_cut_by_its_tool_keeps_every_byte_inline(
    tmp_path: Path, failing: BlobFailure
) -> None:
    # A tool that cuts its output hands the whole bytes in `full`; when the blob cannot be
    # stored, those bytes must stay inline (DESIGN §6: "the full result stays inline").
    data = noise(20_000, "full")
    sid, _ = _run(tmp_path, failing, {"1": data}, ["1"], config=config(None), capped=True)

    ((_, r),) = responses(failing.read(sid))
    assert r.blob is None
    assert r.result == data.decode()
    _no_dangling_blob(failing, sid)


def test_a_cut_result_is_offloaded_whole(tmp_path: Path, sqlite_store: SQLiteStore) -> None:
    data = noise(20_000, "full")
    sid, _ = _run(tmp_path, sqlite_store, {"1": data}, ["1"], config=config(None), capped=True)
    ((_, r),) = responses(sqlite_store.read(sid))
    assert r.blob is not None
    assert sqlite_store.blob(r.blob.sha256) == data
    assert re.search(r"20,000 bytes, \d+ lines", r.result)
