"""The sandbox's sockets, SSH agent and limits are recorded with the turn: a recovered or resumed
turn's real sandboxed commands reach the sockets it was started with and no others, whatever the
command that continues it says; that command may only lower a limit."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu.events import FunctionResponse, SystemNote, TurnStarted
from bubu.log.sqlite import SQLiteStore
from bubu.tools.limits import DEFAULT_PROCS, Limits
from bubu.tools.sandbox import Options, turn_options
from engine.cli import bubu, only_session
from engine.helpers import call, write_script
from tools.test_sandbox_sockets import connect, serve


@pytest.fixture
def two_sockets() -> Iterator[tuple[str, str]]:
    """Two socket servers outside the workspace and outside /tmp: one the turn allows, one only
    the continuing command names."""
    base = tempfile.mkdtemp(prefix="bubu-rec-", dir="/var/tmp")
    try:
        for first in serve(os.path.join(base, "first.sock"), b"hello from first"):
            for second in serve(os.path.join(base, "second.sock"), b"hello from second"):
                yield first, second
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _project(tmp_path: Path, *commands: str) -> tuple[Path, Path, str]:
    ws = tmp_path / "ws"
    ws.mkdir()
    lines = [{"tool_calls": [call("run_command", command=c)]} for c in commands]
    script = write_script(tmp_path / "s.jsonl", [*lines, {"text": "done"}])
    return tmp_path / "bubu.db", ws, f"scripted:{script}"


def _results(db: Path) -> list[str]:
    with SQLiteStore(db) as store:
        return [
            c.result
            for r in store.read(only_session(db))
            if isinstance(c := r.event.content, FunctionResponse)
        ]


def _turns(db: Path) -> list[TurnStarted]:
    with SQLiteStore(db) as store:
        return [
            c.note
            for r in store.read(only_session(db))
            if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
        ]


def _both(first: str, second: str) -> str:
    return f"{connect(first)}; echo; {connect(second)}"


@pytest.mark.heavy
def test_a_recovered_turn_reaches_its_recorded_socket_and_no_other(
    tmp_path: Path, two_sockets: tuple[str, str]
) -> None:
    first, second = two_sockets
    write = "; echo; (head -c 3M /dev/zero > big); echo size=$(wc -c < big)"
    db, ws, model = _project(tmp_path, _both(first, second) + write)
    crashed = bubu(
        db,
        "run",
        "t",
        "-w",
        str(ws),
        "-m",
        model,
        "--allow-socket",
        first,
        "--max-procs",
        "200",
        "--max-file-size",
        "1M",
        failpoint="before_dispatch",
    )
    assert crashed.returncode == -9, crashed.stderr
    # Recovered by a command that names the other socket and higher limits: none applies.
    done = bubu(
        db,
        "recover",
        only_session(db),
        "--allow-socket",
        second,
        "--max-procs",
        "4000",
        "--max-file-size",
        "8M",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = _results(db)
    assert "size=1048576" in result, result  # the recorded file-size limit still binds
    assert "b'hello from first'" in result, result
    assert "hello from second" not in result, result
    assert "ConnectionRefusedError" in result, result
    (turn,) = _turns(db)
    assert turn.allow_sockets == [first]
    assert turn.max_procs == 200


@pytest.mark.slow
def test_a_resumed_turn_keeps_its_recorded_socket(
    tmp_path: Path, two_sockets: tuple[str, str]
) -> None:
    first, second = two_sockets
    db, ws, model = _project(tmp_path, "true", _both(first, second))
    started = bubu(
        db, "run", "t", "-w", str(ws), "-m", model, "--allow-socket", first, "--max-steps", "1"
    )
    assert started.returncode == 3, started.stderr  # stopped at the step limit
    resumed = bubu(
        db,
        "resume",
        only_session(db),
        "--allow-socket",
        second,
        "--max-procs",
        "300",
        "--max-steps",
        "5",
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    _, result = _results(db)
    assert "b'hello from first'" in result, result
    assert "hello from second" not in result, result
    # The resumed turn records what it ran with: the first socket only, the lower limit.
    assert [(t.allow_sockets, t.max_procs) for t in _turns(db)] == [([first], None), ([first], 300)]


def test_a_continuing_command_may_only_lower_a_limit() -> None:
    recorded = Options(allow_sockets=("/a",), limits=Limits(procs=200, memory=1 << 30))
    given = Options(
        allow_sockets=("/b",), ssh_agent=True, limits=Limits(procs=4000, memory=1 << 20)
    )
    got = turn_options(recorded, given)
    assert got.allow_sockets == ("/a",)
    assert not got.ssh_agent
    assert got.limits == Limits(procs=200, memory=1 << 20)
    # A default recorded limit is the default, not "no limit": a higher given one is ignored.
    assert turn_options(Options(), Options(limits=Limits(procs=99_999))).limits.procs == 0
    assert turn_options(Options(), Options(limits=Limits(procs=10))).limits.procs == 10
    assert Limits().proc_count() == DEFAULT_PROCS
    # Nothing recorded (an older Bubu, an imported log): the given options apply.
    assert turn_options(None, given) == given
