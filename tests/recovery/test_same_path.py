"""Calls of one response on the same file run in the model's order, each dispatched with the
hashes of the file as the call before it left it; a SIGKILL between them recovers correctly.

Every scenario runs as a real `bubu run` with the scripted model; the crash cells kill it at a
failpoint between two writes of one file and restart it with `bubu recover` (see `harness`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest

from bubu.events import FunctionCall, FunctionResponse, Record, ToolDispatch

from .harness import Scenario, baseline, check, crash_and_recover, lay_out, read_log, run_all
from .proc import bubu

THREE_EDITS = Scenario(
    name="three edits",
    lines=[
        {
            "tool_calls": [
                {"name": "edit_file", "arguments": {"path": "a.txt", "old": "one", "new": "ONE"}},
                {"name": "edit_file", "arguments": {"path": "a.txt", "old": "two", "new": "TWO"}},
                {"name": "edit_file", "arguments": {"path": "a.txt", "old": "3", "new": "THREE"}},
            ]
        },
        {"text": "done"},
    ],
    files={"a.txt": "one\ntwo\n3\n"},
)

WRITE_THEN_EDIT = Scenario(
    name="write then edit",
    lines=[
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "n/new.txt", "content": "draft\n"}},
                # Only the written file holds "draft": the edit must see the write's result.
                {"name": "edit_file", "arguments": {"path": "n/new.txt", "old": "dr", "new": "cr"}},
                {"name": "read_file", "arguments": {"path": "n/new.txt"}},
            ]
        },
        {"text": "done"},
    ],
    files={},
)


def _chain(records: Sequence[Record]) -> list[tuple[int, ToolDispatch, int]]:
    """Each write's dispatch with its seq and the seq of its outcome, in dispatch order."""
    outcome = {
        c.call_id: r.seq for r in records if isinstance(c := r.event.content, FunctionResponse)
    }
    return [
        (r.seq, d, outcome[d.call_id])
        for r in records
        if r.event.actions is not None
        and (d := r.event.actions.tool_dispatch) is not None
        and d.effect == "provable_write"
    ]


def _assert_chained(records: Sequence[Record]) -> None:
    calls = [c.call_id for r in records if isinstance(c := r.event.content, FunctionCall)]
    chain = _chain(records)
    writes = [d.call_id for _, d, _ in chain]
    assert writes == [c for c in calls if c in writes], "writes ran out of the model's order"
    for (_, first, done), (seq, second, _) in itertools.pairwise(chain):
        assert second.before_sha256 == first.after_sha256, "the hashes do not chain"
        assert seq > done, "a write of the file was dispatched before the one before it ended"


def test_three_edits_of_one_file_are_all_applied_in_order(tmp_path: Path) -> None:
    p = lay_out(tmp_path, THREE_EDITS)
    done = bubu(p.db, *p.run_args(THREE_EDITS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (p.ws / "a.txt").read_text() == "ONE\nTWO\nTHREE\n"
    records = read_log(p.db)
    results = [c for r in records if isinstance(c := r.event.content, FunctionResponse)]
    assert [(r.result, r.is_error) for r in results] == [
        ("edited a.txt (10 bytes, 3 lines).", False),
        ("edited a.txt (10 bytes, 3 lines).", False),
        ("edited a.txt (14 bytes, 3 lines).", False),
    ]
    _assert_chained(records)
    assert len(_chain(records)) == 3


def test_a_write_then_an_edit_then_a_read_of_one_file_run_in_order(tmp_path: Path) -> None:
    p = lay_out(tmp_path, WRITE_THEN_EDIT)
    done = bubu(p.db, *p.run_args(WRITE_THEN_EDIT))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (p.ws / "n" / "new.txt").read_text() == "craft\n"
    records = read_log(p.db)
    results = [c for r in records if isinstance(c := r.event.content, FunctionResponse)]
    assert [r.is_error for r in results] == [False, False, False]
    assert results[-1].result.split() == ["1", "craft"]  # the read saw both writes
    chain = _chain(records)
    assert chain[0][1].before_sha256 is None
    _assert_chained(records)


# A kill between two writes of the file: the first done and the next not dispatched
# (after_outcome@1), the second dispatched and not run (after_dispatch@2), the second run and its
# outcome lost (after_tool@2).
CELLS = [
    (THREE_EDITS, "after_outcome@1"),
    (THREE_EDITS, "after_dispatch@2"),
    (WRITE_THEN_EDIT, "after_tool@2"),
]
SLOW_CELLS = [
    (THREE_EDITS, "mid_tool@1"),
    (THREE_EDITS, "before_dispatch@2"),
    (THREE_EDITS, "after_tool@2"),
    (THREE_EDITS, "after_outcome@2"),
    (THREE_EDITS, "after_dispatch@3"),
    (WRITE_THEN_EDIT, "after_outcome@1"),
    (WRITE_THEN_EDIT, "after_dispatch@2"),
]


def _crash_cells(tmp_path: Path, cells: Sequence[tuple[Scenario, str]]) -> None:
    bases = {
        s.name: baseline(tmp_path / f"base-{i}", s)
        for i, s in enumerate({s.name: s for s, _ in cells}.values())
    }
    jobs = [(tmp_path / f"cell-{i}", s, point) for i, (s, point) in enumerate(cells)]
    for (scenario, _), o in zip(cells, run_all(jobs, workers=3), strict=True):
        check(o, bases[scenario.name])
        _assert_chained(o.after)
        assert len({d.call_id for _, d, _ in _chain(o.after)}) == len(_chain(o.after))


@pytest.mark.slow
def test_a_kill_between_two_writes_of_one_file_recovers_them_all(tmp_path: Path) -> None:
    _crash_cells(tmp_path, CELLS)


@pytest.mark.slow
def test_every_kill_point_between_writes_of_one_file_recovers(tmp_path: Path) -> None:
    _crash_cells(tmp_path, SLOW_CELLS)


def test_the_recovered_second_edit_was_proven_not_applied(tmp_path: Path) -> None:
    o = crash_and_recover(tmp_path / "cell", THREE_EDITS, "after_dispatch@2")
    decisions = [
        r.event.actions.tool_recovery.decision
        for r in o.after
        if r.event.actions is not None and r.event.actions.tool_recovery is not None
    ]
    assert decisions == ["rerun_not_applied"]
    assert (o.files["a.txt"]) == b"ONE\nTWO\nTHREE\n"


def test_recovery_never_follows_a_directory_swapped_for_a_symlink_out(tmp_path: Path) -> None:
    scenario = Scenario(
        name="write in a directory",
        lines=[
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "d/a.txt", "content": "x"}}
                ]
            },
            {"text": "done"},
        ],
        files={},
    )
    p = lay_out(tmp_path, scenario)
    (p.ws / "d").mkdir()
    (p.ws / "d" / "a.txt").write_text("old\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.txt").write_text("old\n")  # the very content the dispatch recorded as before
    (outside / ".a.txt.abcd1234.tmp").write_text("not Bubu's")
    run = bubu(p.db, *p.run_args(scenario), failpoint="after_dispatch")
    assert run.returncode == -9
    (p.ws / "d" / "a.txt").unlink()
    (p.ws / "d").rmdir()
    (p.ws / "d").symlink_to(outside)  # while Bubu is dead
    rec = bubu(p.db, "recover", "--json")
    assert rec.returncode == 0, rec.stdout + rec.stderr
    decisions = [
        r.event.actions.tool_recovery.decision
        for r in read_log(p.db)
        if r.event.actions is not None and r.event.actions.tool_recovery is not None
    ]
    assert decisions == ["interrupted"]
    assert sorted(x.name for x in outside.iterdir()) == [".a.txt.abcd1234.tmp", "a.txt"]
    assert (outside / "a.txt").read_text() == "old\n"
