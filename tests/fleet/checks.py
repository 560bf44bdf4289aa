"""What every session a fleet ran must satisfy, read from its log alone."""

from __future__ import annotations

from dataclasses import dataclass

from bubu.events import FunctionCall, FunctionResponse, Record, RunStarted, SystemNote
from bubu.log.store import Store
from bubu.projections.recovery import INTERRUPTED


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One run of a session: its id, why it started, and the lease that fenced it."""

    run: str
    cause: str
    epoch: int
    owner: str
    pid: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Checked:
    """A session that passed `check_log`: its records and its runs in order."""

    records: list[Record]
    runs: list[Run]

    def commands(self) -> dict[str, tuple[str, str | None]]:
        """Each run_command call: (command, 'ok' | 'error' | 'interrupted' | None if no outcome)."""
        calls: dict[str, str] = {}
        outcome: dict[str, str] = {}
        for r in self.records:
            c = r.event.content
            if isinstance(c, FunctionCall) and c.name == "run_command":
                calls[c.call_id] = str(c.arguments["command"])
            elif isinstance(c, FunctionResponse) and c.call_id in calls:
                outcome[c.call_id] = (
                    "interrupted"
                    if c.result.startswith(INTERRUPTED)
                    else "error"
                    if c.is_error
                    else "ok"
                )
        return {cid: (cmd, outcome.get(cid)) for cid, cmd in calls.items()}


def _run_start(r: Record) -> Run | None:
    c = r.event.content
    if not (isinstance(c, SystemNote) and isinstance(c.note, RunStarted)):
        return None
    n = c.note
    assert n.epoch is not None, f"the run start at seq {r.seq} records no lease"
    assert n.owner is not None
    assert r.event.run is not None
    return Run(run=r.event.run, cause=n.cause, epoch=n.epoch, owner=n.owner, pid=n.pid)


def check_log(store: Store, session: str) -> Checked:
    """The log verifies, its seqs are gapless, and its runs never overlapped.

    Runs never overlapped when each run's events form one block (a run's opening events and its
    run start are appended together, so a block holds exactly one run start) and the lease epochs
    stamped on the run starts increase from block to block.
    """
    report = store.verify(session)
    assert report.ok, report.problem
    records = store.read(session)
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    assert report.high_water == len(records)
    blocks: list[str] = []
    starts: dict[str, Run] = {}
    for r in records:
        run = r.event.run
        if run is None:
            assert not blocks, f"an event outside any run after the first run (seq {r.seq})"
            continue
        if not blocks or blocks[-1] != run:
            assert run not in blocks, f"run {run} resumed after another run began (seq {r.seq})"
            blocks.append(run)
        start = _run_start(r)
        if start is not None:
            assert start.run not in starts, f"run {run} started twice"
            starts[start.run] = start
    assert sorted(starts) == sorted(blocks), "a run without a run start"
    runs = [starts[b] for b in blocks]
    epochs = [r.epoch for r in runs]
    assert epochs == sorted(set(epochs)), f"lease epochs do not increase run by run: {epochs}"
    return Checked(records=records, runs=runs)
