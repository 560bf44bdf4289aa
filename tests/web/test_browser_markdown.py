"""The model's text is shown as Markdown in a real headless Chromium, and the HTML and script a
model can write (or be made to write by what it read) still shows as text and never runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from bubu.engine.session import new_session, start_turn
from bubu.log.sqlite import SQLiteStore
from bubu.web import create_app

from .scenarios import TOKEN, Server, host_for, write_script
from .test_browser import ARGS, CHROMIUM

HOSTILE = (
    'Look: <img src=x onerror="window.__pwned = 1"> and <script>window.__pwned = 2</script> '
    "and [a link](javascript:window.__pwned=3) and ![pic](http://127.0.0.1:9/track.png)"
)
MARKDOWN = (
    "## Summary\n\nThe fix is **done** and `make test` passes:\n\n"
    "- one\n- two\n\n```python\nprint('hi')\n```\n\n"
    "| file | lines |\n|---|---|\n| a.py | 3 |\n\nSee [the docs](https://example.com/docs)."
)


@pytest.fixture(scope="module")
def session_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    """The page of a finished session of two turns: the model wrote Markdown, then hostile HTML."""
    root = tmp_path_factory.mktemp("markdown")
    (root / "ws").mkdir()
    store = SQLiteStore(root / "bubu.db")
    spec = write_script(root / "md.jsonl", [{"text": MARKDOWN}, {"text": HOSTILE}])
    info = new_session(store, task="Explain the fix", workspace=root / "ws", model=spec)
    start_turn(host_for(store, spec), info, "Explain the fix")
    start_turn(host_for(store, spec), info, "Show me the page you read")
    app = create_app(store, token=TOKEN, workspace=str(root))
    try:
        with Server(app) as server, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                page = browser.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(f"{server.base}/?token={TOKEN}#/s/{info.id}")
                yield page
                assert errors == []
            finally:
                browser.close()
    finally:
        store.close()


def test_the_models_markdown_is_rendered(session_page: Page) -> None:
    text = session_page.locator(".msg.assistant .text.md").first
    expect(text.locator("h2")).to_have_text("Summary")
    expect(text.locator("strong")).to_have_text("done")
    expect(text.locator("li")).to_have_count(2)
    expect(text.locator("pre code")).to_have_text("print('hi')\n")
    expect(text.locator("td").first).to_have_text("a.py")
    link = text.locator("a")
    expect(link).to_have_attribute("href", "https://example.com/docs")
    expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")


def test_html_and_script_in_the_models_text_show_as_text_and_never_run(
    session_page: Page,
) -> None:
    hostile = session_page.locator(".msg.assistant", has_text="Look:")
    expect(hostile).to_contain_text('<img src=x onerror="window.__pwned = 1">')
    expect(hostile).to_contain_text("<script>window.__pwned = 2</script>")
    assert hostile.locator("img, script, a[href^='javascript']").count() == 0
    assert session_page.evaluate("window.__pwned") is None
