"""Real crashes: a child appends durably in a loop and is killed with SIGKILL at random moments.

After every kill the file must pass SQLite's integrity check, the chain must verify, and every
commit the child acknowledged must be there with the digest it was acknowledged with.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from bubu.log.sqlite import SQLiteStore

CHILD = Path(__file__).with_name("crash_child.py")
KILLS = 8


def _run_and_kill(db: Path, session: str, seed: int, rng: random.Random) -> list[tuple[int, str]]:
    """Start a child, let it acknowledge a random number of commits, SIGKILL it mid-flight."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(db), session, str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    assert child.stderr is not None
    acks: list[tuple[int, str]] = []
    try:
        wanted = rng.randint(1, 25)
        while len(acks) < wanted:
            line = child.stdout.readline()
            assert line, f"the child died on its own: {child.stderr.read().decode()}"
            hw, digest = line.split()
            acks.append((int(hw), digest.decode()))
        # Land the kill anywhere: between commits, mid-transaction or mid-fsync.
        time.sleep(rng.uniform(0, 0.02))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    acks.extend((int(hw), digest.decode()) for hw, digest in (ln.split() for ln in child.stdout))
    child.stdout.close()
    child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    return acks


@pytest.mark.heavy
def test_every_acknowledged_commit_survives_sigkill(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    with closing(SQLiteStore(db)) as store:
        session = store.create_session(title="crash", workspace=str(tmp_path)).id
    rng = random.Random(20_240_611)
    acknowledged: dict[int, str] = {}
    for kill in range(KILLS):
        acks = _run_and_kill(db, session, seed=kill, rng=rng)
        assert acks, "the child acknowledged nothing"
        for hw, digest in acks:
            acknowledged[hw] = digest
        last = max(acknowledged)
        with closing(SQLiteStore(db)) as store:
            assert store.integrity_check() == "ok"
            report = store.verify(session)
            assert report.ok, f"after kill {kill}: {report.problem}"
            head = store.head(session)
            assert head.high_water >= last, f"after kill {kill}: lost acknowledged seq {last}"
            hashes = {r.seq: r.hash for r in store.read(session)}
        for hw, digest in acknowledged.items():
            assert hashes[hw] == digest, f"after kill {kill}: seq {hw} changed"
