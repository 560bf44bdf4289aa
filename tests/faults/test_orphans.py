"""A command never outlives the `bubu run` that runs it: SIGKILL the runner mid-command and its
whole tree dies; recovery kills whatever of a dead run is still alive before it says
"interrupted", and leaves every other session's processes alone. Real processes, real SIGKILL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bubu.engine.leftovers import Leftovers
from bubu.events import FunctionCall, RecoveryNotice, SystemNote
from bubu.projections.recovery import INTERRUPTED
from bubu.tools import proctree

from .helpers import bubu, finish, only_session, read, results, start_bubu, wait_for
from .test_process import pid_alive, project

LATE = "sleep 1; echo late >> late.txt"
COMMAND = (
    f"({LATE}) & echo $! > child; setsid sh -c 'echo $$ > setsid_child; {LATE}' & "
    "echo $$ > started; sleep 300"
)
"""A background child and a setsid one that each write a second later, unless killed first."""
GATED_LATE = (
    "import pathlib, time\n"
    "for _ in range(1500):\n"
    "    if pathlib.Path('go').exists(): break\n"
    "    time.sleep(0.02)\n"
    "pathlib.Path('late.txt').write_text('late')\n"
)
"""One process that writes once the test lets it go (or after 30 s)."""


def _none_marked(session: str) -> None:
    """No process of `session` is left on this host (its keeper may take a moment)."""
    deadline = time.monotonic() + 10
    while proctree.marked(proctree.session_match(session)):
        assert time.monotonic() < deadline, "a process of the dead run is still alive"
        time.sleep(0.02)


def _never_written(ws: Path, started: float) -> None:
    time.sleep(max(0.0, started + 1.6 - time.monotonic()))
    assert not (ws / "late.txt").exists(), "a process of the command wrote after its runner died"


@pytest.mark.heavy
@pytest.mark.parametrize("sandbox", ["off", "workspace-write"])
def test_a_sigkilled_bubu_run_takes_its_command_tree_with_it(tmp_path: Path, sandbox: str) -> None:
    db, ws, script = project(tmp_path, COMMAND)
    proc = start_bubu(
        db, "run", "go", "-w", str(ws), "-m", f"scripted:{script}", "--yes", "--sandbox", sandbox
    )
    wait_for(lambda: (ws / "setsid_child").exists() and (ws / "child").exists(), "the command")
    started = time.monotonic()
    pids = [int((ws / name).read_text()) for name in ("started", "child", "setsid_child")]
    proc.kill()
    code, _, _ = finish(proc)
    assert code == -9
    _none_marked(only_session(db))
    if sandbox == "off":  # in the sandbox the pids are its own namespace's, not this host's
        assert not any(map(pid_alive, pids))
    _never_written(ws, started)

    recovered = bubu(db, "recover")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    # Nothing was left to kill, so the model gets the plain interrupted result, and what the
    # command changed in the workspace (the three pid files it wrote).
    (result,) = results(read(db))
    assert result.result.startswith(INTERRUPTED + " Since the call was dispatched, 3 paths")


@pytest.mark.heavy
def test_recovery_kills_a_leftover_of_the_dead_run_before_it_says_interrupted(
    tmp_path: Path,
) -> None:
    db, ws, script = project(tmp_path, "echo $$ > started; sleep 300")
    crashed = bubu(
        db,
        "run",
        "go",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        env={"BUBU_FAILPOINT": "mid_tool"},
    )
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr
    session = only_session(db)
    _none_marked(session)
    (call_record,) = [r for r in read(db) if isinstance(r.event.content, FunctionCall)]
    assert isinstance(call_record.event.content, FunctionCall)
    marker = f"{session}/{call_record.event.run}/{call_record.event.content.call_id}"

    # What a keeper that was itself killed would leave: marked, but nobody's descendant.
    def start(marker: str, program: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-c", program],
            cwd=ws,
            start_new_session=True,
            env={**os.environ, proctree.MARKER_VAR: marker},
        )

    # It writes once the test lets it go (so a slow start of `bubu recover` changes nothing).
    leftover = start(marker, GATED_LATE)
    other = start(
        "ses_other/run_other/call_other", GATED_LATE.replace("late.txt", "other.txt")
    )  # a live runner's, elsewhere
    try:
        recovered = bubu(db, "recover")
        assert recovered.returncode == 0, recovered.stdout + recovered.stderr
        assert leftover.wait(timeout=5) == -9
        (ws / "go").touch()
        assert other.wait(timeout=30) == 0, "another session's process was touched"
    finally:
        (ws / "go").touch()
        other.kill()
        other.wait()
        leftover.kill()
        leftover.wait()
    assert not (ws / "late.txt").exists()
    assert (ws / "other.txt").exists()
    records = read(db)
    (result,) = results(records)
    assert result.is_error
    assert result.result.startswith(
        INTERRUPTED + " Still running after the crash, and killed before this result was "
        "written: 1 process it started. Nothing it started is running now."
    )
    (notice,) = [
        n
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(n := c.note, RecoveryNotice)
    ]
    assert notice.leftovers == [
        "run_command echo $$ > started; sleep 300: 1 process still running, killed"
    ]
    assert "left running by the crashed run: run_command" in recovered.stdout


def test_a_leftover_that_could_not_be_killed_is_said_so() -> None:
    found = Leftovers(killed={"c1": 2}, alive=[4242])
    assert found.sentence("c1") == (
        " Some processes of the crashed run could not be confirmed dead and may still be running "
        "(pids 4242)."
    )
    assert found.lines(lambda call: f"run_command #{call}") == [
        "run_command #c1: 2 processes still running, killed",
        "1 process could not be confirmed dead: 4242",
    ]
    assert Leftovers().sentence("c1") == ""
