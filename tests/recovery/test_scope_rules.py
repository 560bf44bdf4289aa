"""The rules start-up recovery goes by, one case each, with real processes for the runners: only a
runner that died on this host is continued by itself; a live pid is not dead, a reused pid is,
a zombie is; an imported, forked or legacy-forked session waits for the user."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu import clock
from bubu.engine.scope import (
    Found,
    classify,
    holder_gone,
    lease_is_stale,
    pid_alive,
    proc_start,
    scan,
)
from bubu.engine.session import new_session
from bubu.events import Actions, Event, RunStarted, SessionStarted, SystemNote, Text, TurnStarted
from bubu.events import make as make_event
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import SessionInfo
from bubu.projections.origin import fold_facts

HERE = socket.gethostname()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "bubu.db") as s:
        yield s


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    return tmp_path / "ws"


def _note(session: str, note: object, turn: str | None = "trn_1") -> Event:
    return make_event(
        session=session,
        turn=turn,
        role="system",
        author="system",
        ts=clock.now_ms(),
        content=SystemNote(note=note),  # type: ignore[arg-type]
        visibility="hidden",
    )


def _open_turn(
    store: SQLiteStore,
    info: SessionInfo,
    *,
    host: str = HERE,
    pid: int,
    started: str | None = None,
    model: str = "scripted:/dev/null",
) -> None:
    """An open turn whose last run was `pid` on `host`, its lease expired."""
    events = [
        make_event(
            session=info.id, turn="trn_1", role="user", author="user", ts=1, content=Text(text="go")
        ),
        _note(info.id, TurnStarted(model=model)),
        _note(info.id, RunStarted(cause="new", pid=pid, host=host, proc_start=started)),
    ]
    store.append(info.id, events, expect=store.head(info.id).high_water)
    lease = store.acquire_lease(info.id, f"{host}:{pid}:abcdef", 0.001)
    while store.now_ms() <= lease.expires_ms:  # expired, however fast the test runs
        time.sleep(0.001)


def _session(store: SQLiteStore, ws: Path) -> SessionInfo:
    return new_session(store, task="t", workspace=ws, model="scripted:/dev/null")


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_runner_that_died_here_is_continued(store: SQLiteStore, ws: Path) -> None:
    info = _session(store, ws)
    _open_turn(store, info, pid=_dead_pid())
    found = classify(store, info)
    assert (found.verdict, found.session.workspace) == ("recover", str(ws.resolve()))


def test_a_live_pid_is_not_dead_even_when_its_lease_expired(store: SQLiteStore, ws: Path) -> None:
    info = _session(store, ws)
    with subprocess.Popen(["sleep", "30"]) as live:
        try:
            _open_turn(store, info, pid=live.pid, started=proc_start(live.pid))
            assert classify(store, info).verdict == "running"
            assert scan(store) == []
        finally:
            live.kill()


def test_a_reused_pid_is_not_the_runner(store: SQLiteStore, ws: Path) -> None:
    info = _session(store, ws)
    with subprocess.Popen(["sleep", "30"]) as other:
        try:
            start = proc_start(other.pid)
            assert start is not None
            assert pid_alive(other.pid, start)
            boot, _, ticks = start.rpartition(":")
            earlier = f"{boot}:{int(ticks) - 1}"  # the same pid, an earlier process
            assert not pid_alive(other.pid, earlier)
            _open_turn(store, info, pid=other.pid, started=earlier)
            assert classify(store, info).verdict == "recover"
        finally:
            other.kill()


def test_a_zombie_is_dead(store: SQLiteStore, ws: Path) -> None:
    info = _session(store, ws)
    child = subprocess.Popen(["sleep", "30"])
    child.kill()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, and not reaped
    try:
        os.kill(child.pid, 0)  # the pid still answers signal 0
        _open_turn(store, info, pid=child.pid)
        assert classify(store, info).verdict == "recover"
    finally:
        child.wait()


def test_a_session_of_another_host_is_left_to_it(store: SQLiteStore, ws: Path) -> None:
    info = _session(store, ws)
    _open_turn(store, info, host="another-machine.example", pid=_dead_pid())
    found = classify(store, info)
    assert found.verdict == "elsewhere"
    assert "another-machine.example" in found.reason
    assert scan(store) == []


@pytest.mark.parametrize("origin", ["import", "fork"])
def test_an_imported_or_forked_session_waits_for_the_user(
    store: SQLiteStore, ws: Path, origin: str
) -> None:
    info = _session(store, ws)
    _open_turn(store, info, pid=_dead_pid())
    mark = SessionStarted(workspace=str(ws), title="t", origin=origin, source="ses_src")  # type: ignore[arg-type]
    store.append(info.id, [_note(info.id, mark, turn=None)], expect=store.head(info.id).high_water)
    # A later note that claims to be new changes nothing: the origin is sticky.
    again = SessionStarted(workspace=str(ws), title="t")
    store.append(info.id, [_note(info.id, again, turn=None)], expect=store.head(info.id).high_water)
    (found,) = scan(store)
    assert found.verdict == "adopted"
    assert found.reason == ("imported" if origin == "import" else "forked from ses_src")


def test_the_chain_not_the_header_says_where_a_session_acts(store: SQLiteStore, ws: Path) -> None:
    info = store.create_session(title="t", workspace="/somewhere/else", events=[])
    facts = SessionStarted(workspace=str(ws), title="t")
    store.append(info.id, [_note(info.id, facts, turn=None)], expect=0)
    _open_turn(store, store.session(info.id), pid=_dead_pid())
    found = classify(store, store.session(info.id))
    assert (found.verdict, found.session.workspace) == ("recover", str(ws))


def test_a_legacy_session_trusts_its_header_and_a_legacy_fork_is_a_fork(
    store: SQLiteStore, ws: Path
) -> None:
    plain = store.create_session(title="old", workspace=str(ws), model="scripted:/dev/null")
    _open_turn(store, store.session(plain.id), pid=_dead_pid())
    assert classify(store, store.session(plain.id)).verdict == "recover"
    fork = store.create_session(title="old fork", workspace=str(ws))
    first = make_event(
        session=fork.id,
        role="user",
        author="user",
        ts=1,
        content=Text(text="x"),
        actions=Actions(state_delta={"fork": {"session": "ses_src", "seq": 3}}),
    )
    store.append(fork.id, [first], expect=0)
    _open_turn(store, store.session(fork.id), pid=_dead_pid())
    found = classify(store, store.session(fork.id))
    assert (found.verdict, found.reason) == ("adopted", "forked from ses_src")
    facts = fold_facts([], workspace="/h", title="h", model=None)
    assert (facts.chained, facts.origin, facts.workspace) == (False, "new", "/h")


def test_a_turn_whose_server_was_not_recorded_is_not_guessed(store: SQLiteStore, ws: Path) -> None:
    info = _session(store, ws)
    _open_turn(store, info, pid=_dead_pid(), model="openai:gpt-local")
    (found,) = scan(store)
    assert found.verdict == "no_server"


def test_a_missing_workspace_is_said_not_guessed(store: SQLiteStore, ws: Path) -> None:
    info = _session(store, ws)
    _open_turn(store, info, pid=_dead_pid())
    ws.rmdir()
    (found,) = scan(store)
    assert isinstance(found, Found)
    assert found.verdict == "no_workspace"


def test_a_live_lease_of_a_reused_pid_is_held_by_nobody(store: SQLiteStore, ws: Path) -> None:
    info = _session(store, ws)
    with subprocess.Popen(["sleep", "30"]) as other:
        try:
            start = proc_start(other.pid)
            assert start is not None
            boot, _, ticks = start.rpartition(":")
            owner = f"{HERE}:{other.pid}:abcdef"
            run = RunStarted(
                cause="new",
                pid=other.pid,
                host=HERE,
                owner=owner,
                proc_start=f"{boot}:{int(ticks) - 1}",
            )
            store.append(info.id, [_note(info.id, run)], expect=0)
            lease = store.acquire_lease(info.id, owner, 30)
            # Not expired, and its pid answers: but that pid is a later process than the run's.
            assert not lease_is_stale(lease, store.now_ms())
            assert holder_gone(store, info.id, lease)
            same = RunStarted(cause="new", pid=other.pid, host=HERE, owner=owner, proc_start=start)
            store.append(info.id, [_note(info.id, same)], expect=1)
            assert not holder_gone(store, info.id, lease)
        finally:
            other.kill()
