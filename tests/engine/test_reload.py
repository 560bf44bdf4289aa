"""The runner's state as a materialized view of the log: reloading from a snapshot is the fold.

state(n) = apply(snapshot(k), log[k+1…n]) for every prefix k of random event sequences and of
real sessions with compactions; a runner reloads the same state with a snapshot, without one,
and with a tampered or stale one (which is ignored, rebuilt and reported by `bubu verify`); a
forged snapshot cannot make anything but Bubu's fold classes.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bubu.cli.app import cli
from bubu.context.policy import ContextPolicy
from bubu.engine import reload
from bubu.engine.driver import RunConfig, Runner
from bubu.engine.permissions import Policy
from bubu.engine.session import Host, new_session, start_turn
from bubu.events import EffectClass, Event, Record
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store, View
from bubu.projections.recovery import plan_recovery
from bubu.providers.scripted import ScriptedProvider
from bubu.tools import builtin_tools
from hypo import examples
from log.strategies import events

STEPS = 40
POLICY = ContextPolicy()


def _fold(records: list[Record], start: reload.RunnerFolds | None = None) -> reload.RunnerFolds:
    state = start if start is not None else reload.RunnerFolds(policy=POLICY)
    state.fold(records)
    return state


def _through_bytes(state: reload.RunnerFolds) -> reload.RunnerFolds:
    back = reload.decode(reload.encode(state))
    assert back is not None
    return back


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    st.lists(events(), max_size=40), st.lists(st.integers(min_value=0, max_value=40), max_size=3)
)
def test_a_fold_continued_from_snapshots_of_any_prefixes_equals_the_fold_of_the_whole_log(
    evs: list[Event], cuts: list[int]
) -> None:
    records = [Record(seq=i, hash="", event=e) for i, e in enumerate(evs, 1)]
    whole = reload.canonical(_fold(records))
    # A chain of snapshots (each continued from the one before, through its bytes), then the rest.
    state, at = None, 0
    for cut in sorted({min(c, len(records)) for c in cuts}):
        state = _through_bytes(_fold(records[at:cut], state))
        at = cut
    assert reload.canonical(_fold(records[at:], state)) == whole


def _session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, window: int = 6_000
) -> tuple[Path, str]:
    monkeypatch.setattr(reload, "EVERY", 30)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n" * 40)
    script = tmp_path / "s.jsonl"
    calls: list[list[dict[str, object]]] = [
        [{"name": "read_file", "arguments": {"path": "a.txt"}}] for _ in range(STEPS)
    ]
    for i in range(0, STEPS, 7):  # commands too: the fact sheet counts them
        calls[i].append({"name": "run_command", "arguments": {"command": f"echo {i}"}})
    lines: list[dict[str, object]] = [
        {"text": f"step {i} " + "words " * 60, "tool_calls": calls[i]} for i in range(STEPS)
    ]
    script.write_text("".join(json.dumps(x) + "\n" for x in [*lines, {"text": "All done."}]))
    db = tmp_path / "bubu.db"
    with SQLiteStore(db) as store:
        provider = ScriptedProvider(str(script))
        info = new_session(store, task="read", workspace=ws, model=provider.spec)
        host = Host(
            store=store,
            provider=provider,
            tools=builtin_tools(),
            policy=Policy(yes=True, sandbox="off"),
            config=RunConfig(loop_limit=None, context_window=window),
        )
        assert start_turn(host, info, "read") == "completed"
    return db, info.id


def _reloaded(db: Path, session: str) -> object:
    """The canonical state a new runner reloads the session to."""
    with SQLiteStore(db) as store:
        lease = store.acquire_lease(session, "test", 60)
        try:
            runner = Runner(
                store=store,
                session=store.session(session),
                lease=lease,
                provider=ScriptedProvider(str(db.parent / "s.jsonl")),
                tools={},
            )
            return reload.canonical(runner._state)
        finally:
            store.release_lease(lease)


def _verify(db: Path, session: str) -> tuple[int, str]:
    done = CliRunner().invoke(cli, ["--db", str(db), "verify", session])
    return done.exit_code, done.output


def _verify_process(db: Path, session: str) -> tuple[int, str]:
    """`bubu verify` in its own process, which loads no tools (unlike this one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUBU_")}
    env["BUBU_HOME"] = str(db.parent)
    done = subprocess.run(
        [sys.executable, "-m", "bubu", "--db", str(db), "verify", session],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_every_prefix_of_a_real_session_with_compactions_reloads_to_the_fold_of_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, session = _session(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        records = store.read(session)
    assert any(
        getattr(r.event.content, "note", None).__class__.__name__ == "Compaction" for r in records
    )
    whole = reload.canonical(_fold(records))
    for cut in range(0, len(records) + 1, 5):
        assert reload.canonical(_fold(records[cut:], _through_bytes(_fold(records[:cut])))) == whole


def test_a_runner_reloads_the_same_state_with_a_snapshot_without_one_and_with_a_bad_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, session = _session(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        row = store.get_view(reload.KIND, session, reload.KEY)
        high_water = store.head(session).high_water
        records = store.read(session)
    # The runner kept a snapshot within EVERY events of the end, and it is the fold of the log.
    assert row is not None
    assert high_water - reload.EVERY <= row.source_high_water <= high_water
    assert _fold(records).requests.facts.commands_run > 0
    full = reload.canonical(_fold(records))
    assert _reloaded(db, session) == full
    assert _verify(db, session)[0] == 0
    assert _verify_process(db, session)[0] == 0, _verify_process(db, session)[1]

    with SQLiteStore(db) as store:
        assert store.drop_views(session, reload.KIND) == 1
    assert _reloaded(db, session) == full

    def put(
        state: reload.RunnerFolds, digest: str | None = None, data: bytes | None = None
    ) -> None:
        with SQLiteStore(db) as store:
            d = digest or reload.digest_at(store, session, state.high_water)
            assert d is not None
            store.put_view(
                View(
                    kind=reload.KIND,
                    session=session,
                    key=reload.KEY,
                    source_high_water=state.high_water,
                    source_digest=d,
                    data=data if data is not None else reload.encode(state),
                )
            )

    stale = _fold(records[:60])

    # Bytes altered behind the log's back: ignored, verify says so, the next reload rebuilds it.
    good = reload.encode(stale)
    put(stale, data=good[:-3] + bytes(b ^ 0xFF for b in good[-3:]))
    assert _verify(db, session)[0] == 1
    assert "runner state snapshot is ignored (its bytes" in _verify(db, session)[1]
    assert _reloaded(db, session) == full
    assert _verify(db, session)[0] == 0

    # A valid checksum naming a prefix the log does not hold.
    put(stale, digest="00" * 32)
    code, out = _verify(db, session)
    assert code == 1
    assert "is not the one it was built from" in out
    assert _reloaded(db, session) == full

    # A well-formed snapshot whose content is not the fold of the prefix it names (stale: it
    # claims seq 80 but holds the fold of 60 records).
    lying = _fold(records[:60])
    lying.high_water, lying.digest = 80, records[79].hash
    put(lying)
    for code, out in (_verify(db, session), _verify_process(db, session)):
        assert code == 1
        assert "its content is not the fold of the log it names" in out
    # A reader trusts digest and checksum, so such a row must come from outside Bubu; the
    # runner's next snapshot replaces it.
    with SQLiteStore(db) as store:
        store.drop_views(session, reload.KIND)
    assert _reloaded(db, session) == full

    # A row rewritten as text, and one that is not Bubu's pickle at all.
    with sqlite3.connect(db) as con:
        con.execute("UPDATE views SET data = CAST(data AS TEXT) WHERE kind=?", (reload.KIND,))
    assert _reloaded(db, session) == full


def test_a_forged_snapshot_cannot_build_anything_but_fold_classes() -> None:
    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("pwned",))

    body = zlib.compress(pickle.dumps(Evil(), protocol=5), 1)
    import hashlib

    data = hashlib.sha256(body).hexdigest().encode() + b"\n" + body
    assert reload.decode(data) is None
    with pytest.raises(pickle.UnpicklingError):
        reload._Loader(io.BytesIO(pickle.dumps(Evil(), protocol=5))).load()
    for name in (
        "os.system",
        "subprocess.Popen",
        "bubu.engine.driver.Runner",
        "bubu.log.sqlite.SQLiteStore",
        "builtins.eval",
    ):
        module, _, attr = name.rpartition(".")
        with pytest.raises(pickle.UnpicklingError):
            reload._Loader(io.BytesIO(b"")).find_class(module, attr)


def test_a_snapshot_of_another_context_policy_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, session = _session(tmp_path, monkeypatch)
    other = ContextPolicy(offload_bytes=POLICY.offload_bytes + 1)
    with SQLiteStore(db) as store:
        assert reload.stored(store, session, POLICY)[0] is not None
        assert reload.stored(store, session, other) == (None, None)
        state, _ = reload.load(store, session, other)
        fresh = reload.RunnerFolds(policy=other)
        fresh.fold(store.read(session))
        assert reload.same(state, fresh)


def test_the_recovery_plan_is_the_same_from_a_snapshot_and_from_the_whole_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, session = _session(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        records = store.read(session)
    effects: dict[str, EffectClass] = {"read_file": "read_only"}
    # At every prefix (a crash there), the plan from a snapshot at any earlier prefix is the
    # plan from the whole prefix.
    for end in range(1, len(records) + 1, 3):
        prefix = records[:end]
        whole = plan_recovery(prefix, effects, {})
        for cut in range(0, end, 17):
            snap = _through_bytes(_fold(records[:cut]))
            snap.fold(prefix[cut:])
            assert plan_recovery(prefix, effects, {}, turn=snap.turn) == whole


def test_every_store_keeps_the_snapshot_and_reloads_the_fold_of_the_log(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reload, "EVERY", 20)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    script = tmp_path / "s.jsonl"
    lines = [{"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}] * 15
    script.write_text("".join(json.dumps(x) + "\n" for x in [*lines, {"text": "All done."}]))
    provider = ScriptedProvider(str(script))
    info = new_session(store, task="read", workspace=ws, model=provider.spec)
    host = Host(
        store=store,
        provider=provider,
        tools=builtin_tools(),
        policy=Policy(yes=True),
        config=RunConfig(loop_limit=None),
    )
    assert start_turn(host, info, "read") == "completed"
    state, bad = reload.stored(store, info.id, POLICY)
    assert state is not None
    assert bad is None
    assert state.high_water > 0
    whole = _fold(store.read(info.id))
    assert reload.same(reload.load(store, info.id, POLICY)[0], whole)
    assert reload.check(store, store.verify(info.id)).ok
