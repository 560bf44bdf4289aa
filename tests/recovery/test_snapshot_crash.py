"""A crash in the middle of a workspace snapshot (the `mid_snapshot` failpoint, a real SIGKILL):
no event names a tree or object the store lacks, `bubu verify` passes, and recovery finishes the
turn with the same workspace as an uncrashed run."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.log.sqlite import SQLiteStore
from bubu.snapshot import refs

from .harness import Scenario, baseline, check, counted, crash_and_recover

FILES = {"a.txt": "alpha\n", "b.txt": "beta\n"}

SCENARIOS = {
    "command": Scenario(
        name="run_command",
        lines=[
            {"tool_calls": [{"name": "run_command", "arguments": {"command": counted("c1")}}]},
            {"text": "done"},
        ],
        files=FILES,
    ),
    "write": Scenario(
        name="write_file",
        lines=[
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "n.txt", "content": "n\n"}}
                ]
            },
            {"text": "done"},
        ],
        files=FILES,
    ),
}

# @1: the snapshot before the turn's first changing call; @2: the one after it.
CELLS = [(s, p) for s in SCENARIOS for p in ("mid_snapshot@1", "mid_snapshot@2")]


@pytest.mark.heavy
@pytest.mark.parametrize(("scenario", "point"), CELLS, ids=[f"{s}-{p}" for s, p in CELLS])
def test_a_kill_mid_snapshot_leaves_no_reference_to_a_missing_object(
    tmp_path: Path, scenario: str, point: str
) -> None:
    s = SCENARIOS[scenario]
    base = baseline(tmp_path / "base", s)
    o = crash_and_recover(tmp_path / "crash", s, point)
    check(o, base)
    assert refs.roots(o.after), "the recovered turn records snapshots"
    with SQLiteStore(tmp_path / "crash" / "bubu.db") as store:
        (info,) = store.sessions()
        missing = [
            sha
            for sha, data in refs.objects_of(store.get_object, refs.roots(o.after))
            if data is None
        ]
        assert missing == []
        assert store.verify(info.id).ok
