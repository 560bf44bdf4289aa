"""The store's workspace objects: content-addressed, compressed, shared, verified (every backend)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backends import on_disk
from bubu.events import FunctionResponse, WorkspaceSnapshot
from bubu.log import codec
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store
from bubu.snapshot import tree
from bubu.snapshot.take import Snapshotter
from conftest import make_event


def _new(store: Store) -> str:
    return store.create_session(title="t", workspace="/w").id


def test_objects_are_found_by_their_hash_and_stored_once(store: Store) -> None:
    data = b"print('hello')\n" * 1000
    sha = codec.sha256_hex(data)
    assert store.missing_objects([sha]) == {sha}
    assert store.get_object(sha) is None
    store.put_objects({sha: data})
    store.put_objects({sha: data, codec.sha256_hex(b""): b""})
    assert store.get_object(sha) == data
    assert store.get_object(codec.sha256_hex(b"")) == b""
    assert store.missing_objects([sha, "0" * 64]) == {"0" * 64}


def _workspace(root: Path) -> None:
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("a = 1\n")
    (root / "src" / "run.sh").write_text("#!/bin/sh\n")
    (root / "src" / "run.sh").chmod(0o755)
    (root / "README").write_text("hi\n")
    os.symlink("src/a.py", root / "link")


def _outcome(sid: str, snap: WorkspaceSnapshot) -> list[object]:
    response = FunctionResponse(call_id="c", name="run_command", result="ok", snapshot=snap)
    return [make_event(sid), make_event(sid, response, role="tool", author="tool")]


def test_a_snapshot_named_by_an_outcome_verifies(store: Store, tmp_path: Path) -> None:
    _workspace(tmp_path / "ws")
    snap = Snapshotter(store, tmp_path / "ws").take()
    assert snap.tree is not None
    assert snap.partial is None
    assert (snap.files, snap.skipped) == (4, 0)
    sid = _new(store)
    store.append(sid, _outcome(sid, snap), expect=0)  # type: ignore[arg-type]
    assert store.verify(sid).ok
    found = dict(tree.files(store.get_object, snap.tree))
    assert found["link"].mode == tree.LINK
    assert store.get_object(found["link"].sha256) == b"src/a.py"
    assert found["src/run.sh"].mode & 0o777 == 0o755


def test_verify_reports_a_snapshot_whose_object_is_missing(store: Store) -> None:
    sid = _new(store)
    entries: list[tree.Entry] = [("a.txt", 0o100644, codec.sha256_hex(b"never stored"), 12)]
    data = tree.encode(entries)
    store.put_objects({codec.sha256_hex(data): data})
    snap = WorkspaceSnapshot(tree=codec.sha256_hex(data), files=1, bytes=12)
    store.append(sid, _outcome(sid, snap), expect=0)  # type: ignore[arg-type]
    report = store.verify(sid)
    assert (report.ok, report.first_bad_seq) == (False, 2)
    assert report.problem is not None
    assert "snapshot" in report.problem


def test_verify_reports_a_missing_tree(store: Store) -> None:
    sid = _new(store)
    snap = WorkspaceSnapshot(tree="ab" * 32, files=1, bytes=12)
    store.append(sid, _outcome(sid, snap), expect=0)  # type: ignore[arg-type]
    report = store.verify(sid)
    assert (report.ok, report.first_bad_seq) == (False, 2)


def test_a_damaged_object_is_found_by_verify(sqlite_store: SQLiteStore, tmp_path: Path) -> None:
    _workspace(tmp_path / "ws")
    snap = Snapshotter(sqlite_store, tmp_path / "ws").take()
    sid = _new(sqlite_store)
    sqlite_store.append(sid, _outcome(sid, snap), expect=0)  # type: ignore[arg-type]
    sha = codec.sha256_hex(b"a = 1\n")
    db = sqlite_store._db
    db.execute("DROP TRIGGER objects_no_update")
    db.execute("UPDATE objects SET data = ? WHERE sha256 = ?", (b"x\x9c garbage", sha))
    report = sqlite_store.verify(sid)
    assert not report.ok
    assert report.problem is not None
    assert sha[:12] in report.problem
    assert sqlite_store.get_object(sha) is None


@on_disk
def test_objects_are_stored_compressed(store: Store) -> None:
    data = b"the same line again\n" * 10_000
    sha = codec.sha256_hex(data)
    store.put_objects({sha: data})
    size, stored = store._object_rows([sha])[sha]
    assert size == len(data)
    assert len(stored) < len(data) // 20


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_two_sessions_of_a_workspace_share_its_objects(store: Store, tmp_path: Path) -> None:
    _workspace(tmp_path / "ws")
    first = Snapshotter(store, tmp_path / "ws").take()
    again = Snapshotter(store, tmp_path / "ws").take()  # a new process: an empty stat cache
    assert first.tree == again.tree
    assert isinstance(store, SQLiteStore)
    count = store._db.execute("SELECT count(*) FROM objects").fetchone()[0]
    assert count == 4 + 2  # four files and links, two trees
