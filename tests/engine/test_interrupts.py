"""Stopping a running turn from another thread (what Ctrl-C and SIGTERM do in the CLI): the running
command's whole process group is killed, its outcome is committed, and the turn ends `stopped` or
`suspended`; a suspended turn is continued by `resume_turn`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from bubu.engine.driver import StopReason
from bubu.engine.permissions import Policy
from bubu.engine.session import new_session, resume_turn, start_turn
from bubu.errors import ConfigError
from bubu.events import SystemNote, TurnEndReason, TurnStarted
from bubu.log.sqlite import SQLiteStore
from bubu.projections.turn import fold
from bubu.tools import Tool, builtin_tools

from .helpers import (
    call,
    calls,
    make_host,
    outcomes,
    process_alive,
    scripted,
    turn_end,
    wait_for,
    write_script,
)

SLOW = "echo $$ > pid.txt; sleep 60; echo late > late.txt"


def _in_thread(
    fn: Callable[[], TurnEndReason | None],
) -> tuple[threading.Thread, list[TurnEndReason | None]]:
    """Drive a turn in another thread, as the CLI's main thread does while signals arrive."""
    result: list[TurnEndReason | None] = []
    thread = threading.Thread(target=lambda: result.append(fn()))
    thread.start()
    return thread, result


@pytest.mark.parametrize("reason", ["stopped", "suspended"])
def test_a_stop_kills_the_running_command_and_ends_the_turn(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path, reason: StopReason
) -> None:
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"text": "slow one", "tool_calls": [call("run_command", command=SLOW)]},
            {"text": "after"},
        ],
    )
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    host = make_host(
        sqlite_store, provider, policy=Policy(yes=True, sandbox="off")
    )  # pids of the host
    pid_file = ws / "pid.txt"

    thread, result = _in_thread(lambda: start_turn(host, info, "t"))
    wait_for(
        lambda: pid_file.exists() and pid_file.read_text().strip().isdigit(), "the command to start"
    )
    pid = int(pid_file.read_text())
    assert host.runner is not None
    host.runner.request_stop(reason)
    thread.join(60)

    assert not thread.is_alive()
    assert result == [reason]
    assert not process_alive(pid), "the command's process group was killed"
    assert not (ws / "late.txt").exists()
    records = sqlite_store.read(info.id)
    end = turn_end(records)
    assert end.reason == reason
    ((_, fc),) = calls(records)
    ((_, out),) = outcomes(records)[fc.call_id]
    assert out.is_error, "the cut-off command's result says so"
    assert len(provider.requests) == 1, "no model call after the stop"

    if reason == "suspended":
        again = make_host(sqlite_store, scripted(script))
        assert resume_turn(again, info) == "completed"
        records = sqlite_store.read(info.id)
        assert turn_end(records).reason == "completed"
        assert len(outcomes(records)[fc.call_id]) == 1, "the command is not run again by resume"
        assert not (ws / "late.txt").exists()


def test_a_stop_while_waiting_for_the_model_ends_the_turn(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    # delay_s keeps the scripted model streaming for a while: the stop cuts the stream.
    script = write_script(
        tmp_path / "s.jsonl", [{"text": " ".join(["word"] * 400), "delay_s": 60.0}]
    )
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    host = make_host(sqlite_store, provider)

    thread, result = _in_thread(lambda: start_turn(host, info, "t"))
    wait_for(lambda: len(provider.requests) == 1, "the model call to start")
    assert host.runner is not None
    host.runner.request_stop("stopped")
    thread.join(60)

    assert result == ["stopped"]
    records = sqlite_store.read(info.id)
    assert turn_end(records).reason == "stopped"
    assert not any(r.event.role == "model" for r in records), "a cut-off response is not committed"


def test_a_resumed_turn_gets_the_tools_of_the_mcp_file_it_was_started_with(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    script = write_script(
        tmp_path / "s.jsonl",
        [{"tool_calls": [call("run_command", command=SLOW)]}, {"text": "after"}],
    )
    servers = tmp_path / "servers.json"
    servers.write_text("{}")
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    host = make_host(
        sqlite_store, provider, policy=Policy(yes=True, sandbox="off")
    )  # pids of the host
    host.mcp_config = str(servers)
    thread, _ = _in_thread(lambda: start_turn(host, info, "t"))
    wait_for((ws / "pid.txt").exists, "the command to start")
    assert host.runner is not None
    host.runner.request_stop("suspended")
    thread.join(60)

    asked: list[str] = []

    def load_tools(path: str) -> dict[str, Tool]:
        asked.append(path)
        return builtin_tools()

    again = make_host(sqlite_store, scripted(script))  # no MCP file of its own
    again.load_tools = load_tools
    assert resume_turn(again, info) == "completed"
    assert asked == [str(servers)]
    opened = [
        c.note
        for r in sqlite_store.read(info.id, kinds=["turn_started"])
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
    ]
    assert [n.mcp_config for n in opened] == [str(servers), str(servers)]

    # Tools the user chose (no loader) are kept, and a file that is gone is a clear error.
    fixed = make_host(sqlite_store, scripted(script))
    fixed.adopt_turn_tools(fold(sqlite_store.read(info.id)))
    assert fixed.mcp_config is None
    servers.unlink()
    gone = make_host(sqlite_store, scripted(script))
    gone.load_tools = load_tools
    with pytest.raises(ConfigError, match=r"servers\.json, which no longer exists; restore it"):
        gone.adopt_turn_tools(fold(sqlite_store.read(info.id)))
    assert asked == [str(servers)]


def test_a_stop_requested_from_another_process_ends_the_turn_stopped(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    script = write_script(
        tmp_path / "s.jsonl",
        [{"tool_calls": [call("run_command", command=SLOW)]}, {"text": "after"}],
    )
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    host = make_host(
        sqlite_store, provider, policy=Policy(yes=True, sandbox="off")
    )  # pids of the host
    pid_file = ws / "pid.txt"
    thread, result = _in_thread(lambda: start_turn(host, info, "t"))
    wait_for(
        lambda: pid_file.exists() and pid_file.read_text().strip().isdigit(), "the command to start"
    )
    with SQLiteStore(sqlite_store.path) as elsewhere:  # another handle, as `bubu stop` opens
        asked = elsewhere.request_stop(info.id)
    assert asked is not None
    assert asked.owner == host.owner
    thread.join(30)

    assert not thread.is_alive()
    assert result == ["stopped"]
    assert not process_alive(int(pid_file.read_text())), "the command's process group was killed"
    records = sqlite_store.read(info.id)
    assert turn_end(records).reason == "stopped"
    ((_, fc),) = calls(records)
    ((_, out),) = outcomes(records)[fc.call_id]
    assert out.is_error
    assert out.result.endswith("stopped by the user; the command and its processes were killed")
    assert len(provider.requests) == 1, "no model call after the stop"
