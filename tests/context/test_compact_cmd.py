"""`bubu compact SESSION` builds a checkpoint now, through `bubu` as a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bubu.events import CheckpointBody
from bubu.log.sqlite import SQLiteStore

from .helpers import compactions, model_requests, notes, write_script
from .test_cli import bubu


@pytest.mark.heavy
def test_compact_builds_a_checkpoint_now_and_the_next_request_uses_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(6):
        (ws / f"f{i}.txt").write_text(f"file {i} holds ITEM-{i:04d}\n" * 400)
    lines: list[dict[str, object]] = [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": f"f{i}.txt"}}]}
        for i in range(6)
    ]
    script = write_script(tmp_path / "s.jsonl", [*lines, {"text": "read them all"}])
    db = tmp_path / "bubu.db"
    run = bubu(db, "run", "read the six files", "-w", str(ws), "-m", f"scripted:{script}", "--yes")
    assert run.returncode == 0, run.stderr
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        assert compactions(store.read(info.id)) == []

    done = bubu(db, "compact", info.id, "-m", f"scripted:{script}", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    note = out["compaction"]
    assert note["ok"] is True
    assert note["chunks"] >= 1
    with SQLiteStore(db) as store:
        records = store.read(info.id)
        assert store.verify(info.id).ok
    ((seq, cp),) = compactions(records)
    assert cp.checkpoint == note["checkpoint"]
    body = dict(notes(records, CheckpointBody))[seq - 1]
    assert "read the six files" in body.facts
    # Traced like any model call, and the next request starts with the checkpoint.
    assert [
        n.request_digest for _, n in model_requests(records) if n.purpose == "summary"
    ] == cp.calls
    ctx = bubu(db, "context", info.id, "--json")
    assert ctx.returncode == 0, ctx.stderr
    shown = json.loads(ctx.stdout)
    assert shown["checkpoint"]["key"] == cp.checkpoint
    assert shown["messages"][0]["text"].startswith(
        f"[Summary of this session's events 1–{cp.watermark};"
    )

    # Each call folds what is older than the newest steps, until nothing is left to fold: then
    # it says so and writes nothing.
    said = []
    for _ in range(6):
        again = bubu(db, "compact", info.id, "-m", f"scripted:{script}")
        assert again.returncode == 0, again.stderr
        said.append(again.stdout)
        if "nothing to compact" in again.stdout:
            break
    assert "nothing to compact (fewer than two steps after the last checkpoint)" in said[-1]
    with SQLiteStore(db) as store:
        before = len(store.read(info.id))
    assert bubu(db, "compact", info.id, "-m", f"scripted:{script}").returncode == 0
    with SQLiteStore(db) as store:
        assert len(store.read(info.id)) == before
