"""What a turn changed, in a real Chromium: the Changes button on a request shows the paths and
the diff of what its command did, from the workspace snapshots."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from bubu.api import Agent
from bubu.engine.permissions import Policy
from bubu.log.sqlite import SQLiteStore
from bubu.web import create_app

from .scenarios import TOKEN, Server
from .test_browser import ARGS, CHROMIUM

pytestmark = pytest.mark.slow


@pytest.fixture
def page() -> Iterator[Page]:
    """A page of a fresh headless Chromium."""
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b.new_context().new_page()
        finally:
            b.close()


def test_the_changes_button_shows_what_the_turns_command_did(tmp_path: Path, page: Page) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    (ws / "old.txt").write_text("old\n")
    script = tmp_path / "m.jsonl"
    lines = [
        {
            "tool_calls": [
                {"name": "run_command", "arguments": {"command": "echo beta >> a.txt; rm old.txt"}}
            ]
        },
        {"text": "done"},
    ]
    script.write_text("".join(json.dumps(x) + "\n" for x in lines))
    db = tmp_path / "bubu.db"
    with Agent(
        model=f"scripted:{script}", store=db, workspace=ws, policy=Policy(yes=True, sandbox="off")
    ) as agent:
        sid = agent.run("change them").session
    store = SQLiteStore(db)
    try:
        with Server(create_app(store, token=TOKEN, workspace=str(tmp_path), recover=False)) as srv:
            page.goto(f"{srv.base}/?token={TOKEN}#/s/{sid}")
            page.locator(".msg.user button.changes").first.click()
            dlg = page.locator("dialog#diff")
            expect(dlg).to_be_visible()
            expect(dlg.locator(".rw-files")).to_contain_text("modified a.txt (+1 −0)")
            expect(dlg.locator(".rw-files")).to_contain_text("deleted old.txt (−1)")
            expect(dlg.locator("pre.diff")).to_contain_text("+beta")
    finally:
        store.close()
