"""Rewind and search in a real Chromium: the button on a turn shows the preview, a file changed
by hand is reported, confirming restores the files and opens the fork; the session search finds
a session by what a tool said, with a snippet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from bubu.api import Agent
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


def test_a_turn_is_rewound_from_its_button(tmp_path: Path, page: Page) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_bytes(b"alpha\n")
    (ws / "b.txt").write_bytes(b"beta\n")
    script = tmp_path / "m.jsonl"
    lines = [
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "a.txt", "content": "ALPHA\n"}},
                {"name": "write_file", "arguments": {"path": "b.txt", "content": "BETA\n"}},
                {
                    "name": "write_file",
                    "arguments": {"path": "c.txt", "content": "zebra crossing\n"},
                },
            ]
        },
        {"text": "wrote them"},
    ]
    script.write_text("".join(json.dumps(x) + "\n" for x in lines))
    db = tmp_path / "bubu.db"
    with Agent(model=f"scripted:{script}", store=db, workspace=ws) as agent:
        sid = agent.run("change the files").session
    (ws / "b.txt").write_bytes(b"by hand\n")
    store = SQLiteStore(db)
    try:
        with Server(create_app(store, token=TOKEN, workspace=str(tmp_path), recover=False)) as srv:
            page.goto(f"{srv.base}/?token={TOKEN}#/")
            page.fill("#search", '"created c.txt"')
            row = page.locator(f"#sessions-body tr[data-id='{sid}']")
            expect(row).to_be_visible()
            expect(row.locator(".snippet")).to_contain_text("created c.txt")
            page.fill("#search", 'NEAR( "')  # FTS5 syntax is taken as words: no match, no error
            expect(page.locator("#sessions-empty")).to_have_text("No session matches.")

            page.goto(f"{srv.base}/?token={TOKEN}#/s/{sid}")
            page.locator(".msg.user button.rewind").first.click()
            dlg = page.locator("dialog#rewind")
            expect(dlg).to_be_visible()
            expect(dlg.locator("li[data-path='a.txt']")).to_have_attribute("data-action", "restore")
            expect(dlg.locator("li[data-path='b.txt']")).to_have_attribute("data-action", "changed")
            expect(dlg.locator("li[data-path='c.txt']")).to_have_attribute("data-action", "delete")
            dlg.locator("#rewind-confirm").click()
            expect(dlg).to_be_hidden()
            page.wait_for_url(lambda url: f"#/s/{sid}" not in url)
            fork = page.url.rsplit("/", 1)[-1]
            assert fork != sid
            assert store.session(fork).workspace == str(ws.resolve())
    finally:
        store.close()
    assert (ws / "a.txt").read_bytes() == b"alpha\n"
    assert (ws / "b.txt").read_bytes() == b"by hand\n"  # reported and left alone
    assert not (ws / "c.txt").exists()
