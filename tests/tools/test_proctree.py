"""A command's whole tree — setsid children included — dies on a timeout, a stop, a vanished
keeper and the runner's SIGKILL; "killed" is said only once it is gone. Real processes only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from bubu.tools import ToolContext, ToolResult, proctree
from bubu.tools.base import Tool
from bubu.tools.shell import Completed, _status

from .test_shell import alive, run, wait_for

LATE = "sleep 1; echo late >> late.txt"
"""A process that writes a second after it starts, unless it is killed first."""


ESCAPEES = (
    f"({LATE}) & echo $! > child; setsid sh -c 'echo $$ > setsid_child; {LATE}' & "
    "echo started; sleep 300"
)
"""A command that starts a background child and a setsid one, records their pids, and waits."""


def never_written(ws: Path, started: float) -> None:
    """`late.txt` is still absent after the time its writers would have written it."""
    time.sleep(max(0.0, started + 1.6 - time.monotonic()))
    assert not (ws / "late.txt").exists(), "a process of the command outlived it and wrote"


@pytest.mark.heavy
def test_a_timeout_kills_setsid_children_before_it_says_killed(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    started = time.monotonic()
    result = run(tools, ctx, ESCAPEES, timeout_s=0.5)
    said = "timed out after 0.5s; the command and its processes were killed"
    assert result == ToolResult(
        output=f"started\n{said}",
        status=said,
        is_error=True,
    )
    # Dead when the result is returned, not some time later.
    assert not alive(int((ws / "setsid_child").read_text()))
    assert not alive(int((ws / "child").read_text()))
    never_written(ws, started)


@pytest.mark.heavy
def test_a_stop_kills_setsid_children(tools: dict[str, Tool], ws: Path, ctx: ToolContext) -> None:
    results: list[ToolResult] = []
    worker = threading.Thread(target=lambda: results.append(run(tools, ctx, ESCAPEES)))
    started = time.monotonic()
    worker.start()
    pid = wait_for(ws / "setsid_child")
    ctx.cancel.set()
    worker.join(10)
    assert results[0].output.endswith(
        "stopped by the user; the command and its processes were killed"
    )
    assert not alive(pid)
    never_written(ws, started)


def test_a_double_forked_daemon_holding_the_output_is_stopped(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    # Its parent exits at once, so it is nobody's child: only the subreaper keeps it in the tree.
    result = run(tools, ctx, "(setsid sh -c 'echo $$ > pid; exec sleep 300' &); echo ok")
    assert result.output == (
        "ok\nexit code 0; background processes kept the output open and were stopped"
    )
    assert not alive(int((ws / "pid").read_text()))


@pytest.mark.heavy
def test_a_keeper_killed_from_outside_still_leaves_nothing(
    tools: dict[str, Tool], ws: Path
) -> None:
    ctx = ToolContext(workspace=ws, timeout_s=30.0, marker="ses_t/run_t/call_lost")
    results: list[ToolResult] = []
    worker = threading.Thread(target=lambda: results.append(run(tools, ctx, ESCAPEES)))
    started = time.monotonic()
    worker.start()
    pid = wait_for(ws / "setsid_child")
    (keeper,) = [
        p for p in proctree.marked(lambda m: m == ctx.marker) if b"import keeper" in _cmdline(p)
    ]
    os.kill(keeper, signal.SIGKILL)
    worker.join(10)
    assert results[0].is_error
    assert results[0].output.endswith(
        "the process that held the command was killed from outside; "
        "the command and its processes were killed"
    )
    assert not alive(pid)
    assert proctree.marked(lambda m: m == ctx.marker) == {}
    never_written(ws, started)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_every_process_carries_the_marker_of_its_call(tools: dict[str, Tool], ws: Path) -> None:
    ctx = ToolContext(workspace=ws, marker="ses_a/run_b/call_c")
    result = run(tools, ctx, "echo $BUBU_CALL; setsid sh -c 'echo $BUBU_CALL'")
    assert result.output == "ses_a/run_b/call_c\nses_a/run_b/call_c\nexit code 0"


def test_a_tree_that_could_not_be_confirmed_dead_is_not_called_killed() -> None:
    done = Completed(ending="timed_out", returncode=-9, output="", total_bytes=0, left=2)
    assert _status(done, 5, "stopped by the user") == (
        "timed out after 5s; the command was killed, but 2 of its processes could not be "
        "confirmed dead and may still run"
    )
    stopped = Completed(ending="stopped", returncode=-9, output="", total_bytes=0, left=1)
    assert _status(stopped, 5, "stopped by the user").endswith(
        "1 of its processes could not be confirmed dead and may still run"
    )


RUNNER = textwrap.dedent(
    """
    import sys, threading
    from bubu.tools.shell import run_shell
    done = run_shell(sys.argv[1], sys.argv[2], 300, threading.Event(), marker="ses_r/run_r/call_r")
    print(done.ending, flush=True)
    threading.Event().wait()
    """
)


def _runner(ws: Path, command: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, command, str(ws)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


@pytest.mark.heavy
def test_a_sigkilled_runner_takes_the_whole_tree_with_it(ws: Path) -> None:
    runner = _runner(ws, ESCAPEES)
    started = time.monotonic()
    try:
        child, setsid_child = wait_for(ws / "child"), wait_for(ws / "setsid_child")
        runner.kill()
        runner.wait()
        _gone([child, setsid_child], "ses_r/run_r/call_r")
    finally:
        runner.kill()
        assert runner.stdout is not None
        runner.stdout.close()
    never_written(ws, started)


def test_a_background_daemon_lives_while_the_runner_does_and_dies_with_it(ws: Path) -> None:
    runner = _runner(ws, "setsid sh -c 'echo $$ > pid; exec sleep 300' > /dev/null 2>&1 &")
    try:
        assert runner.stdout is not None
        assert runner.stdout.readline() == "exited\n"
        daemon = wait_for(ws / "pid")
        time.sleep(0.2)
        assert alive(daemon), "a daemon with its own output outlives its command"
        runner.kill()
        runner.wait()
        _gone([daemon], "ses_r/run_r/call_r")
    finally:
        runner.kill()
        assert runner.stdout is not None
        runner.stdout.close()


def _gone(pids: list[int], marker: str) -> None:
    deadline = time.monotonic() + 10
    while any(map(alive, pids)) or proctree.marked(lambda m: m == marker):
        assert time.monotonic() < deadline, "the tree outlived its runner"
        time.sleep(0.02)


def test_a_keeper_whose_runner_died_before_it_was_armed_starts_nothing(ws: Path) -> None:
    # Its parent (the pid it is told) is not its real parent: the runner is already gone.
    done = subprocess.run(
        proctree.keeper_argv("1", str(ws), "--", "touch", "ran"),
        check=False,
        pass_fds=(),
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0
    assert not (ws / "ran").exists()


def test_an_orphan_of_the_command_is_adopted_by_its_keeper(
    tools: dict[str, Tool], ws: Path
) -> None:
    # The subreaper, not the marker search, is what holds it: its parent is the keeper, not init.
    ctx = ToolContext(workspace=ws, marker="ses_o/run_o/call_o")
    command = (
        "(setsid sleep 300 > /dev/null 2>&1 & echo $! > pid); sleep 0.1; cat /proc/$(cat pid)/stat"
    )
    result = run(tools, ctx, command)
    stat = result.output.splitlines()[0]
    parent = int(stat[stat.rfind(")") + 2 :].split()[1])
    try:
        assert b"import keeper" in _cmdline(parent)
        assert proctree.marked(lambda m: m == ctx.marker) == {}, "own background trees are spared"
    finally:
        os.kill(int((ws / "pid").read_text()), signal.SIGKILL)
