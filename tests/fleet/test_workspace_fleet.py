"""Resume anywhere: two workers that behave as two machines (their own workspace roots and
BUBU_HOMEs, one PostgreSQL). A task submitted with its workspace's snapshot from a directory that
then disappears; the first worker materializes it, runs a step and is SIGKILLed mid-command; the
second materializes the session's last snapshot into its own root and finishes the task there,
with the first one's changes present and nothing done twice."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from bubu.events import FunctionResponse
from bubu.log.postgres import PostgresStore
from bubu.projections.recovery import INTERRUPTED
from bubu.projections.status import fold_status

from .proc import WorkerProc, bubu_json, command, wait_for, write_script


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.heavy
def test_a_second_machine_finishes_the_task_in_its_own_workspace(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    src = tmp_path / "submitter"
    src.mkdir()
    (src / "a.txt").write_text("start\n")
    (src / "tool.sh").write_text("#!/bin/sh\n")
    (src / "tool.sh").chmod(0o755)
    counter = tmp_path / "counter"
    model = write_script(
        tmp_path / "s.jsonl",
        [
            command(f"echo one >> a.txt; echo one >> {counter}"),
            command(f"echo two >> {counter}; sleep 60"),
            command(f"echo three >> a.txt; echo three >> {counter}"),
            {"text": "done"},
        ],
    )
    sid = bubu_json(
        tmp_path / "submit-home",
        "submit",
        "do it",
        "--db",
        url,
        "-w",
        str(src),
        "-m",
        model,
        "--snapshot",
        "--sandbox",
        "off",
        "--yes",
        "--json",
    )["session"]
    shutil.rmtree(src)  # the submitter's machine: gone
    roots = [tmp_path / "machine1" / "work", tmp_path / "machine2" / "work"]
    homes = [tmp_path / "machine1" / "home", tmp_path / "machine2" / "home"]
    for h in homes:
        h.mkdir(parents=True)
    # The task runs unconfined (its commands count in a file outside the workspace), so these
    # workers allow that above the default ceiling.
    args = ("--lease-ttl", "1", "--poll", "0.1", "--max-sandbox", "off", "--allow-yes")
    first = WorkerProc(homes[0], url, "--workspaces", str(roots[0]), *args, name="first")
    try:
        wait_for(lambda: _lines(counter) == ["one", "two"], "the first worker's second command")
        first.send(signal.SIGKILL)
        assert first.wait() == -signal.SIGKILL
    finally:
        first.kill()
    assert (roots[0] / sid / "a.txt").read_text() == "start\none\n"

    second = WorkerProc(homes[1], url, "--workspaces", str(roots[1]), *args, name="second")
    try:
        wait_for(lambda: fold_status(pg.read(sid)).state == "completed", "the task to finish", 90)
        second.send(signal.SIGTERM)
        assert second.wait() == 0
    finally:
        second.kill()

    mine = roots[1] / sid
    assert (mine / "a.txt").read_text() == "start\none\nthree\n"
    assert (mine / "tool.sh").stat().st_mode & 0o777 == 0o755
    assert _lines(counter) == ["one", "two", "three"]  # nothing done twice
    assert (roots[0] / sid / "a.txt").read_text() == "start\none\n"  # the first's copy untouched
    results = [c for r in pg.read(sid) if isinstance(c := r.event.content, FunctionResponse)]
    assert [r.result.startswith(INTERRUPTED) for r in results] == [False, True, False]
    assert pg.verify(sid).ok
