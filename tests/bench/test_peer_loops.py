"""Each peer's own agent loop row of `bench/peers.py` runs a few steps in its child process and
gives back a sane measurement: every step timed, every call and result reloaded, storage sampled,
the final answer reached. No timing is asserted: the figures only have to be there and be
positive."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from bench._peers.common import LOOPS, Measured

pytestmark = pytest.mark.peers

PEERS = Path(__file__).resolve().parents[2] / "bench" / "peers.py"
STEPS = 5


def child(system: str, workdir: Path, *, steps: int = STEPS, bound_s: float = 600.0) -> Measured:
    out = workdir / "out.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(PEERS),
            "--child",
            system,
            "--steps",
            str(steps),
            "--time-bound",
            str(bound_s),
            "--recovery-events",
            "",
            "--workdir",
            str(workdir),
            "--out",
            str(out),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    return msgspec.json.decode(out.read_bytes(), type=Measured)


def test_the_loop_rows_are_the_four_peers() -> None:
    assert LOOPS == ("openai-agents-loop", "google-adk-loop", "langgraph-loop", "pydantic-ai-loop")


@pytest.mark.parametrize("system", LOOPS)
def test_each_loop_runs_its_steps_and_reloads_them(system: str, tmp_path: Path) -> None:
    m = child(system, tmp_path)
    assert m.system == system
    assert (m.steps, m.steps_done, m.stopped) == (STEPS, STEPS, False)
    assert len(m.step_s) == STEPS
    assert all(s > 0 for s in m.step_s)
    # The peer gave back every tool call and tool result its loop made.
    assert m.reload_items == 2 * STEPS
    assert m.reload_s > 0
    # Storage was sampled after every step of so short a run, and it grew with the steps.
    assert [n for n, _ in m.storage] == list(range(1, STEPS + 1))
    sizes = [b for _, b in m.storage]
    assert sizes == sorted(sizes)
    assert m.final_bytes >= STEPS * 2000  # at least the results' bytes
    assert 0 < m.base_mb <= m.peak_mb
    assert m.config


def test_a_loop_stopped_by_the_time_bound_still_ends_with_its_answer(tmp_path: Path) -> None:
    # A zero bound: the loop stops after its first step and the model answers at once.
    m = child("pydantic-ai-loop", tmp_path, steps=1000, bound_s=0.0)
    assert (m.steps, m.steps_done, m.stopped) == (1000, 1, True)
    assert m.reload_items == 2
    assert m.storage[-1][0] == 1
