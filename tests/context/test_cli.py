"""`bubu context --json` and a crash in the middle of a compaction, through `bubu` as a
subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import hermetic
from bubu.context.compaction import VIEW_KIND
from bubu.events import FunctionResponse, Text, TurnEnded
from bubu.log.sqlite import SQLiteStore

from .helpers import compactions, model_requests, notes, write_script

WINDOW = "9000"
NOISE = "python3 -c \"print(('line ' + 'x' * 60 + chr(10)) * 200)\""
"""A command printing 13,200 bytes: offloaded yet whole while newest, and a few fill the window."""

KEYS = {
    "session",
    "model",
    "request_digest",
    "estimated_tokens",
    "calibrated_tokens",
    "calibration",
    "window",
    "window_source",
    "budget",
    "checkpoint",
    "system",
    "tools",
    "messages",
    "events",
    "project_instructions",
}


def bubu(db: Path, *args: str, failpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `bubu --db DB ARGS…` in a clean environment and capture its output."""
    env = hermetic.environ("BUBU_")
    env["BUBU_HOME"] = str(db.parent)
    if failpoint is not None:
        env["BUBU_FAILPOINT"] = failpoint
    return subprocess.run(
        [sys.executable, "-m", "bubu", "--db", str(db), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


NOISY: dict[str, Any] = {"tool_calls": [{"name": "run_command", "arguments": {"command": NOISE}}]}


def _noisy(step: int) -> dict[str, Any]:
    # Each step's output differs: the same call with the same result would be a loop.
    command = f"{NOISE}; echo step {step}"
    return {"tool_calls": [{"name": "run_command", "arguments": {"command": command}}]}


def _noisy_script(tmp_path: Path, steps: int, tail: list[dict[str, Any]]) -> Path:
    return write_script(tmp_path / "s.jsonl", [_noisy(i) for i in range(steps)] + tail)


def _session(db: Path) -> str:
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        return info.id


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.mark.heavy
def test_context_json_shows_the_next_request_and_what_became_of_each_event(
    tmp_path: Path, workspace: Path
) -> None:
    # Turn 1: noise until a compaction, then an answer. Turn 2: a command that is dispatched
    # when the process dies, so its call has no outcome. Every kind of inclusion appears.
    db = tmp_path / "bubu.db"
    script = _noisy_script(tmp_path, 11, [{"text": "done"}, NOISY])
    run = ["-m", f"scripted:{script}", "--yes", "--context-window", WINDOW]
    done = bubu(db, "run", "make noise", "-w", str(workspace), *run)
    assert done.returncode == 0, done.stderr
    sid = _session(db)
    crashed = bubu(db, "run", "again", "--session", sid, *run, failpoint="after_dispatch")
    assert crashed.returncode == -9, crashed.stderr

    shown = bubu(db, "context", sid, "--json", "--context-window", WINDOW)
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)

    assert set(out) == KEYS
    assert out["session"] == sid
    assert out["model"] == f"scripted:{script}"
    assert out["window"] == 9_000
    assert out["window_source"] == "--context-window"
    assert out["budget"] == 6_750
    assert out["estimated_tokens"] <= out["budget"]
    assert "run_command" in out["tools"]
    assert out["tools"] == sorted(out["tools"])
    with SQLiteStore(db) as store:
        records = store.read(sid)
        (_, cp), *_ = compactions(records)
        assert out["checkpoint"] == {
            "key": cp.checkpoint,
            "watermark": cp.watermark,
            "source_digest": cp.source_digest,
        }
        assert store.get_view(VIEW_KIND, sid, str(cp.checkpoint)) is not None
        again = next(r.seq for r in records if r.event.content == Text(text="again"))
        offloaded = {
            r.seq
            for r in records
            if isinstance(c := r.event.content, FunctionResponse) and c.blob is not None
        }
    rows = out["events"]
    assert [r["seq"] for r in rows] == list(range(1, len(records) + 1))
    assert all(set(r) == {"seq", "kind", "inclusion", "why"} for r in rows)
    by = {r["seq"]: r for r in rows}
    assert {r["inclusion"] for r in rows} == {
        "included",
        "placeholder",
        "covered",
        "hidden",
        "skipped",
    }
    assert all(by[s]["inclusion"] == "covered" for s in range(1, cp.watermark + 1))
    assert all(cp.checkpoint in by[s]["why"] for s in range(1, cp.watermark + 1))
    # Offloaded results after the watermark are placeholders: newer steps followed each of them.
    tail = sorted(s for s in offloaded if s > cp.watermark)
    assert tail
    assert [by[s]["inclusion"] for s in tail] == ["placeholder"] * len(tail)
    assert "offloaded" in by[tail[0]]["why"]
    hidden = [r for r in rows if r["inclusion"] == "hidden"]
    assert {r["kind"] for r in hidden} >= {
        "model_request",
        "tool_dispatch",
        "compaction",
        "turn_ended",
    }
    skipped = [(r["kind"], r["why"]) for r in rows if r["inclusion"] == "skipped"]
    assert skipped == [
        ("function_call", "no committed outcome yet: a call is only sent with its result"),
    ]
    assert (by[again]["kind"], by[again]["inclusion"]) == ("text", "included")
    # The messages open with the checkpoint summary.
    assert out["messages"][0]["role"] == "user"
    assert out["messages"][0]["text"].startswith(
        f"[Summary of this session's events 1–{cp.watermark};"
    )


@pytest.mark.heavy
def test_context_shows_the_request_the_model_was_sent(tmp_path: Path, workspace: Path) -> None:
    # The turn fails at a model call right after committing its digest: `bubu context` then shows
    # that same request (same digest, same estimate).
    db = tmp_path / "bubu.db"
    script = _noisy_script(tmp_path, 10, [{"error": {"status": 400, "message": "refused"}}])
    done = bubu(
        db,
        "run",
        "make noise",
        "-w",
        str(workspace),
        "-m",
        f"scripted:{script}",
        "--yes",
        "--context-window",
        WINDOW,
    )
    assert done.returncode != 0
    sid = _session(db)
    with SQLiteStore(db) as store:
        records = store.read(sid)
        *_, (_, sent) = model_requests(records)
        ((_, end),) = notes(records, TurnEnded)
    assert end.reason == "failed"

    out = json.loads(bubu(db, "context", sid, "--json", "--context-window", WINDOW).stdout)
    assert out["request_digest"] == sent.request_digest
    assert out["estimated_tokens"] == sent.estimated_tokens
    assert (out["checkpoint"] or {}).get("key") == sent.checkpoint

    text = bubu(db, "context", sid, "--context-window", WINDOW)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"{sid} · next request {sent.request_digest[:16]}")


@pytest.mark.heavy
def test_a_crash_in_the_middle_of_a_compaction_is_recovered(
    tmp_path: Path, workspace: Path
) -> None:
    db = tmp_path / "bubu.db"
    script = _noisy_script(tmp_path, 12, [{"text": "all done"}])
    run = ["-m", f"scripted:{script}", "--yes", "--context-window", WINDOW]
    crashed = bubu(db, "run", "make noise", "-w", str(workspace), *run, failpoint="mid_compaction")
    assert crashed.returncode == -9, crashed.stderr
    sid = _session(db)
    with SQLiteStore(db) as store:
        before = store.read(sid)
        # Killed after the summary came back, before it was validated, stored or noted.
        assert compactions(before) == []
        assert store.drop_views(sid, VIEW_KIND) == 0  # no checkpoint was cached
        assert notes(before, TurnEnded) == []

    recovered = bubu(db, "recover", sid, *run, "--json")
    assert recovered.returncode == 0, recovered.stderr
    verified = bubu(db, "verify", sid, "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr

    with SQLiteStore(db) as store:
        after = store.read(sid)
        assert [r.event for r in after[: len(before)]] == [r.event for r in before]
        ((_, end),) = notes(after, TurnEnded)
        assert end.reason == "completed"
        cps = compactions(after)
        assert cps
        assert all(n.ok for _, n in cps)
        view = store.get_view(VIEW_KIND, sid, str(cps[0][1].checkpoint))
        assert view is not None
        # Each command ran once: none was re-run by the recovery (the crash was not in a tool).
        outcomes = [c for r in after if isinstance(c := r.event.content, FunctionResponse)]
        assert len(outcomes) == 12
        assert not any(o.result.startswith("interrupted") for o in outcomes)
        later = [n for s, n in model_requests(after) if s > cps[0][0]]
        assert later
        assert all(n.checkpoint is not None for n in later)
