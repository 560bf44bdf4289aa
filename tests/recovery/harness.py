"""The crash harness: run `bubu run` in a child process that SIGKILLs itself at a failpoint, restart
with `bubu recover --json` in a new process, and check what the issue promises (DESIGN §4, §5):

- the log verifies and every event committed before the kill is still there with the same hash;
- every call has exactly one outcome; a side-effecting command ran at most once (each command
  appends its own tag to a counter file outside the workspace), a provable write was applied once,
  a read-only call caught by the crash was re-run;
- the turn completes and the workspace equals an uncrashed run's.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bubu.events import (
    FunctionCall,
    FunctionResponse,
    ModelRequestNote,
    Record,
    RecoveryNotice,
    RunStarted,
    SystemNote,
    ToolDispatch,
)
from bubu.log.sqlite import SQLiteStore
from bubu.projections.recovery import INTERRUPTED
from bubu.projections.status import fold_status

from .proc import bubu

READ_ONLY = frozenset({"read_file", "list_files", "grep"})
WRITES = frozenset({"write_file", "edit_file"})
COUNTER = "{counter}"
"""Placeholder for the counter file's path in a scenario's commands."""

ENGINE_FAILPOINTS = (
    "before_dispatch",
    "after_dispatch",
    "mid_tool",
    "after_tool",
    "after_outcome",
    "before_model_call",
    "mid_model_call",
    "after_model_response",
    "before_turn_end",
    "after_turn_end",
)
"""The failpoints a normal turn reaches (mid_recovery is reached only by recovery and has its own
tests; mid_compaction only by compaction, which a normal short turn never triggers)."""


def counted(tag: str) -> str:
    """A side-effecting command that leaves one line `tag` in the counter file each time it runs."""
    return f"echo {tag} >> {COUNTER}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A scripted task: the model's lines and the workspace it starts from."""

    name: str
    lines: Sequence[Mapping[str, Any]]
    files: Mapping[str, str]
    allow: tuple[str, ...] = ("echo *",)


@dataclass(frozen=True, slots=True, kw_only=True)
class Project:
    """One scenario laid out on disk: its database, workspace, script and counter file."""

    root: Path
    db: Path
    ws: Path
    script: Path
    counter: Path

    def run_args(self, scenario: Scenario) -> list[str]:
        """The `bubu run` arguments for the scenario."""
        # A wildcard pattern never approves output outside the workspace, and the counted
        # commands write the counter there: each command is allowed as its exact line.
        exact = [
            str(c["arguments"]["command"]).replace(COUNTER, str(self.counter))
            for line in scenario.lines
            for c in line.get("tool_calls", [])
            if c.get("name") == "run_command"
        ]
        allow = [a for pattern in (*scenario.allow, *exact) for a in ("--allow", pattern)]
        # Unconfined: the scenarios count side effects through files outside the workspace.
        return [
            "run",
            "do it",
            "-w",
            str(self.ws),
            "-m",
            f"scripted:{self.script}",
            "--sandbox",
            "off",
            *allow,
        ]


def lay_out(root: Path, scenario: Scenario) -> Project:
    """Create the scenario's workspace and script under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    ws = root / "ws"
    ws.mkdir()
    for name, text in scenario.files.items():
        (ws / name).write_text(text)
    counter = root / "counter.txt"
    script = root / "script.jsonl"
    text = "".join(json.dumps(line) + "\n" for line in scenario.lines)
    script.write_text(text.replace(COUNTER, str(counter)))
    return Project(root=root, db=root / "bubu.db", ws=ws.resolve(), script=script, counter=counter)


def read_log(db: Path) -> list[Record]:
    """Every record of the database's only session."""
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        return store.read(info.id)


def workspace(ws: Path) -> dict[str, bytes]:
    """Every file of the workspace by relative path."""
    return {str(p.relative_to(ws)): p.read_bytes() for p in sorted(ws.rglob("*")) if p.is_file()}


def counter_lines(counter: Path) -> list[str]:
    """The tags the counted commands left, in order."""
    return counter.read_text().split() if counter.exists() else []


def sha256_of(path: str) -> str | None:
    """The file's sha-256 now, or None."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def wait_for_file(path: Path, timeout_s: float = 60.0) -> None:
    """Wait until `path` exists with some content (a gate in a test, not a timing)."""
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def last_json_document(stdout: str) -> Any:
    """The final pretty-printed JSON document of `recover --json` (event lines come before it)."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("["))
    return json.loads("\n".join(lines[start:]))


@dataclass(slots=True, kw_only=True)
class Observation:
    """Everything seen around one crash and the restart that followed."""

    label: str
    run_rc: int
    run_output: str
    before: list[Record]
    hashes_at_kill: dict[str, str | None]
    recover_rc: int
    recover_output: str
    recovered: list[dict[str, Any]]
    verify_rc: int
    after: list[Record]
    files: dict[str, bytes]
    counter: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Baseline:
    """What an uncrashed run of the scenario leaves behind."""

    files: dict[str, bytes]
    counter: list[str]


def baseline(root: Path, scenario: Scenario) -> Baseline:
    """Run the scenario without a crash."""
    p = lay_out(root, scenario)
    done = bubu(p.db, *p.run_args(scenario))
    assert done.returncode == 0, done.stdout + done.stderr
    return Baseline(files=workspace(p.ws), counter=counter_lines(p.counter))


def crash_and_recover(root: Path, scenario: Scenario, failpoint: str) -> Observation:
    """Run the scenario with `BUBU_FAILPOINT=failpoint`, then `bubu recover --json` and `verify`."""
    p = lay_out(root, scenario)
    run = bubu(p.db, *p.run_args(scenario), failpoint=failpoint)
    before = read_log(p.db)
    paths = {d.path for _, d in dispatches(before).values() if d.path}
    hashes = {path: sha256_of(path) for path in paths}
    rec = bubu(p.db, "recover", "--json")
    verify = bubu(p.db, "verify")
    return Observation(
        label=f"{scenario.name} @ {failpoint}",
        run_rc=run.returncode,
        run_output=run.stdout + run.stderr,
        before=before,
        hashes_at_kill=hashes,
        recover_rc=rec.returncode,
        recover_output=rec.stdout + rec.stderr,
        recovered=last_json_document(rec.stdout) if rec.returncode == 0 else [],
        verify_rc=verify.returncode,
        after=read_log(p.db),
        files=workspace(p.ws),
        counter=counter_lines(p.counter),
    )


def dispatches(records: Sequence[Record]) -> dict[str, tuple[int, ToolDispatch]]:
    """The dispatch of each call, by call id."""
    out: dict[str, tuple[int, ToolDispatch]] = {}
    for r in records:
        a = r.event.actions
        if a is not None and a.tool_dispatch is not None:
            out[a.tool_dispatch.call_id] = (r.seq, a.tool_dispatch)
    return out


def outcomes(records: Sequence[Record]) -> dict[str, list[FunctionResponse]]:
    """Every outcome, by call id."""
    out: dict[str, list[FunctionResponse]] = {}
    for r in records:
        if isinstance(c := r.event.content, FunctionResponse):
            out.setdefault(c.call_id, []).append(c)
    return out


def model_requests(records: Sequence[Record]) -> list[tuple[int, ModelRequestNote]]:
    """The committed model-request facts, with their seqs."""
    return [
        (r.seq, n)
        for r in records
        if isinstance(c := r.event.content, SystemNote)
        and isinstance(n := c.note, ModelRequestNote)
    ]


@dataclass(slots=True)
class Tally:
    """The issue's closing counts."""

    runs: int = 0
    kills: int = 0
    recovered: int = 0
    nothing_to_do: int = 0
    side_effects_repeated: int = 0
    committed_events_lost: int = 0
    decisions: dict[str, int] = field(default_factory=dict)

    def add(self, other: Tally) -> None:
        """Sum another tally into this one."""
        self.runs += other.runs
        self.kills += other.kills
        self.recovered += other.recovered
        self.nothing_to_do += other.nothing_to_do
        self.side_effects_repeated += other.side_effects_repeated
        self.committed_events_lost += other.committed_events_lost
        for k, v in other.decisions.items():
            self.decisions[k] = self.decisions.get(k, 0) + v


def tally(o: Observation) -> Tally:
    """Count what happened, without asserting anything (so totals survive a failing cell)."""
    t = Tally(runs=1, kills=int(o.run_rc == -9))
    kept = {(r.seq, r.hash) for r in o.after}
    t.committed_events_lost = sum((r.seq, r.hash) not in kept for r in o.before)
    t.side_effects_repeated = sum(max(0, o.counter.count(tag) - 1) for tag in set(o.counter))
    for entry in o.recovered:
        if entry.get("plan") == "ready" and entry.get("outcome") == "completed":
            t.recovered += 1
        for c in entry.get("calls", []):
            t.decisions[c["decision"]] = t.decisions.get(c["decision"], 0) + 1
    t.nothing_to_do = int(not o.recovered)
    return t


def expected_decision(name: str, d: ToolDispatch, hashes: Mapping[str, str | None]) -> str:
    """What recovery must decide for a call of `name` left dangling by the crash."""
    if name in READ_ONLY:
        return "rerun"
    if name in WRITES:
        assert d.path is not None
        now = hashes[d.path]
        if now == d.after_sha256:
            return "applied"
        assert now == d.before_sha256, "a provable write left the file neither before nor after"
        return "rerun_not_applied"
    return "interrupted"


def check(o: Observation, base: Baseline) -> None:
    """Assert every promise of the issue for one crash (see the module docstring)."""
    where = f"[{o.label}]"
    assert o.run_rc == -9, f"{where} the run was not killed: {o.run_rc}\n{o.run_output}"
    assert o.recover_rc == 0, f"{where} recover failed: {o.recover_rc}\n{o.recover_output}"
    assert o.verify_rc == 0, f"{where} the log does not verify"
    assert [(r.seq, r.hash) for r in o.after[: len(o.before)]] == [
        (r.seq, r.hash) for r in o.before
    ], f"{where} a committed event changed or went missing"
    assert len({r.event.id for r in o.after}) == len(o.after), f"{where} an event was duplicated"

    calls = {c.call_id: c for r in o.after if isinstance(c := r.event.content, FunctionCall)}
    answered = outcomes(o.after)
    assert {k: len(v) for k, v in answered.items()} == dict.fromkeys(calls, 1), (
        f"{where} every call needs exactly one outcome"
    )

    done_before = set(outcomes(o.before))
    dangling = {cid: d for cid, (_, d) in dispatches(o.before).items() if cid not in done_before}
    facts = {
        r.event.actions.tool_recovery.call_id: r.event.actions.tool_recovery.decision
        for r in o.after
        if r.event.actions is not None and r.event.actions.tool_recovery is not None
    }
    expected = {
        cid: expected_decision(calls[cid].name, d, o.hashes_at_kill) for cid, d in dangling.items()
    }
    assert facts == expected, f"{where} recovery decisions"
    for cid, decision in expected.items():
        (out,) = answered[cid]
        if decision == "interrupted":
            assert out.is_error, f"{where} an interrupted call's outcome is an error"
            assert out.result.startswith(INTERRUPTED), f"{where} interrupted wording"
            # What changed in the workspace since its dispatch, from the snapshots.
            assert "in the workspace" in out.result, f"{where} {out.result}"
        elif decision == "rerun":
            assert not out.is_error, f"{where} a re-run read failed: {out.result}"

    for cid, c in calls.items():
        if c.name == "run_command":
            tag = str(c.arguments["command"]).split()[1]
            ran = o.counter.count(tag)
            assert ran <= 1, f"{where} the command {tag} ran {ran} times"
            if expected.get(cid) != "interrupted":
                assert ran == 1, f"{where} the command {tag} never ran and was not interrupted"

    _check_order(o, where)
    status = fold_status(o.after)
    assert status.state == "completed", f"{where} the turn ended {status.state}: {status.reason}"
    assert o.files == base.files, (
        f"{where} the workspace differs from an uncrashed run's: "
        + ", ".join(
            sorted(
                k for k in o.files.keys() | base.files.keys() if o.files.get(k) != base.files.get(k)
            )
        )
    )
    assert sorted(o.counter) == sorted(
        tag
        for tag in base.counter
        if tag in o.counter or not _interrupted_tag(tag, calls, expected)
    ), f"{where} the counted commands differ from an uncrashed run's"

    # An in-flight model call is issued again, byte-identical when recovery added nothing visible.
    asked = model_requests(o.before)
    answered_model = {r.seq for r in o.before if r.event.role == "model"}
    if asked and not dangling and not any(s > asked[-1][0] for s in answered_model):
        again = [n for s, n in model_requests(o.after) if s > len(o.before)]
        assert again, f"{where} the lost model call was not issued again"
        assert again[0].request_digest == asked[-1][1].request_digest, (
            f"{where} the re-issued request differs from the lost one"
        )


def _check_order(o: Observation, where: str) -> None:
    """Recovery facts and outcomes first, then the notice, then a new run with no new user input."""
    new = o.after[len(o.before) :]
    users = [r for r in o.after if r.event.role == "user" and r.event.visibility == "visible"]
    assert len(users) == sum(
        r.event.role == "user" and r.event.visibility == "visible" for r in o.before
    ), f"{where} recovery added user input"
    notices = [
        r.seq
        for r in new
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, RecoveryNotice)
    ]
    if not notices:
        return
    (notice,) = notices
    runs = [
        r.seq
        for r in new
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, RunStarted)
    ]
    assert runs, f"{where} the recovery is a new run"
    assert runs[0] < notice, f"{where} the recovery run starts before its notice"
    facts = [
        r.seq
        for r in new
        if r.event.actions is not None and r.event.actions.tool_recovery is not None
    ]
    recovered = {
        r.event.actions.tool_recovery.call_id
        for r in new
        if r.event.actions and r.event.actions.tool_recovery
    }
    settled = [
        r.seq
        for r in new
        if isinstance(c := r.event.content, FunctionResponse) and c.call_id in recovered
    ]
    assert all(seq < notice for seq in facts + settled), (
        f"{where} facts and outcomes come before the notice"
    )
    asked = [seq for seq, _ in model_requests(new)]
    assert all(seq > notice for seq in asked), f"{where} the model is asked only after the notice"


def _interrupted_tag(
    tag: str, calls: Mapping[str, FunctionCall], expected: Mapping[str, str]
) -> bool:
    return any(
        c.name == "run_command"
        and str(c.arguments["command"]).split()[1] == tag
        and expected.get(cid) == "interrupted"
        for cid, c in calls.items()
    )


def run_all(jobs: Sequence[tuple[Path, Scenario, str]], workers: int = 4) -> list[Observation]:
    """Crash-and-recover every job, several at a time (each has its own database and workspace)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda job: crash_and_recover(*job), jobs))
