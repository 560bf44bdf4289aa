"""`.ci/run` runs the main suite, the slow suites and the checks, the checks even when a suite
failed, and fails if any of the three did (a suite that collected no tests, pytest's exit 5,
included). Run on a copy of the script with stand-ins for the three commands."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CI = Path(__file__).resolve().parents[1] / ".ci" / "run"


def ci(tmp_path: Path, test: int, slow: int, check: int) -> subprocess.CompletedProcess[str]:
    (tmp_path / ".ci").mkdir()
    shutil.copy(CI, tmp_path / ".ci" / "run")
    (tmp_path / "scripts").mkdir()
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for path, code in (
        (tmp_path / "scripts" / "test", test),
        (tmp_path / "scripts" / "test-slow", slow),
        (tmp_path / "scripts" / "check", check),
    ):
        path.write_text(f'#!/bin/sh\necho "ran $(basename $0)${{PYTHON:+ $PYTHON}}"\nexit {code}\n')
        path.chmod(0o755)
    (bin_ / "pg_isready").write_text("#!/bin/sh\nexit 0\n")  # the database is up
    (bin_ / "pg_isready").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_all_passing_is_success(tmp_path: Path) -> None:
    done = ci(tmp_path, 0, 0, 0)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "ran test",
        "ran test-slow",
        "ran check",
        ".ci/run: all passed",
    ]


@pytest.mark.parametrize(("test", "slow", "check"), [(1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 1)])
def test_a_failure_anywhere_fails_and_the_checks_still_run(
    tmp_path: Path, test: int, slow: int, check: int
) -> None:
    done = ci(tmp_path, test, slow, check)
    assert done.returncode == 1
    assert "ran check" in done.stdout.splitlines()
    failed = [
        n
        for n, c in (("scripts/test", test), ("scripts/test-slow", slow), ("scripts/check", check))
        if c
    ]
    assert done.stderr.splitlines()[-1] == ".ci/run: failed: " + " ".join(
        f"{n} (exit 1)" for n in failed
    )


def test_a_suite_that_collected_nothing_is_a_failure_said_so(tmp_path: Path) -> None:
    done = ci(tmp_path, 0, 5, 0)
    assert done.returncode == 1
    assert ".ci/run: scripts/test-slow collected no tests" in done.stderr
