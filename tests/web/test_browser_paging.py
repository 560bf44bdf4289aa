"""The paged transcript in a real headless Chromium: a long session opens on its last page,
older pages come on scroll, and a new record reaches the page as a delta on the stream (the page
never fetches the whole transcript again)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from bubu.events import Info, SystemNote, make
from bubu.log.sqlite import SQLiteStore
from bubu.web import create_app

from .scenarios import TOKEN, Server, run_scripted
from .test_browser import ARGS, CHROMIUM

STEPS = 80
"""Steps of the long session: each a text and a tool card, well past one page (100 items)."""

expect.set_options(timeout=15_000)


@pytest.fixture
def long_site(tmp_path: Path) -> Iterator[tuple[str, SQLiteStore, str]]:
    store = SQLiteStore(tmp_path / "bubu.db")
    (tmp_path / "ws").mkdir()
    lines: list[dict[str, Any]] = []
    for i in range(STEPS):
        (tmp_path / "ws" / f"f{i}.txt").write_text(f"file {i}\n")
        call = {"name": "read_file", "arguments": {"path": f"f{i}.txt"}}
        lines.append({"text": f"Reading part {i:03d}.", "tool_calls": [call]})
    sid = run_scripted(store, tmp_path, "ws", "Read every part", [*lines, {"text": "All read."}])
    app = create_app(store, token=TOKEN, workspace=str(tmp_path))
    try:
        with Server(app) as server:
            yield server.base, store, sid
    finally:
        store.close()


@pytest.fixture
def page(long_site: tuple[str, SQLiteStore, str]) -> Iterator[Page]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        pg = context.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        try:
            yield pg
        finally:
            context.close()
            browser.close()
        assert errors == []


def test_a_long_session_opens_on_its_last_page_and_loads_older_ones_on_scroll(
    page: Page, long_site: tuple[str, SQLiteStore, str]
) -> None:
    base, _, sid = long_site
    details: list[str] = []
    page.on(
        "request",
        lambda r: (
            details.append(r.url)
            if f"/api/sessions/{sid}?" in r.url or r.url.endswith(sid)
            else None
        ),
    )
    page.goto(f"{base}/?token={TOKEN}#/s/{sid}")
    items = page.locator("#items")
    expect(items).to_contain_text("All read.")
    expect(items).to_contain_text("Reading part 079.")
    expect(items).not_to_contain_text("Reading part 000.")
    earlier = page.locator("#earlier button")
    expect(earlier).to_have_count(1)
    # Scrolling up to the top brings the older pages, in order, until there are no more.
    for _ in range(5):
        if not earlier.count():
            break
        earlier.first.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
    expect(items).to_contain_text("Reading part 000.")
    expect(items).to_contain_text("Read every part")
    expect(earlier).to_have_count(0)
    texts = items.locator(".text").all_inner_texts()
    parts = [t for t in texts if t.startswith("Reading part")]
    assert parts == [f"Reading part {i:03d}." for i in range(STEPS)]
    # The page asked for its last page once, never for the whole transcript.
    assert details
    assert all("tail=" in u for u in details)
    assert details[0].endswith("?tail=100")


@pytest.mark.heavy
def test_a_new_record_reaches_the_page_as_a_delta(
    page: Page, long_site: tuple[str, SQLiteStore, str]
) -> None:
    base, store, sid = long_site
    page.goto(f"{base}/?token={TOKEN}#/s/{sid}")
    items = page.locator("#items")
    expect(items).to_contain_text("All read.")
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url) if f"/api/sessions/{sid}" in r.url else None)
    page.wait_for_timeout(500)  # the stream is connected
    hw = store.head(sid).high_water
    note = make(
        session=sid,
        role="system",
        author="system",
        ts=1,
        content=SystemNote(note=Info(text="written by another writer")),
    )
    store.append(sid, [note], expect=hw)
    expect(items).to_contain_text("written by another writer")
    expect(items).to_contain_text("Reading part 079.")
    # Only the page's head was fetched again, not the transcript.
    assert all("/stream" in u or "tail=0" in u for u in fetched), fetched
