"""`bubu demo` end to end: a real SIGKILL, recovery with no new input, a fixed workspace."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bubu.demo import FIX_NEW, FIX_OLD


def _bubu(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "BUBU_HOME": str(home), **(env or {})}
    e.pop("BUBU_DB", None)
    e.pop("BUBU_FAILPOINT", None)
    return subprocess.run(
        [sys.executable, "-m", "bubu", *args],
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h


def _session(home: Path) -> dict[str, object]:
    out = _bubu(home, "sessions", "--json")
    rows = json.loads(out.stdout)
    assert len(rows) == 1
    return rows[0]  # type: ignore[no-any-return]


@pytest.mark.slow
def test_demo_crashes_recovers_and_fixes_the_test(home: Path, tmp_path: Path) -> None:
    ws = tmp_path / "project"
    out = _bubu(home, "demo", "--dir", str(ws))
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "Traceback" not in out.stderr
    # The kill was real and recovery happened without new input.
    assert "killed with SIGKILL" in text
    assert "unfinished task detected, auto-recovering" in text
    assert "re-run silently: read_file test_stats.py" in text
    assert "recorded as applied: edit_file stats.py" in text
    assert "awaiting your review (may or may not have happened): run_command" in text
    assert "check_style.py" in text.split("awaiting your review", 1)[1].splitlines()[0]
    assert "● turn completed" in text
    # The workspace is fixed, exactly once.
    src = (ws / "stats.py").read_text()
    assert FIX_NEW in src
    assert FIX_OLD not in src
    test = subprocess.run(
        [sys.executable, "-m", "unittest", "-q"], cwd=ws, capture_output=True, check=False
    )
    assert test.returncode == 0
    # The log verifies and tells the same story.
    row = _session(home)
    sid = str(row["id"])
    assert row["status"] == "completed"
    assert _bubu(home, "verify", sid).returncode == 0
    status = json.loads(_bubu(home, "status", sid, "--json").stdout)
    rec = status["recovery"]
    assert rec["status"] == "ready"
    assert rec["silent_retries"] == ["read_file test_stats.py"]
    assert rec["verified_applied"] == ["edit_file stats.py"]
    assert len(rec["pending_review"]) == 1
    assert rec["dismissed"] is False
    # Exactly two runs: the one that was killed and the recovery; the edit was never re-done.
    log = [json.loads(line) for line in _bubu(home, "log", sid, "--jsonl").stdout.splitlines()]
    runs = [
        e for e in log if e["event"].get("content", {}).get("note", {}).get("note") == "run_started"
    ]
    assert [r["event"]["content"]["note"]["cause"] for r in runs] == ["new", "recovery"]
    edits = [
        e
        for e in log
        if e["event"].get("actions", {}).get("tool_dispatch", {}).get("tool") == "edit_file"
    ]
    assert len(edits) == 1
    # The next commands it suggests exist.
    for cmd in (f"show {sid}", f"log {sid}", "ui"):
        assert f"bubu {cmd}" in text
    # The recovery block: a cut title ends in an ellipsis, each result names its call, and the
    # commands read `python3`, not this interpreter's full path.
    block = text.split("Starting Bubu again", 1)[1].split("┌ unfinished task", 1)[0]
    opening, *results = [ln for ln in block.splitlines()[1:] if ln.strip()]
    assert opening.endswith("…"), opening
    assert [r.split(":", 1)[0].strip(" ⎿✗") for r in results] == [
        "edit_file",
        "run_command",
        "read_file",
    ]
    assert sys.executable not in text
    assert "run_command python3 check_style.py" in text
    assert "with the recovery" in text


@pytest.mark.heavy
def test_demo_no_crash_runs_the_plain_fix(home: Path, tmp_path: Path) -> None:
    ws = tmp_path / "plain"
    out = _bubu(home, "demo", "--no-crash", "--dir", str(ws))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SIGKILL" not in out.stdout
    assert "auto-recovering" not in out.stdout
    assert "recovery" not in out.stdout, "a run without a crash promises no recovery"
    assert FIX_NEW in (ws / "stats.py").read_text()
    sid = str(_session(home)["id"])
    status = json.loads(_bubu(home, "status", sid, "--json").stdout)
    assert status["status"] == "completed"
    assert status["recovery"] is None


@pytest.mark.heavy
def test_demo_output_fits_one_screen(home: Path, tmp_path: Path) -> None:
    out = _bubu(home, "demo", "--dir", str(tmp_path / "screen"))
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert len(lines) <= 60, f"{len(lines)} lines"
    # Plain output when not on a terminal: no escape sequences.
    assert "\x1b[" not in out.stdout


README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.slow
def test_the_readmes_sample_is_what_the_demo_prints(home: Path, tmp_path: Path) -> None:
    text = README.read_text()
    start = text.index("```text\n⏺ edit_file stats.py") + len("```text\n")
    sample = text[start : text.index("```", start)]
    out = _bubu(home, "demo", "--dir", str(tmp_path / "project"))
    assert out.returncode == 0, out.stdout + out.stderr

    def plain(s: str) -> str:  # the ids, folders and hashes of one run
        s = re.sub(r"ses_[0-9a-z]+", "SES", s)
        s = re.sub(r"/tmp/bubu-demo-[0-9a-z_]+|" + re.escape(str(tmp_path / "project")), "DIR", s)
        return re.sub(r"\b[0-9a-f]{16}\b", "HASH", s)

    printed = plain(out.stdout)
    for line in plain(sample).splitlines():
        if line.endswith("…") or not line.strip():
            continue  # the README cuts the model's long sentences; the demo prints them whole
        assert line in printed, line
