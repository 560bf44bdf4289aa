"""Smoke tests of `bench/peers.py`: it runs every system at a tiny size and reports sane figures,
and it writes its Markdown section and plots without touching the other sections. No timing is
asserted: the figures only have to be there and be positive."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.peers

PEERS = Path(__file__).resolve().parents[2] / "bench" / "peers.py"
SYSTEMS = [
    "floor",
    "bubu",
    "openai-agents",
    "google-adk",
    "langgraph",
    "openai-agents-loop",
    "google-adk-loop",
    "langgraph-loop",
    "pydantic-ai-loop",
]
KEYS = {
    "system",
    "steps",
    "steps_done",
    "stopped",
    "step_ms_p50",
    "step_ms_first10_p50",
    "step_ms_last10_p50",
    "step_ms_mean",
    "step_ratio_to_floor",
    "bytes_per_step",
    "bytes_ratio_to_floor",
    "storage_bytes",
    "reload_ms",
    "reload_ratio_to_floor",
    "reload_items",
    "peak_mb",
    "config",
    "recovery",
}


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(PEERS), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.slow
def test_every_system_runs_and_reports_positive_figures() -> None:
    out = bench("--steps", "20", "--json", "--no-write", "--recovery-events", "60")
    rows = json.loads(out.stdout)
    assert [r["system"] for r in rows] == SYSTEMS
    for r in rows:
        assert r.keys() >= KEYS, r["system"]
        assert (r["steps"], r["steps_done"], r["stopped"]) == (20, 20, False)
        # Every system gave back every call and result it was given.
        assert r["reload_items"] == 40, r["system"]
        for key in (
            "step_ms_p50",
            "step_ms_first10_p50",
            "step_ms_last10_p50",
            "bytes_per_step",
            "reload_ms",
            "peak_mb",
            "step_ratio_to_floor",
            "bytes_ratio_to_floor",
        ):
            assert isinstance(r[key], float | int), (r["system"], key)
            assert r[key] > 0, (r["system"], key)
        assert r["storage_bytes"] >= 20 * 2000, r["system"]  # at least the results' bytes
    floor = rows[0]
    assert floor["step_ratio_to_floor"] == floor["bytes_ratio_to_floor"] == 1
    bubu = rows[1]
    [point] = bubu["recovery"]
    # The crash left one side-effecting dispatch dangling: never re-run, reported interrupted.
    assert point["decision"] == "interrupted"
    assert 50 <= point["events"] <= 70
    assert point["plan_ms"] > 0
    assert point["plan_verified_ms"] > 0
    assert all(r["recovery"] == [] for r in rows if r["system"] != "bubu")


@pytest.mark.slow
def test_writes_its_section_and_plots_and_keeps_the_others(tmp_path: Path) -> None:
    doc, img = tmp_path / "performance.md", tmp_path / "img"
    doc.write_text(
        "# Performance\n\n## Append\n\nappend figures\n\n"
        "## Against the peers\n\nstale text\n\n## Long session\n\nlong figures\n"
    )
    common = ["--systems", "floor,bubu", "--recovery-events", "", "--doc", str(doc)]
    bench("--steps", "12", *common, "--img-dir", str(img))
    bench("--steps", "8", *common, "--img-dir", str(img))
    text = doc.read_text()
    assert text.startswith("# Performance\n\n## Append\n\nappend figures\n")
    assert text.count("## Against the peers") == 1
    assert "stale text" not in text
    assert text.rstrip().endswith("## Long session\n\nlong figures")
    # One block per step count, in order, each with its table row per system and its plots.
    assert text.index("### 8 steps") < text.index("### 12 steps") < text.index("## Long session")
    for steps in (8, 12):
        for name in ("step-time", "loop-step-time", "storage"):
            png = img / f"peers-{name}-{steps}.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert f"](img/peers-{name}-{steps}.png)" in text
    assert text.count("| raw sqlite3 (the floor) |") == 2
    assert text.count("| Bubu (its whole engine loop) |") == 2
