"""A turn a fleet worker starts reads the project's AGENTS.md as a turn `bubu run` starts does."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.engine.worker import Submission, submit
from bubu.events import ProjectInstructions, SystemNote
from bubu.log.postgres import PostgresStore
from bubu.projections.status import fold_status

from .proc import WorkerProc, write_script

pytestmark = pytest.mark.postgres


def test_a_worker_s_turn_holds_the_project_instructions(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "AGENTS.md").write_text("Run the tests with `make check`.\n")
    model = write_script(tmp_path / "script.jsonl", [{"text": "done"}])
    info = submit(pg, task="look", workspace=ws, model=model, policy=Submission())
    worker = WorkerProc(tmp_path, url, "--once", "--poll", "0.1", name="worker")
    try:
        assert worker.wait() == 0
    finally:
        worker.kill()
    records = pg.read(info.id)
    assert fold_status(records).state == "completed"
    notes = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, ProjectInstructions)
    ]
    assert [n.cause for n in notes] == ["start"]
    assert [(f.path, f.text) for f in notes[0].files] == [
        ("AGENTS.md", "Run the tests with `make check`.\n")
    ]
