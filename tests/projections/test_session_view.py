"""The session view as a materialized view of the log: snapshots are caches that the log beats.

The same log gives the same view whether it is folded whole, continued from a snapshot of any
prefix, read with no snapshot at all, or with a corrupted one; `bubu verify` reports a snapshot
that disagrees with the log, and `bubu show --tail N` shows the whole transcript's last N items.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from bubu.cli.app import cli
from bubu.engine.driver import RunConfig
from bubu.engine.permissions import Policy
from bubu.engine.session import Host, new_session, start_turn
from bubu.log import readview
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store
from bubu.projections.views import decode, encode, fold_view
from bubu.providers.scripted import ScriptedProvider
from bubu.tools import builtin_tools

STEPS = 30


def _session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    monkeypatch.setattr(readview, "EVERY", 25)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    script = tmp_path / "s.jsonl"
    lines = [
        {"text": f"step {i}", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}
        for i in range(STEPS)
    ]
    plan = {"items": [{"text": "read", "status": "completed"}]}
    lines.insert(3, {"tool_calls": [{"name": "update_plan", "arguments": plan}]})
    script.write_text("".join(json.dumps(x) + "\n" for x in [*lines, {"text": "All done."}]))
    db = tmp_path / "bubu.db"
    with SQLiteStore(db) as store:
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
    return db, info.id


def _cli(db: Path, *args: str) -> tuple[int, str]:
    done = CliRunner().invoke(cli, ["--db", str(db), *args])
    if done.exception and not isinstance(done.exception, SystemExit):
        raise done.exception
    return done.exit_code, done.output


def _outputs(db: Path, session: str) -> list[str]:
    outs = []
    for args in (
        ["status", "--json"],
        ["status"],
        ["show", "--tail", "7", "--json"],
        ["show", "--tail", "7"],
    ):
        code, out = _cli(db, *args, session)
        assert code == 0, out
        outs.append(out)
    return outs


def test_a_fold_continued_from_a_snapshot_of_any_prefix_equals_the_fold_of_the_whole_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, session = _session(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        records = store.read(session)
    whole = encode(fold_view(records))
    for cut in range(0, len(records) + 1, 7):
        snap = decode(encode(fold_view(records[:cut])))
        assert snap is not None
        assert encode(fold_view(records[cut:], snap)) == whole
    view = fold_view(records)
    assert view.plan is not None
    assert view.status.state == "completed"


def test_readers_give_the_same_output_with_a_snapshot_without_one_and_with_a_corrupted_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, session = _session(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        row = store.get_view(readview.KIND, session, readview.KEY)
        high_water = store.head(session).high_water
    # The runner kept a snapshot within EVERY events of the end.
    assert row is not None
    assert high_water - readview.EVERY < row.source_high_water < high_water
    with_snapshot = _outputs(db, session)
    code, out = _cli(db, "verify", session)
    assert code == 0, out

    with SQLiteStore(db) as store:
        assert store.drop_views(session, readview.KIND) == 1
    assert _outputs(db, session) == with_snapshot

    # A snapshot whose bytes were altered behind the log's back is ignored, and verify says so.
    with SQLiteStore(db) as store:
        readview.save(store, session, fold_view(store.read(session, upto=row.source_high_water)))
    with sqlite3.connect(db) as con:
        con.execute(
            "UPDATE views SET data = CAST(replace(data, '\"turns\":1', '\"turns\":7') AS BLOB) "
            "WHERE kind=?",
            (readview.KIND,),
        )
    assert _outputs(db, session) == with_snapshot
    code, out = _cli(db, "verify", session)
    assert code == 1
    assert "session view snapshot is ignored (its bytes do not match their checksum)" in out

    # One with a valid checksum that names a prefix the log does not hold is ignored too.
    with SQLiteStore(db) as store:
        forged = fold_view(store.read(session, upto=row.source_high_water))
        forged.status = type(forged.status)(state="failed", turns=9)
        readview.save(store, session, forged, "00" * 32)
    assert _outputs(db, session) == with_snapshot
    code, out = _cli(db, "verify", session)
    assert code == 1
    assert "is not the one it was built from" in out


def test_show_tail_prints_the_last_items_of_the_whole_transcript_with_the_totals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, session = _session(tmp_path, monkeypatch)
    code, full = _cli(db, "show", "--json", session)
    assert code == 0
    code, tail = _cli(db, "show", "--tail", "7", "--json", session)
    assert code == 0
    whole, last = json.loads(full), json.loads(tail)
    assert len(whole["items"]) > 7
    assert last["items"] == whole["items"][-7:]
    assert last["usage"] == whole["usage"]
    assert last["session"] == whole["session"]


def test_every_store_keeps_the_snapshot_and_readers_start_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    monkeypatch.setattr(readview, "EVERY", 10)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    script = tmp_path / "s.jsonl"
    call = {"name": "read_file", "arguments": {"path": "a.txt"}}
    script.write_text(json.dumps({"tool_calls": [call]}) + "\n" + '{"text": "done"}\n')
    provider = ScriptedProvider(str(script))
    info = new_session(store, task="read", workspace=ws, model=provider.spec)
    host = Host(store=store, provider=provider, tools=builtin_tools(), policy=Policy(yes=True))
    for _ in range(4):
        start_turn(host, info, "read")
    whole = fold_view(store.read(info.id))
    view, bad = readview.stored(store, info.id)
    assert bad is None
    assert view is not None
    assert 0 < view.high_water <= whole.high_water
    assert encode(readview.load(store, info.id)) == encode(whole)
    # A snapshot naming a digest the log does not hold is ignored: the log wins.
    wrong = fold_view(store.read(info.id, upto=view.high_water))
    wrong.status = type(wrong.status)(state="failed", turns=99)
    readview.save(store, info.id, wrong, "11" * 32)
    assert readview.stored(store, info.id)[0] is None
    assert not readview.check(store, store.verify(info.id)).ok
    # ... and rebuilt by the next reader that may write.
    assert encode(readview.load(store, info.id)) == encode(whole)
    assert readview.stored(store, info.id) == (whole, None)
    assert readview.check(store, store.verify(info.id)).ok
