"""Random kills: a bounded number of runs of a richer task (parallel batches of every tool class)
killed at a failpoint picked by a seeded generator, each restarted and checked like a matrix cell.

`BUBU_CRASH_SEED` picks another seed (CI can vary it); the failing seed is in the test id.
"""

from __future__ import annotations

import os
import random

import pytest

from hypo import examples

from .harness import (
    ENGINE_FAILPOINTS,
    Baseline,
    Observation,
    Scenario,
    Tally,
    baseline,
    check,
    counted,
    run_all,
    tally,
)

SEED = int(os.environ.get("BUBU_CRASH_SEED", "20240607"))
KILLS = examples(10, quick=2)
"""Ten kills in the full suite; the quick one keeps two of the same draws."""

TASK = Scenario(
    name="mixed",
    files={"a.txt": "alpha\n", "b.txt": "beta\n"},
    lines=[
        {
            "text": "Looking around.",
            "tool_calls": [
                {"name": "list_files", "arguments": {}},
                {"name": "read_file", "arguments": {"path": "a.txt"}},
            ],
        },
        {
            "text": "Changing things.",
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "new.txt", "content": "new\n"}},
                {
                    "name": "edit_file",
                    "arguments": {"path": "a.txt", "old": "alpha", "new": "alpha beta"},
                },
                {"name": "run_command", "arguments": {"command": counted("c1")}},
            ],
        },
        {
            "text": "Checking.",
            "tool_calls": [
                {"name": "run_command", "arguments": {"command": counted("c2")}},
                {"name": "read_file", "arguments": {"path": "new.txt"}},
                {"name": "grep", "arguments": {"pattern": "beta"}},
            ],
        },
        {"text": "Done."},
    ],
)

HITS = {
    "before_model_call": 4,
    "mid_model_call": 4,
    "after_model_response": 4,
    "before_dispatch": 3,
    "after_dispatch": 3,
    "mid_tool": 3,
    "after_tool": 3,
    "after_outcome": 3,
    "before_turn_end": 1,
    "after_turn_end": 1,
}
"""How many times a run of TASK surely reaches each failpoint (4 model calls, 3 tool batches)."""


def _draws(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    points = sorted(HITS)
    return [f"{p}@{rng.randint(1, HITS[p])}" for p in (rng.choice(points) for _ in range(n))]


DRAWS = _draws(SEED, KILLS)


@pytest.fixture(scope="module")
def kills(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Observation], Baseline]:
    """Run every drawn kill and its restart."""
    root = tmp_path_factory.mktemp("random")
    base = baseline(root / "base", TASK)
    jobs = [(root / f"kill-{i}", TASK, point) for i, point in enumerate(DRAWS)]
    return run_all(jobs), base


def test_hits_cover_every_engine_failpoint() -> None:
    from bubu.failpoints import NAMES

    assert set(HITS) == set(ENGINE_FAILPOINTS)
    # mid_recovery has its own tests (test_restart); mid_compaction belongs to compaction;
    # mid_rewind to a rewind (tests/rewind).
    # mid_snapshot to a snapshot (test_snapshot_crash).
    assert set(ENGINE_FAILPOINTS) == NAMES - {
        "mid_recovery",
        "mid_compaction",
        "mid_rewind",
        "mid_snapshot",
    }


@pytest.mark.parametrize(
    "index", range(KILLS), ids=[f"seed{SEED}-{i}-{p}" for i, p in enumerate(DRAWS)]
)
@pytest.mark.heavy
def test_random_kill(kills: tuple[list[Observation], Baseline], index: int) -> None:
    observed, base = kills
    check(observed[index], base)


def test_random_kill_totals(
    kills: tuple[list[Observation], Baseline], capsys: pytest.CaptureFixture[str]
) -> None:
    observed, _ = kills
    total = Tally()
    for o in observed:
        total.add(tally(o))
    with capsys.disabled():
        print(
            f"\nrandom kills (seed {SEED}): {total.kills} kills, "
            f"{total.recovered} sessions recovered, "
            f"{total.side_effects_repeated} side effects repeated, {total.committed_events_lost} "
            f"committed events lost; decisions {total.decisions}"
        )
    assert total.kills == KILLS
    assert total.side_effects_repeated == 0
    assert total.committed_events_lost == 0
