"""A smoke run of `bench/long_session.py` at a tiny size: it drives the real engine through several
compactions and reports its figures. Nothing about time is asserted, only what must hold at any
size: no request over the budget, every byte kept, a verified chain, and the stated keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "long_session.py"

KEYS = {
    "steps",
    "window",
    "budget_tokens",
    "max_request_tokens",
    "max_request_estimate",
    "max_summary_request_tokens",
    "within_budget",
    "compactions",
    "failed_compactions",
    "prefix_share_mean",
    "prefix_share_p10",
    "prefix_share_mean_all",
    "uncached_tokens_per_step",
    "newest_step_tokens",
    "tokens_per_step",
    "tokens_per_step_raw",
    "tokens_total",
    "tokens_total_raw",
    "build_ms",
    "build_messages",
    "build_early_step",
    "build_late_step",
    "build_ratio",
    "step_ms_early",
    "step_ms_late",
    "output_bytes",
    "log_bytes",
    "log_over_output",
    "blob_bytes",
    "event_bytes",
    "verified",
    "policy",
    "wall_s",
    "load_avg_1m",
    "goal_share",
    "summary_calls",
}


def test_a_small_long_session_stays_in_budget_and_keeps_every_byte() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--steps", "80", "--window", "20000"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    *text, last = done.stdout.strip().splitlines()
    r = json.loads(last)

    assert set(r) == KEYS
    assert text[0].startswith("steps: 80;")
    assert r["budget_tokens"] == 15_000
    assert r["within_budget"]
    assert r["max_request_tokens"] <= r["budget_tokens"]
    # The engine's raw estimate may pass the budget by its calibration (the model counts less).
    assert r["max_request_estimate"] <= r["budget_tokens"] * 1.01
    assert r["compactions"] >= 2
    assert r["failed_compactions"] == 0
    # Every request held every line of the user's goal; each compaction made at least one call.
    assert r["goal_share"] == 1.0
    assert r["summary_calls"] >= r["compactions"]
    assert r["output_bytes"] == r["blob_bytes"] == 80 * 20_000
    assert r["log_bytes"] > r["output_bytes"]
    assert r["verified"]
    assert 0 < r["prefix_share_mean"] <= 1
    assert r["newest_step_tokens"] <= r["uncached_tokens_per_step"]
    assert r["tokens_per_step"] * 10 < r["tokens_per_step_raw"]
    assert r["build_early_step"] == 40
    assert r["build_messages"][str(r["build_late_step"])] == r["build_messages"]["40"]


@pytest.mark.heavy
def test_policy_overrides_reach_the_engine() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--steps",
            "10",
            "--window",
            "20000",
            "--policy",
            "hot_max_bytes=16384",
            "--policy",
            "compact_at=0.5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert (r["policy"]["hot_max_bytes"], r["policy"]["compact_at"]) == (16384, 0.5)
    # No 20 KB result is ever whole now: each step adds only its call and a placeholder.
    assert r["newest_step_tokens"] < 1000
    bad = subprocess.run(
        [sys.executable, str(BENCH), "--steps", "1", "--policy", "nonsense=1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode != 0
    assert "expected FIELD=VALUE with a ContextPolicy field" in bad.stderr


@pytest.mark.heavy
def test_a_small_window_is_compacted_below_its_trigger_so_it_is_not_summarized_every_step() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--steps", "300", "--window", "8192"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r["within_budget"]
    assert r["failed_compactions"] == 0
    # Compacted down to compact_to (below compact_at), reading each offloaded result's head and
    # tail: summarizer calls stay at most a tenth of the turn's calls (592 for 300 before).
    assert r["summary_calls"] <= 300 // 10
    assert (r["policy"]["compact_at"], r["policy"]["compact_to"]) == (0.8, 0.3)
