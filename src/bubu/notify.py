"""Telling a person: the `notify` command runs with a JSON payload on its stdin when a turn ends,
a permission is needed, a recovery happened or a session is blocked.

Notifiers are fire-and-forget: each runs in its own process group with a timeout, and a failing
one is reported once on stderr and never touches the task or its log.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bubu import clock
from bubu.events import Record, RecoveryNotice, SystemNote, TurnEnded
from bubu.log.store import Store
from bubu.providers.base import Delta

Kind = Literal["turn_ended", "permission", "recovery", "blocked"]

DEFAULT_TIMEOUT_S = 10.0
WAITING = "waiting for permission"
"""The activity the engine reports while it waits for a person's answer."""

_PENDING: set[threading.Thread] = set()


def payloads(records: Sequence[Record]) -> list[dict[str, Any]]:
    """The notifications `records` call for (without the session's title and workspace)."""
    out: list[dict[str, Any]] = []
    for r in records:
        ev, c, a = r.event, r.event.content, r.event.actions
        base = {"session": ev.session, "turn": ev.turn, "seq": r.seq, "time_ms": ev.ts}
        if isinstance(c, SystemNote) and isinstance(c.note, TurnEnded):
            n = c.note
            out.append({"kind": "turn_ended", "status": n.reason, "reason": n.message, **base})
        elif isinstance(c, SystemNote) and isinstance(c.note, RecoveryNotice):
            n2 = c.note
            kind: Kind = "blocked" if n2.status == "blocked" else "recovery"
            out.append({"kind": kind, "status": n2.status, "reason": n2.reason, **base})
        if a is not None and a.permission_request is not None:
            p = a.permission_request
            out.append(
                {
                    "kind": "permission",
                    "status": "waiting",
                    "tool": p.tool,
                    "summary": p.summary,
                    "reason": p.reason,
                    **base,
                }
            )
    return out


@dataclass
class Notifier:
    """Runs `command` for each notification; remembers whether it already reported a failure."""

    command: Sequence[str]
    timeout_s: float = DEFAULT_TIMEOUT_S
    failed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, payload: dict[str, Any]) -> None:
        """Start the command with `payload` on stdin and return at once."""
        t = threading.Thread(target=self._run, args=(payload,), name="bubu-notify", daemon=True)
        _PENDING.add(t)
        t.start()

    def _run(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, sort_keys=True).encode() + b"\n"
        try:
            proc = subprocess.Popen(
                list(self.command),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as e:
            self._failed(f"cannot start {self.command[0]!r}: {e.strerror or e}")
            return
        try:
            try:
                assert proc.stdin is not None
                proc.stdin.write(data)
                proc.stdin.close()
            except OSError:
                pass  # a notifier that ignores its stdin may close it early
            try:
                code = proc.wait(self.timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                self._failed(
                    f"{self.command[0]!r} ran longer than {self.timeout_s:g}s and was killed"
                )
                return
            if code != 0:
                self._failed(f"{self.command[0]!r} exited with status {code}")
        finally:
            _PENDING.discard(threading.current_thread())

    def _failed(self, why: str) -> None:
        with self._lock:
            if self.failed:
                return
            self.failed = True
        try:
            sys.stderr.write(
                f"bubu: warning: the notify command failed: {why} (not reported again)\n"
            )
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


@dataclass
class NotifyingObserver:
    """An engine observer that passes everything on and sends notifications for what it sees."""

    inner: Any
    notifier: Notifier
    store: Store
    _info: dict[str, tuple[str, str]] = field(default_factory=dict)
    _asking: list[dict[str, Any]] = field(default_factory=list)

    def on_delta(self, delta: Delta) -> None:
        """Pass on."""
        self.inner.on_delta(delta)

    def on_activity(self, text: str | None) -> None:
        """Pass on; a permission request is announced once the run really waits for a person."""
        self.inner.on_activity(text)
        if text == WAITING and self._asking:
            for p in self._asking:
                self.notifier.send(p)
            self._asking = []

    def on_records(self, records: Sequence[Record]) -> None:
        """Pass on, then notify about turn ends and recoveries (and hold permission requests,
        which `--yes` or an allow-list may answer without anyone)."""
        self.inner.on_records(records)
        for p in payloads(records):
            p.update(self._session(p["session"]))
            if p["kind"] == "permission":
                self._asking.append(p)
            else:
                self.notifier.send(p)

    def _session(self, sid: str) -> dict[str, str]:
        if sid not in self._info:
            try:
                info = self.store.session(sid)
                self._info[sid] = (info.title, info.workspace)
            except Exception:  # the title is a courtesy; the notification goes out without it
                self._info[sid] = ("", "")
        title, workspace = self._info[sid]
        return {"title": title, "workspace": workspace, "time": _iso(clock.now_ms())}


def _iso(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


def wrap(
    observer: Any, command: Sequence[str] | None, store: Store, timeout_s: float | None
) -> Any:
    """`observer`, notifying through `command` when one is configured."""
    if not command:
        return observer
    return NotifyingObserver(observer, Notifier(command, timeout_s or DEFAULT_TIMEOUT_S), store)


@atexit.register
def _drain() -> None:
    """Let notifiers started just before exit (a turn's end) get their payload out."""
    for t in list(_PENDING):
        t.join(DEFAULT_TIMEOUT_S + 1)
