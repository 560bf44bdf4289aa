"""The store's workspace objects: content-addressed, compressed, shared, verified (every
backend)."""

from __future__ import annotations

import os
import sqlite3
import zlib
from pathlib import Path

import pytest

from backends import on_disk
from bubu.events import FunctionResponse, WorkspaceSnapshot
from bubu.log import codec, objects
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


def _versions() -> list[bytes]:
    """Versions of one 200 KB text file, each a small edit of the one before."""
    lines = [f"line {n}: value = {n * 7919 % 10007}\n".encode() for n in range(8000)]
    out = [b"".join(lines)]
    for n in (10, 4000, 7999):
        lines.insert(n, b"an inserted line\n")
        lines[n + 2] = b"a changed line\n"
        out.append(b"".join(lines))
    return out


@on_disk
def test_a_new_version_is_stored_as_a_small_delta_and_reads_back(store: Store) -> None:
    versions = _versions()
    shas = [codec.sha256_hex(v) for v in versions]
    store.put_objects({shas[0]: versions[0]})
    for prev, sha, data in zip(shas, shas[1:], versions[1:], strict=False):
        store.put_objects({sha: data}, {sha: prev})
    rows = store._object_rows(shas)
    whole = len(rows[shas[0]][1])
    for sha, data in zip(shas[1:], versions[1:], strict=True):
        stored = rows[sha][1]
        assert objects.base_of(stored) == shas[0]  # one level: always against a whole object
        assert len(stored) < whole // 8
        assert store.get_object(sha) == data


def test_an_unrelated_base_leaves_the_object_whole(store: Store) -> None:
    base, data = os.urandom(4000), os.urandom(3000)
    store.put_objects({codec.sha256_hex(base): base})
    sha = codec.sha256_hex(data)
    store.put_objects({sha: data}, {sha: codec.sha256_hex(base)})
    assert objects.base_of(store._object_rows([sha])[sha][1]) is None
    assert store.get_object(sha) == data


def test_a_delta_whose_base_is_damaged_reads_as_missing_and_fails_verify(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    versions = _versions()
    (ws / "big.txt").write_bytes(versions[0])
    s = Snapshotter(sqlite_store, ws)
    s.take()
    (ws / "big.txt").write_bytes(versions[1])
    snap = s.take()
    sid = _new(sqlite_store)
    sqlite_store.append(sid, _outcome(sid, snap), expect=0)  # type: ignore[arg-type]
    new = codec.sha256_hex(versions[1])
    assert objects.base_of(sqlite_store._object_rows([new])[new][1]) == codec.sha256_hex(
        versions[0]
    )
    assert sqlite_store.verify(sid).ok
    db = sqlite_store._db
    db.execute("DROP TRIGGER objects_no_update")
    db.execute(
        "UPDATE objects SET data = ? WHERE sha256 = ?",
        (zlib.compress(b"not the base"), codec.sha256_hex(versions[0])),
    )
    assert sqlite_store.get_object(new) is None
    report = sqlite_store.verify(sid)
    assert not report.ok
    assert report.problem is not None
    assert new[:12] in report.problem


def test_a_store_of_whole_objects_from_before_deltas_still_reads_and_verifies(
    tmp_path: Path,
) -> None:
    """A database written before deltas (migration 5, objects whole at zlib's level 1) opens,
    records the delta migration, and reads and verifies its snapshots as before."""
    path = tmp_path / "old.db"
    ws = tmp_path / "ws"
    _workspace(ws)
    with SQLiteStore(path) as store:
        snap = Snapshotter(store, ws).take()
        assert snap.tree is not None
        sid = _new(store)
        store.append(sid, _outcome(sid, snap), expect=0)  # type: ignore[arg-type]
        found = {p: store.get_object(f.sha256) for p, f in tree.files(store.get_object, snap.tree)}
        shas = [r[0] for r in store._db.execute("SELECT sha256 FROM objects")]
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("DROP TRIGGER objects_no_update")
    for sha in shas:  # as the older Bubu stored them
        (_size, data) = raw.execute(
            "SELECT size, data FROM objects WHERE sha256=?", (sha,)
        ).fetchone()
        old = zlib.compress(zlib.decompress(data), 1)
        raw.execute("UPDATE objects SET data=? WHERE sha256=?", (old, sha))
    raw.execute("DELETE FROM bubu_migrations WHERE version = 6")
    raw.close()
    with SQLiteStore(path) as store:
        assert 6 in {v for v, _ in store.migrations()}
        assert store.verify(sid).ok
        again = {p: store.get_object(f.sha256) for p, f in tree.files(store.get_object, snap.tree)}
        assert again == found
        assert None not in again.values()


@on_disk
def test_a_delta_against_a_delta_still_reads(store: Store) -> None:
    """Two processes storing one version at once may leave a delta as another delta's base."""
    first, second, third = _versions()[:3]
    a, b, c = (codec.sha256_hex(v) for v in (first, second, third))
    store.put_objects({a: first})
    store.put_objects({b: second}, {b: a})
    assert objects.base_of(store._object_rows([b])[b][1]) == a
    store._put_objects([objects.pack(third, c, (b, second))])
    assert objects.base_of(store._object_rows([c])[c][1]) == b
    assert store.get_object(c) == third
