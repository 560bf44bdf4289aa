"""Several processes writing one PostgreSQL log: conflicts are exact, fencing holds, nothing is
lost."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu.events import Text
from bubu.log.postgres import PostgresStore
from pgserver import PG_URL

pytestmark = pytest.mark.postgres

APPENDER = Path(__file__).with_name("appender.py")


class Child:
    """One appender.py process, spoken to line by line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(APPENDER), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def answer(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the child exited with {self.proc.wait()}"
        return line.strip()

    def ask(self, command: str) -> str:
        self.send(command)
        return self.answer()

    def close(self) -> int:
        if self.proc.poll() is None:
            self.send("quit")
        code = self.proc.wait(timeout=60)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        return code


@pytest.fixture
def children(pg: PostgresStore) -> Iterator[list[Child]]:
    """Two lockstep appenders, `a` and `b`, on one new session of the test's schema."""
    sid = pg.create_session(title="shared", workspace="/w", session_id="ses_shared").id
    kids = [Child(PG_URL, pg.schema, name, "lockstep", sid) for name in ("a", "b")]
    try:
        yield kids
    finally:
        assert [k.close() for k in kids] == [0, 0]


def test_two_processes_on_one_head_exactly_one_wins_each_round(
    pg: PostgresStore, children: list[Child]
) -> None:
    rounds = 8
    for n in range(rounds):
        # Both read the same head before either appends, so every round is a real race.
        assert [c.ask("head") for c in children] == [str(n), str(n)]
        for c in children:
            c.send("append")
        assert sorted(c.answer() for c in children) == [f"conflict {n + 1}", f"ok {n + 1}"]
    records = pg.read("ses_shared")
    assert [r.seq for r in records] == list(range(1, rounds + 1))
    texts = [r.event.content.text for r in records if isinstance(r.event.content, Text)]
    assert len(set(texts)) == rounds
    assert pg.verify("ses_shared").ok
    assert pg.integrity_check() == "ok"


def test_a_process_whose_lease_was_stolen_cannot_append(
    pg: PostgresStore, children: list[Child]
) -> None:
    a, _ = children
    assert a.ask("lease") == "1"
    assert a.ask("head") == "0"
    assert a.ask("append") == "ok 1"
    stolen = pg.acquire_lease("ses_shared", "rescuer", 60, steal=True)
    assert stolen.epoch == 2
    assert a.ask("head") == "1"
    assert a.ask("append") == "lost"
    assert pg.head("ses_shared").high_water == 1
    assert pg.current_lease("ses_shared") == stolen


def test_threads_in_two_processes_lose_nothing_across_sessions(pg: PostgresStore) -> None:
    sessions = [pg.create_session(title=f"s{i}", workspace="/w").id for i in range(3)]
    threads, n = 4, 12
    kids = [
        Child(PG_URL, pg.schema, name, "race", ",".join(sessions), str(threads), str(n))
        for name in ("p", "q")
    ]
    reports = [json.loads(k.answer()) for k in kids]
    assert [k.close() for k in kids] == [0, 0]
    assert all(r["conflicts"] >= 0 for r in reports)
    expected = {f"{name}-{t}-{i}" for name in ("p", "q") for t in range(threads) for i in range(n)}
    seen: list[str] = []
    for sid in sessions:
        records = pg.read(sid)
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        assert pg.verify(sid).ok
        seen += [r.event.content.text for r in records if isinstance(r.event.content, Text)]
    assert sorted(seen) == sorted(expected)
    assert pg.integrity_check() == "ok"
