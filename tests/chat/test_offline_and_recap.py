"""What a newcomer meets in `bubu chat`: the offline chat docs/interactive.md shows works as shown,
the message without a model points at it, and `-c` recaps the session it continues."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu.cli.agentcmds import default_model
from bubu.errors import ConfigError
from engine.cli import bubu
from engine.helpers import write_script

from .tmux import Pane, chat_env

DOC = Path(__file__).resolve().parents[2] / "docs" / "interactive.md"


@pytest.fixture
def panes() -> Iterator[list[Pane]]:
    opened: list[Pane] = []
    yield opened
    for p in opened:
        p.close()


def _pane(panes: list[Pane], tmp_path: Path, *args: str, cwd: Path) -> Pane:
    db = tmp_path / "bubu.db"
    pane = Pane(tmp_path, db, *args, cwd=cwd, env=chat_env(db.parent))
    panes.append(pane)
    return pane


def test_the_offline_chat_of_the_docs_runs_as_shown(tmp_path: Path, panes: list[Pane]) -> None:
    section = DOC.read_text().split("## Offline: a scripted chat", 1)[1]
    script = re.search(r"cat > answers\.jsonl <<'EOF'\n(.*?)\nEOF\n", section, re.S)
    assert script is not None
    ws = tmp_path / "try"
    ws.mkdir()
    (ws / "answers.jsonl").write_text(script.group(1) + "\n")
    pane = _pane(panes, tmp_path, "chat", "-m", "scripted:answers.jsonl", cwd=ws)
    pane.wait("bubu chat · new session · scripted:answers.jsonl")
    pane.wait_prompt(0)
    pane.type("hi")
    pane.wait("each line of answers.jsonl is one answer.")
    pane.wait_prompt(1)
    pane.type("what files are here?")
    shown = pane.wait("That is every file here.")
    assert "⏺ list_files" in shown
    assert "⎿ answers.jsonl" in shown


def test_no_model_and_no_key_points_at_the_offline_chat(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BUBU_MODEL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError) as failed:
        default_model()
    said = str(failed.value)
    assert "`bubu chat -m scripted:answers.jsonl` chats offline" in said
    assert "docs/interactive.md#offline-a-scripted-chat" in said
    assert "`bubu demo`" in said
    assert "\n" not in said


@pytest.mark.heavy
def test_chat_c_recaps_the_session_it_continues(tmp_path: Path, panes: list[Pane]) -> None:
    db, ws = tmp_path / "bubu.db", tmp_path / "ws"
    ws.mkdir()
    long = "The answer goes on " + "and on " * 30 + "\nwith a second line."
    script = write_script(
        tmp_path / "s.jsonl",
        [{"text": "first answer"}, {"text": "second"}, {"text": long}, {"text": "unused"}],
    )
    for i, task in enumerate(("task one", "task two", "task three")):
        more = ["-c"] if i else []
        done = bubu(db, "run", task, "-w", str(ws), "-m", f"scripted:{script}", *more)
        assert done.returncode == 0, done.stderr
    pane = _pane(panes, tmp_path, "chat", "-c", cwd=ws)
    shown = pane.wait_prompt(0)
    rows = [r.strip() for r in shown.splitlines()]
    assert "3 messages; the last:" in rows, shown
    start = rows.index("3 messages; the last:")
    assert rows[start + 1 : start + 4] == ["› task two", "second", "› task three"]
    cut = rows[start + 4]
    assert cut.startswith("The answer goes on and on")
    assert cut.endswith("…")
    assert len(cut) <= 100
    assert "first answer" not in shown
