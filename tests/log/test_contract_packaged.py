"""The packaged store contract as a third-party store's tests use it: only `make_store` given, so
the default sample session and event factory are the ones exercised."""

from __future__ import annotations

from pathlib import Path

from bubu.log.memory import MemoryStore
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store
from bubu.testing.store_contract import StoreContract, sample_session


class TestOnlyAFactoryGiven(StoreContract):
    """What a plugin's test module writes: a fresh store per test, nothing else."""

    def make_store(self, tmp_path: Path) -> Store:
        return SQLiteStore(tmp_path / "log.db")


def test_the_default_sample_meets_what_the_suite_asks_of_a_sample() -> None:
    """At least 13 events, with text, thinking, calls and a permission request among 3..12."""
    from bubu.events import kind_of

    events = sample_session("ses_x")
    middle = {kind_of(e) for e in events[2:12]}
    assert len(events) >= 13
    assert {"text", "thinking", "function_call", "permission_request"} <= middle
    with MemoryStore() as store:
        sid = store.create_session(title="t", workspace="/w").id
        store.append(sid, sample_session(sid), expect=0)
        assert not store.verify(sid).ok, "the sample's blob was not appended: verify says so"
