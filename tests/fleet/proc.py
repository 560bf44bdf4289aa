"""Running `bubu` (with the fleet commands) as real processes, and scripted tasks for them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import hermetic

# `bubu` with the fleet and UI commands registered (importing them again is harmless once app.py
# lists them).
BUBU = [
    sys.executable,
    "-c",
    "import bubu.cli.fleetcmds, bubu.cli.uicmd; from bubu.cli import main; main()",
]


def clean_env(home: Path) -> dict[str, str]:
    """No inherited database, model or failpoint."""
    env = hermetic.environ("BUBU_")
    env["BUBU_HOME"] = str(home)
    return env


def bubu(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `bubu ARGS…` to its end and capture its output."""
    return subprocess.run(
        [*BUBU, *args],
        env=clean_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def bubu_ok(home: Path, *args: str) -> str:
    """Run `bubu ARGS…`, which must succeed; its stdout."""
    done = bubu(home, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def bubu_json(home: Path, *args: str) -> Any:
    """Run an inspecting command with JSON output and parse it."""
    return json.loads(bubu_ok(home, *args))


class WorkerProc:
    """A `bubu worker` process whose stderr goes to a file (so it never blocks on a pipe)."""

    def __init__(self, home: Path, url: str, *args: str, name: str = "worker") -> None:
        self.log_path = home / f"{name}.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [*BUBU, "worker", "--db", url, *args],
            env=clean_env(home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        self.pid = self.proc.pid

    def lines(self) -> list[str]:
        """What it logged so far."""
        return self.log_path.read_text().splitlines()

    def send(self, sig: signal.Signals) -> None:
        """Send a signal."""
        os.kill(self.pid, sig)

    def wait(self, timeout: float = 60) -> int:
        """Wait for it to exit; its exit status."""
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        """SIGKILL it if still running (a stopped process dies too)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()


def wait_for(check: Callable[[], bool], what: str, deadline_s: float = 60) -> None:
    """Poll `check` until it holds; fail naming `what` if it never does (a hang guard only)."""
    end = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def write_script(path: Path, lines: Sequence[dict[str, Any]]) -> str:
    """Write a scripted model (one response per line); its `-m` spec."""
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return f"scripted:{path}"


def command(cmd: str) -> dict[str, Any]:
    """A script line that runs one shell command."""
    return {"tool_calls": [{"name": "run_command", "arguments": {"command": cmd}}]}


def write(path: str, content: str) -> dict[str, Any]:
    """A script line that writes one file (a provable write)."""
    return {"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}
