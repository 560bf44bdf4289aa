"""The store contract: the behaviour every event store keeps, as a pytest suite a store's own
tests run (as eventsourcing ships its recorder tests).

Subclass `StoreContract` in a test module and say how to open a fresh, empty store::

    from bubu.testing.store_contract import StoreContract

    class TestMyStore(StoreContract):
        def make_store(self, tmp_path):
            return MyStore(tmp_path / "log")

pytest then runs every contract test against it: sessions, gapless appends and optimistic
concurrency, reads by range and kind, the hash chain and verification, blobs, leases and
fencing, stop requests, derived views, and concurrent writers. Override `other_handle` to also
run the tests that need a second, independent handle on the same data (as another process would
open), `dispose` to clean up more than `close` does, and `sample_events` / `sample_blobs` to
append a richer session. Bubu's SQLite, PostgreSQL and in-memory stores run this same suite.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bubu import secrets
from bubu.errors import (
    AppendConflict,
    BubuError,
    LeaseError,
    LeaseLost,
    LogError,
    UnknownSession,
)
from bubu.events import (
    Actions,
    Author,
    BlobRef,
    Content,
    Event,
    FunctionCall,
    FunctionResponse,
    PermissionRequest,
    Record,
    Role,
    RunStarted,
    SystemNote,
    Text,
    Thinking,
    TokenUsage,
    TurnEnded,
    TurnStarted,
    kind_of,
    make,
)
from bubu.log import codec
from bubu.log.store import Store, View
from bubu.projections.status import BOUNDARY_KINDS

EventFactory = Callable[..., Event]
"""`make_event(session, content=None, *, role=, author=, ts=, ...)`: an event for a test."""

TS = 1_700_000_000_000
SAMPLE_BLOB = ("line of tool output that was too long to keep inline\n" * 400).encode()
"""The offloaded tool output the default sample session refers to."""


def make_event(
    session: str,
    content: Content | None = None,
    *,
    role: Role = "user",
    author: Author = "user",
    actions: Actions | None = None,
    ts: int = TS,
    **more: object,
) -> Event:
    """An event of the current schema for `session`; plain user text unless `content` is given."""
    if content is None and actions is None:
        content = Text(text="hello")
    return make(
        session=session,
        role=role,
        author=author,
        ts=ts,
        content=content,
        actions=actions,
        **more,  # type: ignore[arg-type]  # the rest of `make`'s keywords, passed through
    )


def sample_session(session: str) -> list[Event]:
    """One small turn with a call, an offloaded result (`SAMPLE_BLOB`), thinking, a permission
    request, usage and the turn's boundaries: deterministic ids and times."""
    ref = BlobRef(sha256=codec.sha256_hex(SAMPLE_BLOB), size=len(SAMPLE_BLOB), lines=400)
    usage = TokenUsage(model="scripted:demo", input_tokens=812, output_tokens=40)
    script: list[tuple[Role, Author, Content | None, Actions | None]] = [
        ("system", "host", SystemNote(note=TurnStarted(model="scripted:demo")), None),
        ("system", "host", SystemNote(note=RunStarted(cause="new", pid=1, host="box")), None),
        ("user", "user", Text(text="list the files — « bonjour » 👋"), None),
        ("model", "agent", Thinking(text="I should look first.", signature="sig-1"), None),
        ("model", "agent", Text(text="Looking."), None),
        (
            "model",
            "agent",
            FunctionCall(call_id="c1", name="list_files", arguments={}),
            Actions(token_usage=usage, end_invocation=True),
        ),
        (
            "tool",
            "tool",
            FunctionResponse(call_id="c1", name="list_files", result="…", blob=ref),
            None,
        ),
        (
            "model",
            "agent",
            FunctionCall(call_id="c2", name="run_command", arguments={"command": "pytest -q"}),
            None,
        ),
        (
            "system",
            "host",
            None,
            Actions(
                permission_request=PermissionRequest(
                    request_id="req_1",
                    call_id="c2",
                    tool="run_command",
                    summary="pytest -q",
                    reason="commands ask outside the sandbox",
                )
            ),
        ),
        (
            "tool",
            "tool",
            FunctionResponse(call_id="c2", name="run_command", result="1 passed"),
            None,
        ),
        ("model", "agent", Thinking(text="Done.", signature="sig-2"), None),
        ("model", "agent", Text(text="All tests pass."), Actions(token_usage=usage)),
        ("user", "user", Text(text="thanks"), None),
        ("system", "host", SystemNote(note=TurnEnded(reason="completed")), None),
    ]
    return [
        make(
            session=session,
            role=role,
            author=author,
            ts=TS + n,
            content=content,
            actions=actions,
            id=f"evt_contract_{n:03d}",
            turn="trn_contract",
            run="run_contract",
        )
        for n, (role, author, content, actions) in enumerate(script, 1)
    ]


def _texts(make_event: EventFactory, session: str, n: int, tag: str = "m") -> list[Event]:
    return [make_event(session, Text(text=f"{tag}{i}")) for i in range(n)]


def _chain_of(records: list[Record]) -> list[str]:
    prev, out = codec.GENESIS, []
    for r in records:
        prev = codec.chain(prev, codec.encode(r.event))
        out.append(prev.hex())
    return out


def _new(store: Store, title: str = "task") -> str:
    return store.create_session(title=title, workspace="/work/project").id


class StoreContract:
    """The contract tests; a subclass gives `make_store` (see the module docstring)."""

    def make_store(self, tmp_path: Path) -> Store:
        """A fresh, empty store (`tmp_path` is the test's own directory)."""
        raise NotImplementedError("a StoreContract subclass says how to open its store")

    def dispose(self, store: Store) -> None:
        """Release what `make_store` made (by default: close the store)."""
        store.close()

    def other_handle(self, store: Store) -> Store:
        """A second, independent handle on the same data, used as a context manager; by default
        the tests that need one are skipped."""
        pytest.skip("this store gives no second handle (override StoreContract.other_handle)")

    def sample_events(self, session: str) -> list[Event]:
        """A realistic session of at least 13 events, with text, thinking, function calls and
        a permission request among events 3..12, appended with `sample_blobs`."""
        return sample_session(session)

    def sample_blobs(self) -> list[bytes]:
        """The blobs `sample_events` refers to (at least one)."""
        return [SAMPLE_BLOB]

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        """The store under test, fresh for each test."""
        opened = self.make_store(tmp_path)
        try:
            yield opened
        finally:
            self.dispose(opened)

    @pytest.fixture(name="make_event")
    def make_event_fixture(self) -> EventFactory:
        """`make_event`, as a fixture."""
        return make_event

    # -- sessions ---------------------------------------------------------------------------------

    def test_a_new_session_is_empty_and_listed(self, store: Store) -> None:
        info = store.create_session(title="fix the bug", workspace="/w", model="scripted:x")
        assert (info.high_water, info.last_ms, info.model) == (0, None, "scripted:x")
        head = store.head(info.id)
        assert (head.high_water, head.digest) == (0, codec.GENESIS.hex())
        assert store.read(info.id) == []
        assert [s.id for s in store.sessions()] == [info.id]
        assert store.session(info.id) == info

    def test_sessions_are_found_by_unique_prefix(self, store: Store) -> None:
        a = store.create_session(title="a", workspace="/w", session_id="ses_alpha1")
        store.create_session(title="b", workspace="/w", session_id="ses_alpha2")
        store.create_session(title="c", workspace="/w", session_id="ses_beta")
        assert store.session("ses_alpha1").id == a.id
        assert store.session("ses_b").id == "ses_beta"
        with pytest.raises(UnknownSession, match="several sessions"):
            store.session("ses_alpha")
        with pytest.raises(UnknownSession, match="no session matches"):
            store.session("ses_gamma")
        with pytest.raises(UnknownSession):
            store.session("ses_%")  # LIKE wildcards are literal

    def test_a_session_id_is_unique(self, store: Store) -> None:
        store.create_session(title="a", workspace="/w", session_id="ses_same")
        with pytest.raises(LogError):
            store.create_session(title="b", workspace="/w", session_id="ses_same")

    def test_session_list_carries_the_head_and_last_time(
        self, store: Store, make_event: EventFactory
    ) -> None:
        sid = _new(store)
        store.append(sid, [make_event(sid, ts=5), make_event(sid, ts=9)], expect=0)
        (info,) = store.sessions()
        assert (info.high_water, info.last_ms) == (2, 9)

    # -- append and read --------------------------------------------------------------------------

    def test_batches_read_back_identically_with_gapless_seq(self, store: Store) -> None:
        sid = _new(store)
        events = self.sample_events(sid)
        heads = []
        expect = 0
        for batch in (events[:1], events[1:8], events[8:]):
            head = store.append(sid, batch, expect=expect, durable=True, blobs=self.sample_blobs())
            expect = head.high_water
            heads.append(head)
        records = store.read(sid)
        assert [r.event for r in records] == events
        assert [r.seq for r in records] == list(range(1, len(events) + 1))
        assert [r.hash for r in records] == _chain_of(records)
        assert [h.high_water for h in heads] == [1, 8, len(events)]
        assert [h.digest for h in heads] == [records[h.high_water - 1].hash for h in heads]
        assert [codec.encode(r.event) for r in records] == [codec.encode(e) for e in events]

    def test_append_returns_the_records_it_committed(
        self, store: Store, make_event: EventFactory
    ) -> None:
        """What an append returns is what a read gives back: seq, chain hash and the stored event
        (secrets redacted), for a single event (the fast path) and for a batch with a blob."""
        sid = _new(store)
        secret = "sk-test-Zq81mW0pLx3vTe5uRk7y"
        secrets.reset({"OPENAI_API_KEY": secret})
        try:
            one = store.append(sid, [make_event(sid, Text(text=f"key {secret}"))], expect=0)
        finally:
            secrets.reset()
        batch = store.append(
            sid, _texts(make_event, sid, 3), expect=1, durable=True, blobs=self.sample_blobs()
        )
        last = store.append(sid, _texts(make_event, sid, 1, "z"), expect=4)
        assert [r.seq for r in one.records] == [1]
        assert [r.seq for r in batch.records] == [2, 3, 4]
        assert (one.high_water, one.digest) == (1, one.records[-1].hash)
        assert (batch.high_water, batch.digest) == (4, batch.records[-1].hash)
        assert [*one.records, *batch.records, *last.records] == store.read(sid)
        assert secret not in codec.encode(one.records[0].event).decode()

    def test_a_stale_expect_is_an_append_conflict_and_writes_nothing(
        self, store: Store, make_event: EventFactory
    ) -> None:
        sid = _new(store)
        head = store.append(sid, _texts(make_event, sid, 3), expect=0)
        for stale in (0, 2, 4):
            with pytest.raises(AppendConflict) as e:
                store.append(sid, _texts(make_event, sid, 2, "late"), expect=stale)
            assert (e.value.expected, e.value.actual) == (stale, 3)
            assert "re-read the log and retry" in str(e.value)
        assert store.head(sid) == head.head
        assert [r.event.content for r in store.read(sid)] == [Text(text=f"m{i}") for i in range(3)]

    @pytest.mark.parametrize("batch", [1, 3])
    def test_a_handle_that_did_not_see_another_writer_gets_a_conflict(
        self, store: Store, make_event: EventFactory, batch: int
    ) -> None:
        sid = _new(store)
        store.append(sid, _texts(make_event, sid, 2, "a"), expect=0)
        with self.other_handle(store) as other:
            assert other.append(sid, _texts(make_event, sid, 1, "b"), expect=2).high_water == 3
            for durable in (False, True):
                with pytest.raises(AppendConflict) as e:
                    store.append(
                        sid, _texts(make_event, sid, batch, "c"), expect=2, durable=durable
                    )
                assert (e.value.expected, e.value.actual) == (2, 3)
            assert store.append(sid, _texts(make_event, sid, batch, "c"), expect=3).high_water == (
                3 + batch
            )
            assert other.read(sid) == store.read(sid)
        assert [r.event.content.text for r in store.read(sid)] == [  # type: ignore[union-attr]
            "a0",
            "a1",
            "b0",
            *(f"c{i}" for i in range(batch)),
        ]
        assert store.verify(sid).ok

    def test_appending_to_an_unknown_session_is_refused(
        self, store: Store, make_event: EventFactory
    ) -> None:
        with pytest.raises(UnknownSession):
            store.append("ses_nope", [make_event("ses_nope")], expect=0)

    def test_an_event_of_another_session_is_refused_with_its_batch(
        self, store: Store, make_event: EventFactory
    ) -> None:
        sid, other = _new(store), _new(store)
        with pytest.raises(BubuError):
            store.append(sid, [make_event(sid), make_event(other)], expect=0)
        assert store.head(sid).high_water == 0
        assert store.read(sid) == []

    def test_read_after_upto_and_kinds(self, store: Store) -> None:
        sid = _new(store)
        events = self.sample_events(sid)
        store.append(sid, events, expect=0, blobs=self.sample_blobs())
        n = len(events)
        assert [r.seq for r in store.read(sid, after=5)] == list(range(6, n + 1))
        assert [r.seq for r in store.read(sid, upto=4)] == [1, 2, 3, 4]
        assert [r.seq for r in store.read(sid, after=3, upto=7)] == [4, 5, 6, 7]
        assert store.read(sid, after=n) == []
        assert store.read(sid, after=4, upto=4) == []
        assert len(store.read(sid, upto=n + 10)) == n
        for kinds in (
            ["text"],
            ["function_call", "thinking"],
            list(BOUNDARY_KINDS),
            ["nothing"],
            [],
        ):
            got = store.read(sid, kinds=kinds)
            assert [r.seq for r in got] == [
                i for i, e in enumerate(events, 1) if kind_of(e) in kinds
            ]
        both = ("text", "permission_request")
        got = store.read(sid, after=2, upto=12, kinds=list(both))
        assert [kind_of(r.event) for r in got] == [
            kind_of(e) for e in events[2:12] if kind_of(e) in both
        ]
        assert set(both) <= {kind_of(e) for e in events[2:12]}, "the sample has both kinds there"

    def test_a_large_result_reads_back_as_its_canonical_bytes(
        self, store: Store, make_event: EventFactory
    ) -> None:
        """However a backend keeps a large payload (SQLite compresses it), reads, raw rows, the
        chain and the session list see the canonical bytes."""
        sid = _new(store)
        line = "src/bubu/module.py:{n}: def handler_{n}(request, response):  # output\n"
        result = "".join(line.format(n=n) for n in range(60))
        big = make_event(
            sid,
            FunctionResponse(call_id="c1", name="grep", result=result),
            role="tool",
            author="tool",
            ts=77,
        )
        events = [make_event(sid, ts=5), big, make_event(sid, ts=6), big]
        store.append(sid, events[:2], expect=0)
        store.append(sid, events[2:3], expect=2)
        store.append(sid, events[3:], expect=3)
        canonical = [codec.encode(e) for e in events]
        assert len(canonical[1]) > 4000
        records = store.read(sid)
        assert [codec.encode(r.event) for r in records] == canonical
        assert [r.hash for r in records] == _chain_of(records)
        raw = store.raw(sid)
        assert [(s, bytes(h).hex(), bytes(p)) for s, h, p in raw] == [
            (r.seq, r.hash, c) for r, c in zip(records, canonical, strict=True)
        ]
        assert [r.seq for r in store.read(sid, kinds=["function_response"])] == [2, 4]
        report = store.verify(sid)
        assert (report.ok, report.digest) == (True, records[-1].hash)
        (info,) = store.sessions()
        assert (info.high_water, info.last_ms) == (4, 77)

    def test_head_digest_equals_verify_digest(self, store: Store, make_event: EventFactory) -> None:
        sid = _new(store)
        report = store.verify(sid)
        assert (report.ok, report.high_water, report.digest) == (True, 0, codec.GENESIS.hex())
        store.append(sid, self.sample_events(sid), expect=0, blobs=self.sample_blobs())
        head = store.append(sid, _texts(make_event, sid, 2), expect=store.head(sid).high_water)
        report = store.verify(sid)
        assert report.ok
        assert report.first_bad_seq is None
        assert (report.high_water, report.digest) == (head.high_water, head.digest)
        assert store.head(sid) == head.head

    def test_durability_does_not_change_what_is_stored(
        self, store: Store, make_event: EventFactory
    ) -> None:
        sid = _new(store)
        light = store.append(sid, _texts(make_event, sid, 2), expect=0, durable=False)
        full = store.append(
            sid, _texts(make_event, sid, 2, "d"), expect=light.high_water, durable=True
        )
        assert full.high_water == 4
        assert store.verify(sid).digest == full.digest

    # -- blobs ------------------------------------------------------------------------------------

    def test_blobs_are_stored_with_the_append_and_found_by_hash(self, store: Store) -> None:
        sid = _new(store)
        blobs = self.sample_blobs()
        assert blobs, "sample_blobs gives at least one blob"
        sha = codec.sha256_hex(blobs[0])
        assert store.blob(sha) is None
        store.append(sid, self.sample_events(sid), expect=0, blobs=[*blobs, b"", *blobs])
        assert store.blob(sha) == blobs[0]
        assert store.blob(codec.sha256_hex(b"")) == b""
        assert store.blob("0" * 64) is None
        assert store.verify(sid).ok

    def test_blobs_of_a_refused_append_are_not_stored(
        self, store: Store, make_event: EventFactory
    ) -> None:
        sid = _new(store)
        store.append(sid, [make_event(sid)], expect=0)
        data = b"only with its outcome " * 100
        with pytest.raises(AppendConflict):
            store.append(sid, [make_event(sid)], expect=0, blobs=[data])
        assert store.blob(codec.sha256_hex(data)) is None

    def test_verify_reports_a_missing_blob_at_its_seq(
        self, store: Store, make_event: EventFactory
    ) -> None:
        sid = _new(store)
        missing = b"never stored"
        ref = BlobRef(sha256=codec.sha256_hex(missing), size=len(missing), lines=0)
        response = FunctionResponse(call_id="c", name="run_command", result="…", blob=ref)
        store.append(
            sid, [make_event(sid), make_event(sid, response, role="tool", author="tool")], expect=0
        )
        report = store.verify(sid)
        assert (report.ok, report.first_bad_seq) == (False, 2)
        assert report.problem is not None
        assert "missing or damaged" in report.problem

    # -- leases -----------------------------------------------------------------------------------

    def test_a_lease_fences_other_owners(self, store: Store) -> None:
        sid = _new(store)
        assert store.current_lease(sid) is None
        a = store.acquire_lease(sid, "runner-a", 60)
        assert (a.session, a.owner, a.epoch) == (sid, "runner-a", 1)
        assert store.current_lease(sid) == a
        with pytest.raises(LeaseError, match="runner-a") as e:
            store.acquire_lease(sid, "runner-b", 60)
        assert not isinstance(e.value, LeaseLost)
        assert store.current_lease(sid) == a
        again = store.acquire_lease(sid, "runner-a", 60)
        assert again.epoch == 2  # re-acquiring is a new epoch: the old one is fenced

    def test_a_stolen_lease_fences_the_old_holder(
        self, store: Store, make_event: EventFactory
    ) -> None:
        sid = _new(store)
        a = store.acquire_lease(sid, "runner-a", 60)
        head = store.append(sid, [make_event(sid)], expect=0, lease=a)
        b = store.acquire_lease(sid, "runner-b", 60, steal=True)
        assert b.epoch == a.epoch + 1
        with pytest.raises(LeaseLost, match="taken over"):
            store.append(sid, _texts(make_event, sid, 3), expect=1, lease=a, durable=True)
        for durable in (False, True):  # one event alone takes the store's shortest path
            with pytest.raises(LeaseLost, match=f"epoch {a.epoch}, now {b.epoch}"):
                store.append(sid, [make_event(sid)], expect=1, lease=a, durable=durable)
        assert store.head(sid) == head.head
        assert len(store.read(sid)) == 1
        with pytest.raises(LeaseLost):
            store.renew_lease(a, 60)
        store.release_lease(a)  # a no-op for a fenced holder
        assert store.current_lease(sid) == b
        assert store.append(sid, [make_event(sid)], expect=1, lease=b).high_water == 2

    def test_an_expired_lease_is_taken_over_without_stealing(self, store: Store) -> None:
        sid = _new(store)
        a = store.acquire_lease(sid, "runner-a", 0.001)
        time.sleep(0.02)
        b = store.acquire_lease(sid, "runner-b", 60)
        assert (b.owner, b.epoch) == ("runner-b", a.epoch + 1)

    def test_a_stop_request_reaches_the_live_lease_of_its_epoch_only(self, store: Store) -> None:
        sid = _new(store)
        assert store.request_stop(sid) is None, "nobody runs it: nothing to stop"
        a = store.acquire_lease(sid, "runner-a", 60)
        asked = store.request_stop(sid)
        assert asked is not None
        assert (asked.owner, asked.epoch, asked.stop_requested) == ("runner-a", a.epoch, True)
        assert store.current_lease(sid) == asked
        renewed = store.renew_lease(a, 60)  # renewing does not clear it
        now = store.current_lease(sid)
        assert now is not None
        assert (now.stop_requested, now.expires_ms) == (True, renewed.expires_ms)
        b = store.acquire_lease(sid, "runner-b", 60, steal=True)  # a new epoch starts without it
        assert store.current_lease(sid) == b
        assert not b.stop_requested
        store.release_lease(b)
        assert store.request_stop(sid) is None, "a released lease is not asked"
        c = store.acquire_lease(sid, "runner-c", 0.001)
        time.sleep(0.02)
        assert store.request_stop(sid) is None, "nor an expired one"
        now = store.current_lease(sid)
        assert now is not None
        assert (now.epoch, now.stop_requested) == (c.epoch, False)

    def test_renew_extends_and_release_frees(self, store: Store) -> None:
        sid = _new(store)
        a = store.acquire_lease(sid, "runner-a", 5)
        renewed = store.renew_lease(a, 600)
        assert (renewed.owner, renewed.epoch) == (a.owner, a.epoch)
        assert renewed.expires_ms >= a.expires_ms + 590_000
        current = store.current_lease(sid)
        assert current is not None
        assert current.expires_ms == renewed.expires_ms
        store.release_lease(renewed)
        b = store.acquire_lease(sid, "runner-b", 60)
        assert b.epoch == a.epoch + 1
        with pytest.raises(LeaseLost):
            store.renew_lease(renewed, 60)

    def test_leases_are_per_session(self, store: Store) -> None:
        s1, s2 = _new(store), _new(store)
        store.acquire_lease(s1, "runner-a", 60)
        assert store.acquire_lease(s2, "runner-b", 60).epoch == 1

    # -- derived views ----------------------------------------------------------------------------

    def test_views_put_get_replace_drop(self, store: Store) -> None:
        sid = _new(store)
        v1 = View(
            kind="checkpoint",
            session=sid,
            key="k1",
            source_high_water=3,
            source_digest="d3",
            data=b"\x00one",
        )
        assert store.get_view("checkpoint", sid, "k1") is None
        store.put_view(v1)
        got = store.get_view("checkpoint", sid, "k1")
        assert got is not None
        assert (got.data, got.source_high_water, got.source_digest) == (b"\x00one", 3, "d3")
        assert got.created_ms > 0
        store.put_view(
            View(
                kind="checkpoint",
                session=sid,
                key="k1",
                source_high_water=9,
                source_digest="d9",
                data=b"two",
                created_ms=7,
            )
        )
        assert store.get_view("checkpoint", sid, "k1") == View(
            kind="checkpoint",
            session=sid,
            key="k1",
            source_high_water=9,
            source_digest="d9",
            data=b"two",
            created_ms=7,
        )
        store.put_view(
            View(
                kind="index",
                session=sid,
                key="k1",
                source_high_water=1,
                source_digest="d1",
                data=b"i",
            )
        )
        store.put_view(
            View(
                kind="index",
                session=sid,
                key="k2",
                source_high_water=1,
                source_digest="d1",
                data=b"j",
            )
        )
        store.put_view(
            View(
                kind="index",
                session="ses_other",
                key="k1",
                source_high_water=1,
                source_digest="x",
                data=b"o",
            )
        )
        assert store.drop_views(sid, "index") == 2
        assert store.get_view("index", sid, "k2") is None
        assert store.get_view("checkpoint", sid, "k1") is not None
        assert store.drop_views(sid) == 1
        assert store.drop_views(sid) == 0
        assert store.get_view("index", "ses_other", "k1") is not None

    # -- concurrency ------------------------------------------------------------------------------

    def test_concurrent_appends_to_own_sessions_all_land(
        self, store: Store, make_event: EventFactory
    ) -> None:
        threads_n, appends_n = 6, 25
        sessions = [_new(store, f"t{i}") for i in range(threads_n)]
        start = threading.Barrier(threads_n)
        errors: list[BaseException] = []

        def work(sid: str) -> None:
            try:
                start.wait()
                expect = 0
                for i in range(appends_n):
                    batch = _texts(make_event, sid, 1 + i % 3, f"{sid}-{i}-")
                    head = store.append(sid, batch, expect=expect, durable=i % 2 == 0)
                    assert head.high_water == expect + len(batch)
                    expect = head.high_water
            except BaseException as e:  # re-raised by the test thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(sid,)) for sid in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        per_session = sum(1 + i % 3 for i in range(appends_n))
        for sid in sessions:
            records = store.read(sid)
            assert [r.seq for r in records] == list(range(1, per_session + 1))
            assert store.verify(sid).ok
            texts = [r.event.content.text for r in records if isinstance(r.event.content, Text)]
            assert all(t.startswith(f"{sid}-") for t in texts)
            order = [int(t.split("-")[1]) for t in texts]
            assert order == sorted(order)

    @pytest.mark.parametrize("batch", [1, 2])
    def test_concurrent_writers_of_one_session_conflict_and_retry(
        self, store: Store, make_event: EventFactory, batch: int
    ) -> None:
        sid = _new(store)
        threads_n, appends_n = 5, 12
        start = threading.Barrier(threads_n)
        errors: list[BaseException] = []
        conflicts: list[tuple[int, int, int]] = []  # (expect sent, expected reported, actual)

        def work(n: int) -> None:
            try:
                start.wait()
                done = 0
                while done < appends_n:
                    expect = store.head(sid).high_water
                    try:
                        store.append(
                            sid, _texts(make_event, sid, batch, f"w{n}-{done}-"), expect=expect
                        )
                    except AppendConflict as e:
                        conflicts.append((expect, e.expected, e.actual))
                        continue
                    done += 1
            except BaseException as e:  # re-raised by the test thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert all(sent == reported < actual for sent, reported, actual in conflicts)
        records = store.read(sid)
        assert [r.seq for r in records] == list(range(1, threads_n * appends_n * batch + 1))
        # Each batch landed whole and adjacent, never interleaved with another writer's.
        texts = [r.event.content.text for r in records if isinstance(r.event.content, Text)]
        for i in range(0, len(texts), batch):
            assert {t.rsplit("-", 1)[0] for t in texts[i : i + batch]} == {
                texts[i].rsplit("-", 1)[0]
            }
        assert len({t.rsplit("-", 1)[0] for t in texts}) == threads_n * appends_n
        assert store.verify(sid).ok


__all__ = ["SAMPLE_BLOB", "EventFactory", "StoreContract", "make_event", "sample_session"]
