"""What every fault row shares: running `bubu` for real, and proving nothing committed was lost.

A row's proof that nothing was lost is a `Snapshot` of a session taken before the fault: its raw
rows (seq, hash, canonical bytes). Afterwards `assert_kept` checks that every one of those rows is
still there byte for byte, and that the session's chain verifies.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bubu.engine.driver import RunConfig
from bubu.engine.permissions import Policy
from bubu.engine.session import Host
from bubu.events import Error, FunctionResponse, Record
from bubu.log.migrations import SQLITE_MIGRATIONS
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import Store
from bubu.providers.base import Delta, Provider
from bubu.tools import builtin_tools
from engine.helpers import call, kinds, turn_end, wait_for, write_script

CHILD = Path(__file__).with_name("child.py")
"""The CLI with test hooks (short leases, a disk that fills up)."""

__all__ = ["call", "kinds", "turn_end", "wait_for", "write_script"]  # and what is defined below

FAST = RunConfig(backoff_s=0.001, backoff_max_s=0.01, tool_timeout_s=30.0, model_attempts=3)
"""Retries that do not wait, and a bounded number of them."""


# ---- running the CLI ---------------------------------------------------------------------------


def bubu_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no inherited Bubu settings, model keys or base URLs."""
    drop = ("BUBU_", "OPENAI_", "ANTHROPIC_", "FAULT_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["BUBU_HOME"] = str(home)
    env.update(extra)
    return env


def bubu_cmd(db: Path, *args: str, hooked: bool = False) -> list[str]:
    """The command line of `bubu --db DB ARGS…` (through the hooks launcher if `hooked`)."""
    head = [sys.executable, str(CHILD)] if hooked else [sys.executable, "-m", "bubu"]
    return [*head, "--db", str(db), *args]


def bubu(
    db: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    hooked: bool = False,
    obey_permissions: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `bubu` to its end (a hang fails the test at `timeout`) and capture its output.

    `obey_permissions` makes file modes bind the child even when the tests run as root."""
    done = subprocess.run(
        bubu_cmd(db, *args, hooked=hooked),
        env=bubu_env(db.parent, **(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        preexec_fn=drop_root_file_powers if obey_permissions else None,
    )
    assert_no_traceback(done.stdout + done.stderr)
    return done


def start_bubu(
    db: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    hooked: bool = False,
    hup_ignored: bool = False,
) -> subprocess.Popen[str]:
    """Start `bubu` in the background, output captured, its signals at their defaults whatever
    the test run inherited (`nohup` ignores SIGHUP), or with `hup_ignored` as under `nohup`."""
    # coreutils' env sets the dispositions and execs (the pid stays bubu's).
    signals = ["env", "--default-signal=HUP,TERM,INT"]
    if hup_ignored:
        signals.append("--ignore-signal=HUP")
    return subprocess.Popen(
        [*signals, *bubu_cmd(db, *args, hooked=hooked)],
        env=bubu_env(db.parent, **(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    """Wait for a background `bubu` (a hang fails at `timeout`); its code, stdout and stderr."""
    out, err = proc.communicate(timeout=timeout)
    assert_no_traceback(out + err)
    return proc.returncode, out, err


_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER = 1, 2, 3


def drop_root_file_powers() -> None:
    """In a forked child about to exec: give up root's right to ignore file modes (the exec'd
    program's capabilities come from the bounding set), so a mode 0444 file is read-only to it."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def bubu_json(db: Path, *args: str) -> Any:
    """Run an inspecting command with --json output; it must succeed."""
    done = bubu(db, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def error_line(stderr: str) -> str:
    """The one `bubu: error: …` line of a failed command (and check there is exactly one)."""
    lines = [ln for ln in stderr.splitlines() if ln.startswith("bubu: error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def assert_no_traceback(output: str) -> None:
    """No Python traceback reached the user."""
    assert "Traceback (most recent call last)" not in output, output
    assert "Exception in thread" not in output, output


# ---- proving nothing committed was lost --------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """A session's committed rows at one moment."""

    session: str
    rows: tuple[tuple[int, bytes, bytes], ...]

    @property
    def high_water(self) -> int:
        """The last seq taken."""
        return len(self.rows)


def snapshot(db: Path | SQLiteStore, session: str | None = None) -> Snapshot:
    """The rows of `session` (or of the only session) in the database."""
    if isinstance(db, SQLiteStore):
        sid = session or _only(db)
        return Snapshot(session=sid, rows=tuple(_rows(db, sid)))
    with SQLiteStore(db) as store:
        return snapshot(store, session)


def assert_kept(before: Snapshot, db: Path | SQLiteStore) -> Snapshot:
    """Every row of `before` is still there byte for byte, and the whole session verifies."""
    if isinstance(db, SQLiteStore):
        report = db.verify(before.session)
        now = Snapshot(session=before.session, rows=tuple(_rows(db, before.session)))
    else:
        with SQLiteStore(db) as store:
            return assert_kept(before, store)
    assert report.ok, report
    assert now.rows[: before.high_water] == before.rows, "a committed event changed or vanished"
    return now


def _rows(store: SQLiteStore, session: str) -> list[tuple[int, bytes, bytes]]:
    return [(int(s), bytes(h), bytes(p)) for s, h, p in store.raw(session)]


def _only(store: Store) -> str:
    (info,) = store.sessions()
    return info.id


def only_session(db: Path) -> str:
    """The id of the one session in the database."""
    with SQLiteStore(db) as store:
        return _only(store)


def read(db: Path, session: str | None = None) -> list[Record]:
    """Every record of `session` (or of the only session)."""
    with SQLiteStore(db) as store:
        return store.read(session or _only(store))


# ---- what a log says ---------------------------------------------------------------------------


def results(records: Iterable[Record]) -> list[FunctionResponse]:
    """Every tool result, in order (what the model sees)."""
    return [c for r in records if isinstance(c := r.event.content, FunctionResponse)]


def errors(records: Iterable[Record]) -> list[Error]:
    """Every error event, in order."""
    return [c for r in records if isinstance(c := r.event.content, Error)]


# ---- the engine in this process ----------------------------------------------------------------


@dataclass
class Watcher:
    """An observer that keeps what a person would see of a run: deltas and activity lines."""

    deltas: list[Delta] = field(default_factory=list)
    activity: list[str] = field(default_factory=list)
    committed: list[Record] = field(default_factory=list)

    def on_delta(self, delta: Delta) -> None:
        """Keep a streamed fragment."""
        self.deltas.append(delta)

    def on_records(self, records: Sequence[Record]) -> None:
        """Keep committed records."""
        self.committed.extend(records)

    def on_activity(self, text: str | None) -> None:
        """Keep a status line."""
        if text is not None:
            self.activity.append(text)


def make_host(
    store: Store,
    provider: Provider,
    *,
    config: RunConfig = FAST,
    policy: Policy | None = None,
    observer: Watcher | None = None,
) -> Host:
    """A host with the built-in tools; nobody answers permission requests unless `policy` says."""
    return Host(
        store=store,
        provider=provider,
        tools=builtin_tools(),
        policy=policy or Policy(),
        observer=observer or Watcher(),
        config=config,
    )


@dataclass
class Run:
    """One turn the engine drove in this process, and what it left in the log."""

    reason: str | None
    records: list[Record]
    watcher: Watcher

    @property
    def results(self) -> list[FunctionResponse]:
        """The tool results, in order (what the model was shown)."""
        return results(self.records)

    @property
    def kinds(self) -> list[str]:
        """The kinds of the records."""
        return kinds(self.records)


def run_script(
    tmp_path: Path,
    ws: Path,
    lines: Iterable[Mapping[str, object]],
    *,
    task: str = "do it",
    policy: Policy | None = None,
    config: RunConfig = FAST,
) -> Run:
    """Run one turn of a scripted model over the built-in tools in `ws`; check that the log holds
    every event the run reported committed and that the chain verifies."""
    from bubu.engine.session import new_session, start_turn
    from bubu.providers.scripted import ScriptedProvider

    script = write_script(tmp_path / "script.jsonl", lines)
    watcher = Watcher()
    with SQLiteStore(tmp_path / "bubu.db") as store:
        provider = ScriptedProvider(str(script))
        info = new_session(store, task=task, workspace=ws, model=provider.spec)
        host = make_host(store, provider, config=config, policy=policy, observer=watcher)
        reason = start_turn(host, info, task)
        records = store.read(info.id)
        assert store.verify(info.id).ok
    assert [(r.seq, r.hash) for r in watcher.committed] == [(r.seq, r.hash) for r in records]
    return Run(reason=reason, records=records, watcher=watcher)


# ---- a database the real engine wrote ------------------------------------------------------

SOUND: list[dict[str, object]] = [
    {"tool_calls": [call("read_file", path="a.txt")]},
    {"text": "Read it. " + "Done. " * 600},
]
"""A short turn whose final answer (3.6 KB) fills pages of its own."""


KNOWN = max(m.version for m in SQLITE_MIGRATIONS)
"""The newest schema migration this Bubu knows."""


def seed(tmp_path: Path, sessions: int = 3) -> tuple[Path, Path, list[str]]:
    """A database with `sessions` completed sessions, written by the real engine; (db, ws, ids)."""
    from bubu.engine.session import new_session, start_turn
    from bubu.providers.scripted import ScriptedProvider

    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("alpha\n")
    script = write_script(tmp_path / "sound.jsonl", SOUND)
    db = tmp_path / "bubu.db"
    ids = []
    with SQLiteStore(db) as store:
        for n in range(sessions):
            provider = ScriptedProvider(str(script))
            info = new_session(store, task=f"task {n}", workspace=ws, model=provider.spec)
            assert start_turn(make_host(store, provider), info, f"task {n}") == "completed"
            ids.append(info.id)
    return db, ws, ids


def sha(path: Path) -> str:
    """The sha-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
