"""A prompt file, a skill and an `@path` mention used from `bubu chat` in a real terminal (tmux):
Tab completes `/NAME` and `@path`, the prompt file's text is the turn's message, the model reads
the skill with the `skill` tool, and the mentioned file is a recorded `read_file` call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu.events import FunctionCall, FunctionResponse, Text
from bubu.log.sqlite import SQLiteStore
from engine.cli import only_session
from engine.helpers import write_script

from .tmux import Pane, chat_env


@pytest.fixture
def panes() -> Iterator[list[Pane]]:
    made: list[Pane] = []
    yield made
    for p in made:
        p.close()


@pytest.mark.slow
def test_a_prompt_file_a_skill_and_a_mention_from_the_chat(
    tmp_path: Path, panes: list[Pane]
) -> None:
    db, ws = tmp_path / "bubu.db", tmp_path / "ws"
    (ws / ".bubu" / "commands").mkdir(parents=True)
    (ws / ".bubu" / "commands" / "review.md").write_text(
        "---\ndescription: Review a file\n---\nReview $ARGUMENTS carefully.\n"
    )
    (ws / ".agents" / "skills" / "release").mkdir(parents=True)
    (ws / ".agents" / "skills" / "release" / "SKILL.md").write_text(
        "---\nname: release\ndescription: Cut a release.\n---\nTag it, then push the tag.\n"
    )
    (ws / "main.py").write_text("print('the main file')\n")
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [{"name": "skill", "arguments": {"name": "release"}}]},
            {"text": "REVIEWED-IT"},
            {"text": "EXPLAINED-IT"},
        ],
    )
    pane = Pane(
        tmp_path, db, "chat", "-m", f"scripted:{script}", cwd=ws.resolve(), env=chat_env(db.parent)
    )
    panes.append(pane)
    pane.wait_prompt(0)
    pane.type("/rev", enter=False)
    pane.keys("Tab")
    pane.wait(lambda s: s.rstrip().endswith("› /review"))
    pane.type(" main.py")
    pane.wait("REVIEWED-IT")
    pane.wait_prompt(1)
    pane.type("explain @ma", enter=False)
    pane.keys("Tab")
    pane.wait(lambda s: s.rstrip().endswith("› explain @main.py"))
    pane.keys("Enter")
    shown = pane.wait("EXPLAINED-IT")
    assert "attaching main.py (read_file)" in shown
    pane.wait_prompt(2)
    pane.keys("C-d")
    assert pane.exit_status() == 0
    with SQLiteStore(db) as store:
        records = store.read(only_session(db))
    asked = [
        c.text for r in records if r.event.role == "user" and isinstance(c := r.event.content, Text)
    ]
    assert asked == ["Review main.py carefully.", "explain @main.py"]
    results = {c.name: c for r in records if isinstance(c := r.event.content, FunctionResponse)}
    assert "Tag it, then push the tag." in results["skill"].result
    assert "print('the main file')" in results["read_file"].result
    (attached,) = [
        r
        for r in records
        if isinstance(c := r.event.content, FunctionCall) and c.name == "read_file"
    ]
    assert attached.event.author == "host"
