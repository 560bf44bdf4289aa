"""Snapshots with the change feed: what is not reported is not opened, and what changed is found
whatever the change (real files, real inotify, a real SQLite store). Every incremental snapshot
is checked against a first walk of a new snapshotter, and restores to exactly the workspace."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bubu.log.sqlite import SQLiteStore
from bubu.snapshot import restore, tree, watch
from bubu.snapshot.take import Snapshotter
from hypo import examples

pytestmark = pytest.mark.skipif(
    watch.Feed.open() is None, reason="inotify is not available on this system"
)


def _tree_of(path: Path) -> dict[str, tuple[int, bytes]]:
    """What a snapshot should hold of `path`: per file or link, its mode and bytes."""
    out = {}
    for dirpath, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(dirpath, d))]
        for name in files + [d for d in os.listdir(dirpath) if os.path.islink(f"{dirpath}/{d}")]:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, path)
            st_ = os.lstat(full)
            data = (
                os.fsencode(os.readlink(full)) if os.path.islink(full) else Path(full).read_bytes()
            )
            out[rel] = (st_.st_mode & 0o777 if not os.path.islink(full) else 0, data)
    return out


def _check(store: SQLiteStore, s: Snapshotter, ws: Path, tmp: Path) -> None:
    snap = s.take()
    first = Snapshotter(store, ws)
    first._no_feed = True
    fresh = first.take()  # a first walk: lists everything
    assert snap.tree is not None
    assert tree.changes(store.get_object, fresh.tree, snap.tree) == []
    assert snap.tree == fresh.tree
    assert (snap.files, snap.bytes, snap.skipped) == (fresh.files, fresh.bytes, fresh.skipped)
    out = tmp / f"out{time.monotonic_ns()}"
    restore.materialize(store.get_object, snap.tree, out)
    kept = {p for p, _ in tree.files(store.get_object, snap.tree)}  # not ignored
    assert _tree_of(out) == {p: v for p, v in _tree_of(ws).items() if p in kept}
    shutil.rmtree(out)


def _settle(s: Snapshotter) -> None:
    time.sleep(0.03)  # out of the racy window
    s.take()


def _workspace(ws: Path) -> None:
    for d in ("a", "a/b", "c"):
        (ws / d).mkdir(parents=True)
    for n in range(5):
        (ws / "a" / f"f{n}.txt").write_text(f"a {n}\n")
        (ws / "a" / "b" / f"g{n}.txt").write_text(f"b {n}\n")
        (ws / "c" / f"h{n}.txt").write_text(f"c {n}\n")
    (ws / "top.txt").write_text("top\n")


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "bubu.db")


def test_an_unchanged_workspace_is_not_opened(store: SQLiteStore, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _workspace(ws)
    s = Snapshotter(store, ws)
    first = s.take()
    assert s.last_listed == 4
    _settle(s)
    again = s.take()
    assert again.tree == first.tree
    assert (s.last_listed, s.last_reused) == (0, 1)


def test_a_change_opens_only_its_directory_and_reads_only_its_file(
    store: SQLiteStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    _workspace(ws)
    read: list[str] = []

    class Counting(Snapshotter):
        def _read(self, path: str, rel: str, size: int, link: bool, scan: object) -> str | None:
            read.append(rel)
            return super()._read(path, rel, size, link, scan)  # type: ignore[arg-type]

    s = Counting(store, ws)
    s.take()
    _settle(s)
    read.clear()
    f = ws / "a" / "b" / "g2.txt"
    before = f.stat()
    f.write_text("B 2\n")  # the same size, and the same mtime as before
    os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))
    _check(store, s, ws, tmp_path)
    assert read == ["a/b/g2.txt"]
    assert s.last_listed == 0  # patched by name: no directory listed whole
    assert s.last_reused == 1  # c/, taken unopened


def test_hard_links_within_the_workspace_are_checked_every_time(
    store: SQLiteStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    _workspace(ws)
    os.link(ws / "a" / "f1.txt", ws / "c" / "linked.txt")
    s = Snapshotter(store, ws)
    s.take()
    _settle(s)
    with (ws / "a" / "f1.txt").open("a") as f:  # the change is reported in a/ only
        f.write("more\n")
    _check(store, s, ws, tmp_path)


def test_an_overflowing_queue_walks_everything(store: SQLiteStore, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _workspace(ws)
    s = Snapshotter(store, ws)
    s.take()
    _settle(s)
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 40_000:
        pytest.skip("the queue is too long to overflow quickly")
    one = os.open(ws / "a" / "f1.txt", os.O_WRONLY | os.O_APPEND)
    two = os.open(ws / "a" / "f2.txt", os.O_WRONLY | os.O_APPEND)
    for _ in range(limit // 2 + 100):  # alternating: the kernel merges only repeated events
        os.write(one, b"1")
        os.write(two, b"2")
    os.close(one)
    os.close(two)
    (ws / "c" / "h1.txt").write_text("changed after the overflow\n")
    assert s._feed is not None
    _check(store, s, ws, tmp_path)
    assert s.last_listed == 4  # everything


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "write",
                "append",
                "same_size",
                "delete",
                "mkdir",
                "rmtree",
                "rename",
                "rename_dir",
                "move_out_and_back",
                "chmod",
                "symlink",
                "hardlink",
                "gitignore",
                "replace_dir_with_file",
            ]
        ),
        st.integers(0, 1000),
    ),
    min_size=1,
    max_size=6,
)


def _apply(ws: Path, outside: Path, op: str, n: int) -> None:
    dirs = sorted(p for p in ws.rglob("*") if p.is_dir() and not p.is_symlink()) or [ws]
    files = sorted(p for p in ws.rglob("*") if p.is_file() and not p.is_symlink())
    d = [ws, *dirs][n % (len(dirs) + 1)]
    f = files[n % len(files)] if files else None
    if op == "write":
        (d / f"new{n}.txt").write_text(f"new {n}\n")
    elif op == "append" and f is not None:
        with f.open("a") as out:
            out.write(f"line {n}\n")
    elif op == "same_size" and f is not None:
        before = f.stat()
        data = f.read_bytes()
        f.write_bytes(bytes(reversed(data)) if data != data[::-1] else data + b"")
        os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif op == "delete" and f is not None:
        f.unlink()
    elif op == "mkdir":
        (d / f"d{n}" / "e").mkdir(parents=True, exist_ok=True)
        (d / f"d{n}" / "e" / "x.txt").write_text(f"x {n}\n")
    elif op == "rmtree" and d != ws:
        shutil.rmtree(d)
    elif op == "rename" and f is not None:
        f.rename(d / f"renamed{n}.txt")
    elif op == "rename_dir" and d != ws and not (ws / f"moved{n}").exists():
        d.rename(ws / f"moved{n}")
    elif op == "move_out_and_back" and d != ws:
        away = outside / f"away{n}"
        d.rename(away)
        (away / f"while_away{n}.txt").write_text("written while outside\n")
        away.rename(d)
    elif op == "chmod" and f is not None:
        f.chmod(0o755 if f.stat().st_mode & 0o100 == 0 else 0o644)
    elif op == "symlink":
        link = d / f"link{n}"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(f"target{n}")
    elif op == "hardlink" and f is not None:
        other = d / f"hard{n}.txt"
        if not other.exists():
            os.link(f, other)
            with f.open("a") as out:
                out.write("through the first name\n")
    elif op == "gitignore":
        (d / ".gitignore").write_text("*.log\nnew*\n" if n % 2 else "renamed*\n")
    elif op == "replace_dir_with_file" and d != ws:
        shutil.rmtree(d)
        d.write_text("now a file\n")


@pytest.mark.heavy
@pytest.mark.parametrize("feed", ["on", "off"])
@settings(
    max_examples=examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(batches=st.lists(OPS, min_size=1, max_size=4))
def test_after_random_changes_a_snapshot_restores_the_workspace_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, feed: str, batches: list[list[tuple[str, int]]]
) -> None:
    monkeypatch.setenv("BUBU_SNAPSHOT_WATCH", feed)
    base = tmp_path / f"run{time.monotonic_ns()}"
    ws, outside = base / "ws", base / "outside"
    _workspace(ws)
    outside.mkdir()
    with SQLiteStore(base / "bubu.db") as store:
        s = Snapshotter(store, ws)
        s.take()
        for i, batch in enumerate(batches):
            for op, n in batch:
                with contextlib.suppress(OSError):  # an op the tree's shape does not allow
                    _apply(ws, outside, op, n)
            _check(store, s, ws, base)
            if i % 2:
                _settle(s)
        s.close()
    shutil.rmtree(base)


def test_with_the_feed_off_every_directory_is_listed(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUBU_SNAPSHOT_WATCH", "off")
    ws = tmp_path / "ws"
    _workspace(ws)
    s = Snapshotter(store, ws)
    first = s.take()
    _settle(s)
    assert s.take().tree == first.tree
    assert s.last_listed == 4
    assert tree.changes(store.get_object, first.tree, s.take().tree) == []
