"""A submitted task's host sockets and SSH agent under a worker's ceiling, for real: a task that
asks to reach a socket is held by a default worker, and runs (reaching that socket, and no other)
once a person approves it or on a worker that allows that very socket."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu import clock
from bubu.cli.fleetcmds import worker_box
from bubu.engine.ceiling import Asked, Ceiling, excess
from bubu.engine.worker import check_open_turn
from bubu.errors import ConfigError
from bubu.events import Record, SystemNote, TaskHeld, TurnStarted, make
from bubu.log.postgres import PostgresStore, WorkQueue
from bubu.projections.status import fold_status
from bubu.tools.limits import Limits
from bubu.tools.sandbox import Options, turn_options
from tools.test_sandbox_sockets import connect, serve

from .proc import WorkerProc, bubu, bubu_ok, command, write_script


@pytest.fixture
def sockets() -> Iterator[tuple[str, str]]:
    base = tempfile.mkdtemp(prefix="bubu-fleet-sock-", dir="/var/tmp")
    try:
        for first in serve(os.path.join(base, "first.sock"), b"hello from first"):
            for second in serve(os.path.join(base, "second.sock"), b"hello from second"):
                yield first, second
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _submit(tmp_path: Path, url: str, name: str, model: str, *extra: str) -> tuple[str, Path]:
    ws = tmp_path / name
    ws.mkdir()
    out = bubu_ok(tmp_path, "submit", "go", "--db", url, "-w", str(ws), "-m", model, *extra)
    return out.strip(), ws


def _held(pg: PostgresStore, session: str) -> list[TaskHeld]:
    return [
        n
        for r in pg.read(session)
        if isinstance(c := r.event.content, SystemNote) and isinstance(n := c.note, TaskHeld)
    ]


@pytest.mark.heavy
@pytest.mark.postgres
def test_a_task_asking_for_a_socket_is_held_until_approved_or_allowed(
    tmp_path: Path, url: str, pg: PostgresStore, sockets: tuple[str, str]
) -> None:
    first, second = sockets
    line = f"{{ {connect(first)}; echo; {connect(second)}; }} > got.txt 2>&1"
    model = write_script(tmp_path / "m.jsonl", [command(line), {"text": "done"}])
    approved, approved_ws = _submit(tmp_path, url, "approved", model, "--allow-socket", first)
    agent, _ = _submit(tmp_path, url, "agent", model, "--ssh-agent")

    worker = WorkerProc(tmp_path, url, "--once")
    assert worker.wait() == 0
    for sid in (approved, agent):
        assert fold_status(pg.read(sid)).state == "held"
        assert WorkQueue(pg).state(sid) == "held"
    assert not (approved_ws / "got.txt").exists()
    ((reason,),) = [h.reasons for h in _held(pg, approved)]
    assert reason == (
        f"it asks to reach the host sockets {first}, which this worker does not allow "
        "(--allow-socket PATH)"
    )
    ((reason,),) = [h.reasons for h in _held(pg, agent)]
    assert "--ssh-agent" in reason
    assert "--allow-ssh-agent" in reason

    # Approved by a person: the task runs, reaching the socket it named and no other.
    bubu_ok(tmp_path, "--db", url, "approve-task", approved)
    assert WorkerProc(tmp_path, url, "--once", name="after").wait() == 0
    assert fold_status(pg.read(approved)).state == "completed"
    got = (approved_ws / "got.txt").read_text()
    assert "b'hello from first'" in got, got
    assert "hello from second" not in got, got
    (started,) = [
        n
        for r in pg.read(approved)
        if isinstance(c := r.event.content, SystemNote) and isinstance(n := c.note, TurnStarted)
    ]
    assert started.allow_sockets == [first]

    # A worker that allows another socket still holds it; one that allows that socket runs it.
    # (A held task waits for a person even then: a worker's wider ceiling is no approval.)
    other, _ = _submit(tmp_path, url, "other", model, "--allow-socket", first)
    assert WorkerProc(tmp_path, url, "--once", "--allow-socket", second, name="w2").wait() == 0
    assert fold_status(pg.read(other)).state == "held"
    allowed, allowed_ws = _submit(tmp_path, url, "allowed", model, "--allow-socket", first)
    worker = WorkerProc(tmp_path, url, "--once", "--allow-socket", first, name="w3")
    assert worker.wait() == 0
    assert f"--allow-socket {first}" in worker.lines()[0]
    assert fold_status(pg.read(allowed)).state == "completed"
    assert not _held(pg, allowed)
    got = (allowed_ws / "got.txt").read_text()
    assert "b'hello from first'" in got, got
    assert "hello from second" not in got, got


def test_an_open_turn_with_a_socket_is_not_continued_by_a_default_worker() -> None:
    ev = make(
        session="s",
        role="system",
        author="host",
        ts=clock.now_ms(),
        visibility="hidden",
        content=SystemNote(
            note=TurnStarted(
                model="scripted:x", sandbox="workspace-write", allow_sockets=["/run/x.sock"]
            )
        ),
    )
    opened = [Record(seq=2, hash="", event=ev)]
    with pytest.raises(ConfigError, match=r"/run/x\.sock"):
        check_open_turn(opened, Ceiling(), "s")
    check_open_turn(opened, Ceiling(allow_sockets=frozenset({"/run/x.sock"})), "s")


def test_submit_names_a_socket_by_its_absolute_path(tmp_path: Path) -> None:
    done = bubu(tmp_path, "submit", "go", "--db", "postgresql://x/y", "--allow-socket", "pg.sock")
    assert done.returncode == 2
    assert "absolute path on the worker's machine" in done.stderr


def test_sockets_and_the_agent_are_loosening_and_limits_are_clamped() -> None:
    careful = Ceiling()
    (reason,) = excess(careful, Asked(sandbox="workspace-write", allow_sockets=("/run/x.sock",)))
    assert "/run/x.sock" in reason
    (reason,) = excess(careful, Asked(sandbox="workspace-write", ssh_agent=True))
    assert "--allow-ssh-agent" in reason
    allowing = Ceiling(allow_sockets=frozenset({"/run/x.sock"}), allow_ssh_agent=True)
    asked = Asked(sandbox="workspace-write", allow_sockets=("/run/x.sock",), ssh_agent=True)
    assert excess(allowing, asked) == ()
    # Unconfined (held for its mode anyway), every socket is reachable: nothing more to say.
    assert len(excess(careful, Asked(sandbox="off", ssh_agent=True))) == 1
    # The worker's limits, defaults included, clamp a task's higher ones and keep its lower.
    box = worker_box({"max_procs": 500})
    task = Options(limits=Limits(procs=10_000, file_size=1 << 20))
    got = turn_options(task, box).limits
    assert got.proc_count() == 500
    assert got.file_bytes() == 1 << 20
    assert got.memory_bytes() == box.limits.memory_bytes()
    assert turn_options(Options(limits=Limits(memory=1 << 50)), box).limits.memory_bytes() == (
        box.limits.memory_bytes()
    )
