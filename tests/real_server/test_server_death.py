"""How the real_server fixtures report a server that died: by its signal, a SIGILL as the CPU trap
it is, not as the timeouts and refused connections the tests see next. A stand-in process that
kills itself with SIGILL plays the server; no model server is needed, so this runs everywhere."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import how_it_ended, start_server, stop_server, wait_ready

TESTS = Path(__file__).resolve().parents[1]
TRAPS = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]


def test_how_a_process_ended_names_the_signal_and_calls_sigill_a_trap() -> None:
    assert how_it_ended(0) == "exited with status 0"
    assert how_it_ended(-9) == "was killed by SIGKILL (Killed)"
    said = how_it_ended(-4)
    assert said.startswith("was killed by SIGILL (Illegal instruction): a CPU trap")
    assert "scripts/test-slow" in said


def test_a_server_that_traps_at_start_is_reported_as_a_trap(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    proc = start_server("the stand-in server", TRAPS, log)
    try:
        with pytest.raises(pytest.fail.Exception) as failed:
            wait_ready(proc, "http://127.0.0.1:9/never", log)
    finally:
        stop_server(proc)
    assert "the server was killed by SIGILL" in str(failed.value)
    assert "did not answer" not in str(failed.value)


@pytest.mark.heavy
def test_a_server_that_traps_during_a_test_is_reported_on_it_and_the_next(tmp_path: Path) -> None:
    # A test session of its own, with these fixtures as its plugin: the first test waits on a
    # server that traps and then times out, as a request to a dead server would; the second
    # would time out too.
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent(f"""
        import subprocess
        from pathlib import Path
        from real_server.conftest import start_server

        def test_waits_on_the_server(tmp_path: Path) -> None:
            proc = start_server("the llama server", {TRAPS!r}, tmp_path / "log")
            proc.wait()
            raise subprocess.TimeoutExpired("a completion", 60)

        def test_the_next_one() -> None:
            raise subprocess.TimeoutExpired("another completion", 60)
        """)
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "real_server.conftest",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "-q",
            "--rootdir",
            str(tmp_path),
            "-o",
            "addopts=",
            str(tmp_path),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "1 failed, 1 error" in out  # the second fails in its set-up, before it runs
    # pytest prints the set-up errors (the second test's) before the failures (the first's).
    second, first = out.split("= FAILURES =", 1)
    assert "test_waits_on_the_server" in first
    assert "the llama server was killed by SIGILL (Illegal instruction): a CPU trap" in first
    assert "What the test saw:" in first
    assert "TimeoutExpired" in first
    assert "ERROR at setup of test_the_next_one" in second
    assert "a server died before this test: the llama server was killed by SIGILL" in second
    assert "another completion" not in out
