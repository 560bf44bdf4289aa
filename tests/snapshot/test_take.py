"""Taking snapshots: ignore rules, what is skipped and listed, modes and links, the stat cache,
and a failure that never raises (real files, a real SQLite store)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from bubu.errors import StorageError
from bubu.log.sqlite import SQLiteStore
from bubu.snapshot import tree
from bubu.snapshot.take import Caps, Snapshotter, _Scan


def _files(store: SQLiteStore, root: str | None) -> set[str]:
    assert root is not None
    return {p for p, _ in tree.files(store.get_object, root)}


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "bubu.db")


def test_gitignore_rules_nested_and_negated_and_bubus_own_list(
    store: SQLiteStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    (ws / "sub" / "deep").mkdir(parents=True)
    (ws / ".gitignore").write_text("*.log\nbuild/\n!keep.log\n")
    (ws / "a.log").write_text("x")
    (ws / "keep.log").write_text("x")
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_text("x")
    (ws / "sub" / ".gitignore").write_text("secret.txt\n!a.log\n")
    (ws / "sub" / "secret.txt").write_text("x")
    (ws / "sub" / "a.log").write_text("x")
    (ws / "sub" / "deep" / "secret.txt").write_text("x")
    for own in (".git", "node_modules", ".venv", "__pycache__"):
        (ws / own).mkdir()
        (ws / own / "f").write_text("x")
    (ws / ".bubu").mkdir()
    (ws / ".bubu" / "config.toml").write_text("x")
    snap = Snapshotter(store, ws).take()
    assert _files(store, snap.tree) == {
        ".gitignore",
        "keep.log",
        "sub/.gitignore",
        "sub/a.log",
        ".bubu/config.toml",
    }


def test_what_is_skipped_is_listed_and_counted(store: SQLiteStore, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.bin").write_bytes(b"x" * 2000)
    (ws / "small.txt").write_text("ok\n")
    os.mkfifo(ws / "pipe")
    snap = Snapshotter(store, ws, caps=Caps(file_bytes=1000)).take()
    assert snap.tree is not None
    assert snap.skipped == 2
    assert snap.partial is None
    listed = dict(tree.skipped(store.get_object, snap.tree))
    assert listed == {
        "big.bin": "over the per-file cap of 1000 bytes",
        "pipe": "not a regular file or a link",
    }
    assert _files(store, snap.tree) == {"small.txt"}


def test_over_the_workspace_cap_the_snapshot_is_partial(store: SQLiteStore, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for n in range(5):
        (ws / f"f{n}.txt").write_text("x")
    snap = Snapshotter(store, ws, caps=Caps(files=3)).take()
    assert snap.files == 3
    assert snap.partial is not None
    assert "cap of 3 files" in snap.partial
    assert snap.skipped == 2


def test_only_changed_files_are_read_again(store: SQLiteStore, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    for n in range(20):
        (ws / "d" / f"f{n}.txt").write_text(f"file {n}\n")
    read: list[str] = []

    class Counting(Snapshotter):
        def _read(self, path: str, rel: str, size: int, link: bool, scan: _Scan) -> str | None:
            read.append(rel)
            return super()._read(path, rel, size, link, scan)

    s = Counting(store, ws)
    first = s.take()
    assert len(read) == 20
    time.sleep(0.05)  # out of the racy window of the first scan
    read.clear()
    s.take()
    read.clear()
    assert s.take().tree == first.tree
    assert read == []
    (ws / "d" / "f3.txt").write_text("changed\n")
    changed = s.take()
    assert read == ["d/f3.txt"]
    assert [c.path for c in tree.changes(store.get_object, first.tree, changed.tree)] == [
        "d/f3.txt"
    ]


def test_a_change_within_the_same_clock_tick_is_seen(store: SQLiteStore, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    f = ws / "a.txt"
    f.write_text("one\n")
    s = Snapshotter(store, ws)
    first = s.take()
    st = f.stat()
    f.write_text("two\n")  # same size; then the stat is made to look as before
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert s.take().tree != first.tree


def test_a_failing_store_gives_a_partial_snapshot_and_never_raises(tmp_path: Path) -> None:
    class Full(SQLiteStore):
        def _put_objects(self, rows: Sequence[tuple[str, int, bytes]]) -> None:
            raise StorageError("the disk is full")

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("x")
    snap = Snapshotter(Full(tmp_path / "bubu.db"), ws).take()
    assert snap.tree is None
    assert snap.partial == "the snapshot failed: the disk is full"


def test_a_new_process_starts_from_the_saved_stat_cache(store: SQLiteStore, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    for n in range(120):
        (ws / "d" / f"f{n}.txt").write_text(f"file {n}\n")
    time.sleep(0.05)  # older than the racy window: the first scan trusts them all
    first = Snapshotter(store, ws).take()
    read: list[str] = []

    class Counting(Snapshotter):
        def _read(self, path: str, rel: str, size: int, link: bool, scan: _Scan) -> str | None:
            read.append(rel)
            return super()._read(path, rel, size, link, scan)

    again = Counting(store, ws)  # as a new process would
    assert again.load_cache() == 120
    (ws / "d" / "f7.txt").write_text("changed\n")
    assert again.take().tree != first.tree
    assert read == ["d/f7.txt"]


def test_a_saved_cache_naming_a_missing_object_is_not_trusted(tmp_path: Path) -> None:
    from bubu.log import codec
    from bubu.log.memory import MemoryStore

    store = MemoryStore()
    ws = tmp_path / "ws"
    ws.mkdir()
    for n in range(120):
        (ws / f"f{n}.txt").write_text(f"file {n}\n")
    time.sleep(0.05)
    Snapshotter(store, ws).take()
    del store.db.objects[codec.sha256_hex(b"file 3\n")]
    again = Snapshotter(store, ws)
    assert again.load_cache() == 119
    snap = again.take()
    assert snap.tree is not None
    assert store.get_object(codec.sha256_hex(b"file 3\n")) == b"file 3\n"  # read and stored again
