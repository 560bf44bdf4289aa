"""One runner per session: racing recoverers, a session running elsewhere, and the lease a
recoverer takes over only when its holder is really gone."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bubu.engine.driver import RunConfig
from bubu.engine.permissions import Policy
from bubu.engine.recovery import recover_session
from bubu.engine.session import Host
from bubu.events import FunctionResponse, Record, RecoveryNotice, RunStarted, SystemNote
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Lease
from bubu.providers.scripted import ScriptedProvider
from bubu.tools import builtin_tools

from .harness import Scenario, counted, counter_lines, last_json_document, lay_out, read_log
from .proc import bubu, bubu_cmd, bubu_env, only_session

TASK = Scenario(
    name="race",
    files={"a.txt": "alpha\n"},
    lines=[
        {
            "tool_calls": [
                {"name": "read_file", "arguments": {"path": "a.txt"}},
                {"name": "run_command", "arguments": {"command": counted("c1")}},
            ]
        },
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
        {"text": "done"},
    ],
)


def _live_owner() -> str:
    """An owner string naming this (live) test process, as a runner elsewhere would."""
    return f"{socket.gethostname()}:{os.getpid()}:tester"


def _notes(records: list[Record], kind: type) -> list[object]:
    return [
        n
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(n := c.note, kind)
    ]


def _crashed(root: Path) -> tuple[Path, str]:
    p = lay_out(root, TASK)
    assert bubu(p.db, *p.run_args(TASK), failpoint="mid_tool").returncode == -9
    return p.db, only_session(p.db)


LEASE_CAS = (
    "recover_session checks that the lease is stale, then steals it unconditionally: two "
    "recoverers that both saw it stale both take it, the first is fenced mid-recovery (exit 1) and "
    "the second can then see its recovery fact without an outcome and block the session as a crash "
    "loop"
)


# Not strict: whether the two processes meet in the window depends on timing (often, under load).
@pytest.mark.parametrize("trial", [0, *(pytest.param(n, marks=pytest.mark.slow) for n in (1, 2))])
def test_racing_recoverers_recover_once(tmp_path: Path, trial: int) -> None:
    db, session = _crashed(tmp_path)
    procs = [
        subprocess.Popen(
            bubu_cmd(db, "recover", "--json"),
            env=bubu_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        results.append((proc.returncode, out, err))

    summaries = []
    for code, out, err in results:
        assert code in (0, 5), f"a recoverer failed ({code}): {err}"
        summaries.append(last_json_document(out))
    winners = [s for s in summaries if s and s[0]["outcome"] == "completed"]
    assert len(winners) == 1, summaries
    (loser,) = [s for s in summaries if s is not winners[0]]
    assert loser == [] or loser[0]["outcome"] in ("busy", "nothing"), loser

    records = read_log(db)
    assert len({r.event.id for r in records}) == len(records)
    recoveries = [
        n
        for n in _notes(records, RunStarted)
        if isinstance(n, RunStarted) and n.cause == "recovery"
    ]
    assert len(recoveries) == 1
    assert len(_notes(records, RecoveryNotice)) == 1
    answered = [c.call_id for r in records if isinstance(c := r.event.content, FunctionResponse)]
    assert len(answered) == len(set(answered))
    assert counter_lines(tmp_path / "counter.txt").count("c1") <= 1
    assert bubu(db, "verify").returncode == 0
    _ = session


@pytest.mark.heavy
def test_a_second_run_on_a_running_session_is_refused(tmp_path: Path) -> None:
    p = lay_out(tmp_path, TASK)
    assert bubu(p.db, *p.run_args(TASK)).returncode == 0
    session = only_session(p.db)
    before = read_log(p.db)
    with SQLiteStore(p.db) as store:
        lease = store.acquire_lease(session, _live_owner(), 60)
        try:
            again = bubu(p.db, "run", "more", "--session", session, "-m", f"scripted:{p.script}")
        finally:
            store.release_lease(lease)
    assert again.returncode != 0
    assert "is being run by" in again.stderr
    assert session in again.stderr
    assert "Traceback" not in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1, "one sentence, not a dump"
    assert [r.hash for r in read_log(p.db)] == [r.hash for r in before]


@pytest.mark.heavy
def test_recovery_leaves_a_session_whose_runner_is_alive(tmp_path: Path) -> None:
    db, session = _crashed(tmp_path)
    with SQLiteStore(db) as store:
        lease = store.acquire_lease(session, _live_owner(), 60, steal=True)
        before = read_log(db)
        held = bubu(db, "recover", "--json", session)
        assert held.returncode == 0
        assert last_json_document(held.stdout) == [
            {"outcome": "nothing", "session": session, "status": "open"}
        ]
        assert [r.hash for r in read_log(db)] == [r.hash for r in before]
        store.release_lease(lease)
    freed = bubu(db, "recover", "--json")
    assert freed.returncode == 0
    (result,) = last_json_document(freed.stdout)
    assert result["outcome"] == "completed"


class _Interleaved(SQLiteStore):
    """A store on which `competitor` runs just before this process's next lease acquisition,
    i.e. after it judged the lease free: the window two racing recoverers share."""

    def __init__(self, path: Path, competitor: Callable[[], None]) -> None:
        super().__init__(path)
        self.competitor: Callable[[], None] | None = competitor

    def acquire_lease(self, *args: Any, **kwargs: Any) -> Lease:
        """Let the competitor in first, once."""
        if self.competitor is not None:
            go, self.competitor = self.competitor, None
            go()
        return super().acquire_lease(*args, **kwargs)


def test_a_lease_taken_after_the_staleness_check_is_not_stolen(tmp_path: Path) -> None:
    db, session = _crashed(tmp_path)
    other = SQLiteStore(db)
    taken: list[Lease] = []

    def competitor() -> None:
        # The other recoverer also saw the dead runner's lease and took it over first.
        taken.append(other.acquire_lease(session, _live_owner(), 60, steal=True))

    store = _Interleaved(db, competitor)
    try:
        info = store.session(session)
        host = Host(
            store=store,
            provider=ScriptedProvider(info.model.partition(":")[2] if info.model else ""),
            tools=builtin_tools(),
            policy=Policy(allow_commands=("echo *",)),
            config=RunConfig(backoff_s=0.001),
        )
        result = recover_session(host, info)
        assert taken, "the competitor ran"
        assert result.outcome == "busy", "the lease of a live recoverer must not be stolen"
    finally:
        store.close()
        other.close()
