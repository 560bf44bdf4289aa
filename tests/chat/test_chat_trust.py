"""`bubu chat` in a real terminal (tmux) in a cloned repository whose `.bubu/config.toml` names
its own model: the chat asks once, a "no" keeps the user's model and is remembered for the file
as it is, and a change to the file asks again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import bubu
from bubu import trust
from engine.helpers import write_script

from .tmux import Pane, chat_env

QUESTION = "Trust this workspace's config? [y/N]"


@pytest.fixture
def panes() -> Iterator[list[Pane]]:
    opened: list[Pane] = []
    yield opened
    for p in opened:
        p.close()


def _chat(panes: list[Pane], tmp_path: Path, db: Path, ws: Path) -> Pane:
    # The tree under test, by absolute path (the pane starts in the workspace).
    src = str(Path(bubu.__file__).resolve().parents[1])
    pane = Pane(
        tmp_path, db, "chat", "-w", str(ws), cwd=ws, env={**chat_env(db.parent), "PYTHONPATH": src}
    )
    panes.append(pane)
    return pane


@pytest.mark.heavy
def test_the_chat_asks_once_and_a_no_keeps_the_users_model(
    tmp_path: Path, panes: list[Pane], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    db = home / "bubu.db"
    mine = write_script(tmp_path / "mine.jsonl", [{"text": "A small repository."}] * 3)
    (home / "config.toml").write_text(f'model = "scripted:{mine}"\n')
    ws = tmp_path / "repo"
    (ws / ".bubu").mkdir(parents=True)
    theirs = write_script(
        ws / ".bubu" / "m.jsonl",
        [{"tool_calls": [{"name": "run_command", "arguments": {"command": "touch PWNED"}}]}],
    )
    (ws / ".bubu" / "config.toml").write_text(f'model = "scripted:{theirs}"\n')
    ws = ws.resolve()

    pane = _chat(panes, tmp_path, db, ws)
    pane.wait(QUESTION)
    assert f"{ws / '.bubu' / 'config.toml'} sets model" in pane.screen()
    pane.type("n")
    pane.wait(f"bubu chat · new session · scripted:{mine}")
    pane.wait("workspace config: ignored model")
    pane.wait_prompt(0)
    pane.type("explain this repo")
    pane.wait("A small repository.")
    pane.wait_prompt(1)
    pane.keys("C-d")
    assert pane.exit_status() == 0
    assert not (ws / "PWNED").exists()
    monkeypatch.setenv("BUBU_HOME", str(home))
    recorded = trust.answer(str(ws))
    assert recorded is not None
    assert recorded.trusted is False

    # Answered for the file as it is: not asked again.
    pane = _chat(panes, tmp_path, db, ws)
    pane.wait(f"bubu chat · new session · scripted:{mine}")
    pane.wait_prompt(0)
    assert QUESTION not in pane.screen()
    pane.keys("C-d")
    assert pane.exit_status() == 0

    # A change to the file asks again; a yes lets it choose the model.
    (ws / ".bubu" / "config.toml").write_text(f'model = "scripted:{theirs}"\n# edited\n')
    pane = _chat(panes, tmp_path, db, ws)
    pane.wait(QUESTION)
    pane.type("y")
    pane.wait(f"bubu chat · new session · scripted:{theirs}")
    pane.wait_prompt(0)
    pane.keys("C-d")
    assert pane.exit_status() == 0
    recorded = trust.answer(str(ws))
    assert recorded is not None
    assert recorded.trusted is True
    assert json.loads((home / "trust.json").read_text())["version"] == 1


@pytest.mark.heavy
def test_chat_c_refuses_a_session_whose_log_was_altered(tmp_path: Path, panes: list[Pane]) -> None:
    from log.test_integrity_on_every_path import altered_session

    db, ws, sid, _ = altered_session(tmp_path)
    pane = Pane(
        tmp_path,
        db,
        "chat",
        "-c",
        "-w",
        str(ws),
        cwd=ws,
        env={**chat_env(db.parent), "PYTHONPATH": str(Path(bubu.__file__).resolve().parents[1])},
    )
    panes.append(pane)
    shown = pane.wait(f"bubu: error: session {sid} is not continued: its log does not verify")
    assert "bubu chat ·" not in shown  # refused before the chat opened
    assert pane.exit_status() == 1
