"""Smoke test of `bench/soak.py` at a small size: real SIGKILLs of `bubu run` and `bubu recover`
mid-step, compactions, and not one side effect lost or repeated. No timing is asserted (the
figures go in docs/performance.md from a full run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


@pytest.mark.timeout(2400)  # a few minutes on a quiet machine, far more on a loaded one
def test_a_small_soak_with_kills_loses_and_repeats_no_side_effect(tmp_path: Path) -> None:
    env = {**os.environ, "BENCH_TMP": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, str(SOAK), "--steps", "3000", "--every", "700"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=2300)
    finally:
        if proc.poll() is None:  # the soak and its current child with it
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    r = json.loads(out.strip().splitlines()[-1])
    assert r["turn_ended"] == "completed"
    assert r["steps_called"] == 3000
    assert r["killed"] >= 3
    assert r["compactions"] >= 1
    assert (r["lost"], r["repeated"]) == (0, 0)
    assert r["verified"] is True
    assert r["reload_same_as_full_fold"] is True
    assert r["stopped_early"] is False
