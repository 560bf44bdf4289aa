"""Workspace snapshots travel with their session: `bubu export`/`import` and `bubu copy-store`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.cli.storecmds import copy_session
from bubu.errors import CorruptLog
from bubu.events import FunctionResponse, WorkspaceSnapshot
from bubu.log import codec
from bubu.log.memory import MemoryStore
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store
from bubu.log.transfer import export_lines, import_lines
from bubu.snapshot import refs, tree
from bubu.snapshot.take import Snapshotter
from conftest import make_event


def _session(store: Store, ws: Path) -> tuple[str, WorkspaceSnapshot]:
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("a = 1\n")
    (ws / "b.txt").write_text("b\n")
    snap = Snapshotter(store, ws).take()
    sid = store.create_session(title="t", workspace=str(ws)).id
    response = FunctionResponse(call_id="c", name="run_command", result="ok", snapshot=snap)
    store.append(
        sid, [make_event(sid), make_event(sid, response, role="tool", author="tool")], expect=0
    )
    return sid, snap


def _files(store: Store, root: str) -> dict[str, bytes | None]:
    return {p: store.get_object(f.sha256) for p, f in tree.files(store.get_object, root)}


def test_export_then_import_carries_the_snapshots(tmp_path: Path) -> None:
    src = SQLiteStore(tmp_path / "a.db")
    sid, snap = _session(src, tmp_path / "ws")
    assert snap.tree is not None
    lines = list(export_lines(src, src.session(sid)))
    dst = MemoryStore()
    info, _ = import_lines(dst, lines)
    assert dst.verify(info.id).ok
    assert _files(dst, snap.tree) == {"b.txt": b"b\n", "src/a.py": b"a = 1\n"}


def test_an_import_missing_an_object_of_a_named_snapshot_is_refused(tmp_path: Path) -> None:
    src = SQLiteStore(tmp_path / "a.db")
    sid, snap = _session(src, tmp_path / "ws")
    lines = list(export_lines(src, src.session(sid)))
    # Drop the root tree's line and lower the header's count: the chain still verifies.
    root_line = next(
        i for i, line in enumerate(lines) if f'"object":"{snap.tree}"'.encode() in line
    )
    del lines[root_line]
    lines[0] = lines[0].replace(b'"objects":4', b'"objects":3')
    dst = MemoryStore()
    with pytest.raises(CorruptLog, match="snapshot"):
        import_lines(dst, lines)
    assert dst.sessions() == []


def test_copy_store_carries_the_snapshots(tmp_path: Path) -> None:
    src = SQLiteStore(tmp_path / "a.db")
    sid, snap = _session(src, tmp_path / "ws")
    dst = SQLiteStore(tmp_path / "b.db")
    result = copy_session(src, dst, src.session(sid))
    assert result.result == "copied"
    assert dst.verify(sid).ok
    assert snap.tree is not None
    assert set(_files(dst, snap.tree).values()) == {b"b\n", b"a = 1\n"}


def test_copy_store_refuses_a_session_whose_snapshot_lost_an_object(tmp_path: Path) -> None:
    src = MemoryStore()
    sid, snap = _session(src, tmp_path / "ws")
    del src.db.objects[codec.sha256_hex(b"b\n")]
    dst = MemoryStore()
    result = copy_session(src, dst, src.session(sid))
    assert result.result == "refused"
    assert "workspace snapshot" in (result.reason or "")
    assert dst.sessions() == []
    assert refs.roots(src.read(sid)) == [snap.tree]
