"""The crash matrix: every failpoint a normal turn reaches × each tool class, with a real SIGKILL
and a restart in a new process (see `harness` for what is checked).

The cells run several at a time in a module fixture (each has its own database and workspace);
one test per cell reports its result. `test_matrix_totals` prints the issue's closing counts.
"""

from __future__ import annotations

import pytest

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

FILES = {"a.txt": "alpha\n"}
"""The workspace every cell starts from."""


def _one_call(name: str, call: dict[str, object]) -> Scenario:
    return Scenario(
        name=name,
        lines=[{"text": f"using {name}", "tool_calls": [call]}, {"text": "done"}],
        files=FILES,
    )


TOOLS: dict[str, Scenario] = {
    "read_only": _one_call("read_file", {"name": "read_file", "arguments": {"path": "a.txt"}}),
    "write_file": _one_call(
        "write_file",
        {"name": "write_file", "arguments": {"path": "new.txt", "content": "written\n"}},
    ),
    # Applied twice, this edit would leave "alpha beta beta": exactly once is visible in the file.
    "edit_file": _one_call(
        "edit_file",
        {"name": "edit_file", "arguments": {"path": "a.txt", "old": "alpha", "new": "alpha beta"}},
    ),
    "side_effecting": _one_call(
        "run_command", {"name": "run_command", "arguments": {"command": counted("c1")}}
    ),
}

MODEL_POINTS = ("before_model_call", "mid_model_call", "after_model_response")
"""Reached once per model call: @1 is the call that asks for the tool, @2 the one after its
result."""

POINTS: tuple[str, ...] = tuple(
    f"{name}@{n}" for name in ENGINE_FAILPOINTS for n in ((1, 2) if name in MODEL_POINTS else (1,))
)

CELLS = [(tool, point) for tool in TOOLS for point in POINTS]

# 52 cells of three processes each: ~25 s on two idle cores, over a minute on a shared machine,
# which is more than the default suite can spend; CI runs the slow marker too.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def matrix(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[tuple[str, str], tuple[Observation, Baseline]]:
    """Crash and recover every cell; keep what was observed for the per-cell tests."""
    root = tmp_path_factory.mktemp("matrix")
    bases = {tool: baseline(root / f"base-{tool}", s) for tool, s in TOOLS.items()}
    jobs = [
        (root / f"{tool}-{point.replace('@', '-')}", TOOLS[tool], point) for tool, point in CELLS
    ]
    observed = run_all(jobs)
    return {cell: (o, bases[cell[0]]) for cell, o in zip(CELLS, observed, strict=True)}


def test_every_engine_failpoint_is_in_the_matrix() -> None:
    assert {p.partition("@")[0] for p in POINTS} == set(ENGINE_FAILPOINTS)


@pytest.mark.parametrize(("tool", "point"), CELLS, ids=[f"{t}-{p}" for t, p in CELLS])
def test_crash_and_restart(
    matrix: dict[tuple[str, str], tuple[Observation, Baseline]], tool: str, point: str
) -> None:
    observation, base = matrix[(tool, point)]
    check(observation, base)


def test_the_matrix_exercises_every_recovery_decision(
    matrix: dict[tuple[str, str], tuple[Observation, Baseline]],
) -> None:
    total = Tally()
    for o, _ in matrix.values():
        total.add(tally(o))
    assert set(total.decisions) == {"rerun", "applied", "rerun_not_applied", "interrupted"}


def test_matrix_totals(
    matrix: dict[tuple[str, str], tuple[Observation, Baseline]], capsys: pytest.CaptureFixture[str]
) -> None:
    total = Tally()
    for o, _ in matrix.values():
        total.add(tally(o))
    with capsys.disabled():
        print(
            f"\ncrash matrix: {total.runs} runs, {total.kills} kills, "
            f"{total.recovered} sessions recovered, "
            f"{total.nothing_to_do} with nothing to recover, "
            f"{total.side_effects_repeated} side effects repeated, "
            f"{total.committed_events_lost} committed events lost; "
            f"decisions {total.decisions}"
        )
    assert total.kills == total.runs == len(CELLS)
    assert total.side_effects_repeated == 0
    assert total.committed_events_lost == 0
