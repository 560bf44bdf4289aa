"""The plan and the remembered keys are in the fact sheet of every checkpoint, so no compaction
loses them; a note's ``memory:KEY`` target is not listed as a changed file."""

from __future__ import annotations

from pathlib import Path

from bubu.engine.session import new_session, start_turn
from bubu.events import CheckpointBody
from bubu.log.sqlite import SQLiteStore

from .helpers import host, model, noisy_lines, noisy_payloads, notes, summary_text, write_script

STEPS = [
    {"text": "read the failing test", "status": "completed"},
    {"text": "fix the parser", "status": "in_progress"},
    {"text": "run the suite", "status": "pending"},
]

SUMMARY = "\n".join(
    f"## {s}\n{s.lower()} of the work so far."
    for s in ("Goal", "Progress", "Decisions", "Files", "Open problems", "Next steps")
)


def test_every_checkpoint_fact_sheet_holds_the_plan_and_the_notes(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    lines: list[dict[str, object]] = [
        {"tool_calls": [{"name": "update_plan", "arguments": {"items": STEPS}}]},
        {"tool_calls": [{"name": "remember", "arguments": {"key": "parser", "text": "LL(1)"}}]},
        *noisy_lines(40),
    ]
    provider = model(write_script(tmp_path / "s.jsonl", lines), summarize=summary_text(SUMMARY))
    ws = tmp_path / "ws"
    ws.mkdir()
    info = new_session(sqlite_store, task="fix the parser", workspace=ws, model=provider.spec)
    h = host(sqlite_store, provider, noisy_payloads(40))
    assert start_turn(h, info, "fix the parser") == "completed"
    bodies = [b for _, b in notes(sqlite_store.read(info.id), CheckpointBody)]
    assert len(bodies) >= 2, "the window forces more than one checkpoint"
    for body in bodies:
        assert (
            "Plan (1/3 completed, from update_plan):\n"
            "- [x] read the failing test\n"
            "- [>] fix the parser\n"
            "- [ ] run the suite"
        ) in body.facts
        assert "Notes remembered (recall them): parser" in body.facts
        assert "memory:" not in body.facts
