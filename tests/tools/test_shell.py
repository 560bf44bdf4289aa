"""run_command with real subprocesses: exit codes, odd output, huge output, timeouts and stops."""

from __future__ import annotations

import os
import signal
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from bubu.tools import ToolContext, ToolResult
from bubu.tools.base import JSON, Tool
from bubu.tools.shell import HEAD_BYTES, KILL_GRACE_S, TAIL_BYTES


def run(tools: dict[str, Tool], ctx: ToolContext, command: str, **extra: JSON) -> ToolResult:
    return tools["run_command"].run({"command": command, **extra}, ctx, None)


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")


def wait_for(path: Path) -> int:
    """The pid a command wrote to `path`, once it has written it."""
    for _ in range(1000):
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.01)
    raise AssertionError(f"{path} was never written")


def test_output_and_exit_code(tools: dict[str, Tool], ws: Path, ctx: ToolContext) -> None:
    (ws / "a.txt").write_text("hello\n")
    result = run(tools, ctx, "cat a.txt; echo oops >&2; exit 3")
    assert result == ToolResult(
        output="hello\noops\nexit code 3", is_error=False, status="exit code 3"
    )
    assert run(tools, ctx, "true") == ToolResult(
        output="(no output)\nexit code 0", status="exit code 0"
    )
    assert run(tools, ctx, "pwd").output == f"{ws}\nexit code 0"
    assert run(tools, ctx, "cat; echo done").output == "done\nexit code 0"  # stdin is empty
    assert run(tools, ctx, "printf 'no newline'").output == "no newline\nexit code 0"


def test_killed_by_a_signal(tools: dict[str, Tool], ctx: ToolContext) -> None:
    result = run(tools, ctx, "kill -9 $$")
    assert result.output == "(no output)\nkilled by signal 9 (SIGKILL)"
    assert not result.is_error


def test_invalid_utf8_and_binary_output_are_replaced(
    tools: dict[str, Tool], ctx: ToolContext
) -> None:
    result = run(tools, ctx, r"printf 'ok \xff\xfe \xed\xa0\x80 \x00\x01 end\n'")
    assert result.output == "ok \ufffd\ufffd \ufffd\ufffd\ufffd \x00\x01 end\nexit code 0"
    result.output.encode("utf-8")  # strict: no lone surrogate in the text
    binary = run(tools, ctx, "head -c 65536 /dev/urandom")
    binary.output.encode("utf-8")


def test_a_lone_surrogate_in_the_command_is_an_error(
    tools: dict[str, Tool], ctx: ToolContext
) -> None:
    result = run(tools, ctx, "echo \ud800")
    assert result.is_error
    assert "cannot be passed to a shell" in result.output


def test_100_mb_of_output_keeps_head_and_tail_in_bounded_memory(
    tools: dict[str, Tool], ctx: ToolContext
) -> None:
    total = 100_000_000
    command = f"echo START; head -c {total} /dev/zero | tr '\\0' x; echo; echo END"
    tracemalloc.start()
    try:
        result = run(tools, ctx, command)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000
    assert not result.is_error
    assert len(result.output) < HEAD_BYTES + TAIL_BYTES + 200
    emitted = len("START\n") + total + len("\nEND\n")
    omitted = emitted - HEAD_BYTES - TAIL_BYTES
    head, rest = result.output.split("\n… [", 1)
    assert head.startswith("START\nxxx")
    assert len(head) == HEAD_BYTES
    assert rest.startswith(f"{omitted:,} bytes omitted] …\nxxx")
    assert rest.endswith(
        f"x\nEND\nexit code 0; the output was {emitted:,} bytes, more than the 64 MiB kept "
        f"whole: only its first and last bytes are kept, {omitted:,} bytes between them were "
        "dropped"
    )
    assert result.dropped == omitted


def test_the_head_and_tail_cut_on_character_boundaries(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    # One ASCII byte, then 3-byte characters: neither cap falls on a character boundary.
    (ws / "euro.txt").write_bytes(b"a" + "€".encode() * 20_000)
    result = run(tools, ctx, "cat euro.txt")
    assert "\ufffd" not in result.output
    head, tail = result.output.split("\n… [", 1)
    assert head == "a" + "€" * ((HEAD_BYTES - 1) // 3)
    assert tail.endswith("€€€\nexit code 0")


def test_a_timeout_kills_the_command(tools: dict[str, Tool], ws: Path, ctx: ToolContext) -> None:
    result = run(tools, ctx, "echo begun; sleep 300 & echo $! > pid; wait", timeout_s=0.5)
    assert result.is_error
    assert result.output == (
        "begun\ntimed out after 0.5s; the command and its processes were killed"
    )
    assert not alive(int((ws / "pid").read_text()))


def test_the_session_timeout_is_the_default(tools: dict[str, Tool], ws: Path) -> None:
    ctx = ToolContext(workspace=ws, timeout_s=0.3)
    result = run(tools, ctx, "sleep 300")
    assert result.output.endswith("timed out after 0.3s; the command and its processes were killed")


@pytest.mark.heavy
def test_a_command_that_ignores_sigterm_is_killed(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    command = "trap '' TERM; echo $$ > shell_pid; sleep 300 & echo $! > pid; wait; wait; wait"
    result = run(tools, ctx, command, timeout_s=0.5)
    assert result.is_error
    assert "timed out after 0.5s" in result.output
    assert not alive(int((ws / "shell_pid").read_text()))
    assert not alive(int((ws / "pid").read_text()))
    assert KILL_GRACE_S <= 5  # the grace that SIGTERM-ignoring commands wait out


def test_a_daemon_holding_the_output_open_does_not_hang_the_tool(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    result = run(tools, ctx, "sleep 300 & echo $! > pid; echo started")
    said = "exit code 0; background processes kept the output open and were stopped"
    assert result == ToolResult(output=f"started\n{said}", status=said)
    assert not alive(int((ws / "pid").read_text()))


def test_a_daemon_with_its_own_output_is_left_running(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    result = run(tools, ctx, "sleep 300 > /dev/null 2>&1 & echo $! > pid")
    assert result.output == "(no output)\nexit code 0"
    pid = int((ws / "pid").read_text())
    try:
        assert alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    "stopped_by",
    [None, "stopped by an orderly shutdown of Bubu (SIGTERM)"],
    ids=["by-the-user", "by-a-shutdown"],
)
def test_a_stop_kills_the_command_and_says_who_stopped_it(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext, stopped_by: str | None
) -> None:
    if stopped_by is not None:
        ctx.stopped_by = lambda: stopped_by
    results: list[ToolResult] = []
    worker = threading.Thread(
        target=lambda: results.append(run(tools, ctx, "echo $$ > pid; echo working; sleep 300"))
    )
    worker.start()
    pid = wait_for(ws / "pid")
    ctx.cancel.set()
    worker.join(60)
    assert not worker.is_alive()
    who = stopped_by or "stopped by the user"
    assert results == [
        ToolResult(
            output=f"working\n{who}; the command and its processes were killed",
            is_error=True,
            status=f"{who}; the command and its processes were killed",
        )
    ]
    assert not alive(pid)


def test_a_stop_before_the_start_runs_nothing(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    ctx.cancel.set()
    result = run(tools, ctx, "touch ran")
    assert result.is_error
    assert "did not run" in result.output
    assert not (ws / "ran").exists()


def test_a_real_time_signal_is_reported_by_number(tools: dict[str, Tool], ctx: ToolContext) -> None:
    number = signal.SIGRTMIN + 1
    assert run(tools, ctx, f"kill -{number} $$").output == f"(no output)\nkilled by signal {number}"


def test_a_missing_workspace_is_an_error_result(tools: dict[str, Tool], tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path / "gone")
    result = run(tools, ctx, "true")
    assert result.is_error
    assert "no such file or directory" in result.output


@pytest.mark.parametrize("timeout", [1e9, 3600])
def test_a_huge_timeout_is_capped_and_harmless(
    tools: dict[str, Tool], ctx: ToolContext, timeout: float
) -> None:
    assert run(tools, ctx, "echo hi", timeout_s=timeout).output == "hi\nexit code 0"
