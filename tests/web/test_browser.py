"""End to end in a real headless Chromium (Debian's `chromium`, driven by Playwright) against a
real uvicorn server: the sessions list, a session recovered after a SIGKILL with its notice,
dismissing it, approving a permission request, live updates, and the token.

Screenshots of the main views go to `tmp_path`; set BUBU_SCREENSHOTS=DIR to keep them (the ones in
docs/screenshots were made with BUBU_SCREENSHOTS=docs/screenshots).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from bubu.log.sqlite import SQLiteStore
from bubu.projections.status import fold_status
from bubu.web import create_app

from .scenarios import (
    TOKEN,
    Crashed,
    Server,
    backup,
    bubu,
    clean_env,
    run_scripted,
    write_script,
)

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

expect.set_options(timeout=15_000)


@dataclass(frozen=True, slots=True)
class Site:
    """The server under test and what it serves."""

    base: str
    store: SQLiteStore
    crashed: Crashed
    root: Path

    def url(self, fragment: str = "/") -> str:
        """The page URL with the token, opening `#fragment`."""
        return f"{self.base}/?token={TOKEN}#{fragment}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, crashed: Crashed) -> Iterator[Site]:
    """A UI over the recovered session plus three finished ones, served by uvicorn on 127.0.0.1."""
    root = tmp_path_factory.mktemp("site")
    backup(crashed.recovered_db, root / "bubu.db")
    store = SQLiteStore(root / "bubu.db")
    run_scripted(
        store,
        root,
        "cli-tool",
        "Add a --verbose flag to the command line",
        [
            {"text": "Reading the CLI.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "The flag is in place and documented."},
        ],
    )
    run_scripted(
        store,
        root,
        "driver",
        "Upgrade the database driver",
        [{"error": {"status": 401, "message": "invalid API key"}}],
    )
    run_scripted(
        store,
        root,
        "numbers",
        "Print the numbers up to 500",
        [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": "seq 1 500"}}]},
            {"text": "Printed them."},
        ],
    )
    app = create_app(store, token=TOKEN, workspace=str(root))
    try:
        with Server(app) as server:
            yield Site(base=server.base, store=store, crashed=crashed, root=root)
    finally:
        store.close()


@pytest.fixture(scope="module")
def browser(site: Site) -> Iterator[Browser]:
    """Headless Chromium (torn down before the server, so no stream stays open)."""
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context and page; the page must not raise a script error."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield pg
    finally:
        context.close()
    assert errors == []


def shot(page: Page, tmp_path: Path, name: str, *, full_page: bool = False) -> None:
    """Save a screenshot (kept in BUBU_SCREENSHOTS when set)."""
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=full_page)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("BUBU_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / name)


def test_a_page_without_the_token_shows_nothing_but_how_to_get_in(
    browser: Browser, site: Site
) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(site.base + "/")
        assert response is not None
        assert response.status == 200  # the shell holds no secret; the API refuses
        expect(page.locator("#locked")).to_contain_text("needs its access token")
        expect(page.locator("#sessions")).to_have_count(0)
        assert page.request.get(site.base + "/api/sessions").status == 401
        page.goto(site.base + "/#token=not-the-token")
        page.reload()
        expect(page.locator("#locked")).to_contain_text("The access token is wrong")
    finally:
        context.close()


def test_the_sessions_list(page: Page, site: Site, tmp_path: Path) -> None:
    page.goto(site.url())
    rows = page.locator("#sessions-body tr")
    expect(rows).to_have_count(4)
    crashed = rows.filter(has_text="Fix the greeting")
    expect(crashed.locator(".badge")).to_have_text("completed")
    expect(crashed.locator(".flag.notice")).to_have_text("recovered")
    expect(rows.filter(has_text="Upgrade the database driver").locator(".badge")).to_have_text(
        "failed"
    )
    assert "token=" not in page.url  # the token left the address bar; the page keeps it
    shot(page, tmp_path, "sessions.png")

    page.select_option("#status-filter", "failed")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Upgrade the database driver")
    page.select_option("#status-filter", "")
    page.fill("#search", "greeting")
    expect(rows).to_have_count(1)
    crashed.locator("a.title").click()
    expect(page.locator(".session h1")).to_have_text(
        "Fix the greeting in app.py and write the release notes"
    )


def test_a_recovered_session_shows_the_notice_until_dismissed(
    page: Page, site: Site, tmp_path: Path
) -> None:
    sid = site.crashed.session
    page.goto(site.url(f"/s/{sid}"))
    notice = page.locator("#recovery-notice")
    expect(notice).to_contain_text("Recovered after a crash")
    expect(notice).to_contain_text("Awaits your review")
    expect(notice).to_contain_text("run_command sleep 2")
    write = notice.locator("details.review", has_text="write_file NOTES.md")
    expect(write).to_contain_text("matches neither recorded hash")
    expect(write.locator("pre.diff .add")).to_contain_text(["+- Fix the greeting typo."])
    expect(page.locator(".tool", has_text="sleep 2").locator(".tool-status")).to_have_text(
        "interrupted"
    )
    page.set_viewport_size({"width": 1280, "height": 1180})
    shot(page, tmp_path, "session-recovery.png")
    edit = notice.locator("details.review", has_text="edit_file app.py")
    edit.locator("summary").click()
    expect(edit).to_contain_text("the file now has the intended content")

    page.click("#dismiss")
    expect(notice).to_have_count(0)
    page.reload()
    expect(page.locator(".note", has_text="recovery notice dismissed")).to_be_visible()
    expect(page.locator("#recovery-notice")).to_have_count(0)
    assert fold_status(site.store.read(sid)).notice_dismissed


def _new_task(
    page: Page, site: Site, task: str, ws: Path, spec: str, *, allow: str = "", sandbox: str = ""
) -> None:
    """Start a task through the page's new-task form (`sandbox`: a mode to pick, else the
    default)."""
    page.goto(site.url())
    page.click("#new-task-open")
    page.fill("#nt-task", task)
    page.fill("#nt-workspace", str(ws))
    page.fill("#nt-model", spec)
    page.fill("#nt-allow", allow)
    if sandbox:
        page.select_option("#nt-sandbox", sandbox)
    page.click("#new-task-start")


@pytest.mark.heavy
def test_approve_a_permission_request_and_see_the_tool_run(
    page: Page, site: Site, tmp_path: Path
) -> None:
    ws = site.root / "greeter-app"
    ws.mkdir()
    spec = write_script(
        tmp_path / "perm.jsonl",
        [
            {
                "text": "I'll run the greeting script to check its output.",
                "tool_calls": [
                    {"name": "run_command", "arguments": {"command": "echo hello-from-bubu"}}
                ],
            },
            {"text": "It printed the greeting, so the script works."},
        ],
    )
    _new_task(
        page, site, "Check that the greeting script prints its greeting", ws, spec, sandbox="off"
    )
    card = page.locator(".perm")
    expect(card.locator(".perm-command li")).to_have_text(["echo hello-from-bubu"])
    expect(page.locator(".badge").first).to_have_text("running")
    shot(page, tmp_path, "permission.png")

    card.locator("button.approve").click()
    tool = page.locator(".tool", has_text="echo hello-from-bubu")
    expect(tool.locator(".tool-status")).to_have_text("completed")
    expect(tool.locator("pre.result")).to_contain_text("hello-from-bubu")
    expect(page.locator(".msg.assistant .text").last).to_have_text(
        "It printed the greeting, so the script works."
    )
    expect(card).to_have_count(0)
    expect(page.locator(".session-head .badge")).to_have_text("completed")


@pytest.mark.heavy
def test_the_card_shows_a_chained_line_the_allow_list_did_not_cover(
    page: Page, site: Site, tmp_path: Path
) -> None:
    ws = site.root / "chained"
    ws.mkdir()
    spec = write_script(
        tmp_path / "chained.jsonl",
        [
            {
                "tool_calls": [
                    {"name": "run_command", "arguments": {"command": "pytest -q\ntouch pwned"}}
                ]
            },
            {"text": "Denied."},
        ],
    )
    _new_task(page, site, "Run the tests", ws, spec, allow="pytest*", sandbox="off")
    card = page.locator(".perm")
    expect(card.locator(".perm-command li")).to_have_text(["pytest -q⏎", "touch pwned"])
    expect(card).to_contain_text("2 lines")
    expect(card).to_contain_text("`touch pwned` matches no --allow pattern")
    card.locator("button.deny").click()
    expect(page.locator(".session-head .badge")).to_have_text("completed")
    assert not (ws / "pwned").exists()


@pytest.mark.heavy
def test_a_protected_write_waits_for_a_person_on_the_page(
    page: Page, site: Site, tmp_path: Path
) -> None:
    ws = site.root / "protected"
    (ws / ".git").mkdir(parents=True)
    spec = write_script(
        tmp_path / "protected.jsonl",
        [
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": ".git/config", "content": "x"}}
                ]
            },
            {"text": "Written."},
        ],
    )
    _new_task(page, site, "Set up the repository", ws, spec, allow="*")
    card = page.locator(".perm.protected")
    expect(card).to_contain_text("Protected path: your approval needed")
    expect(card).to_contain_text(".git/config is a protected path")
    card.locator("button.approve").click()
    expect(page.locator(".session-head .badge")).to_have_text("completed")
    assert (ws / ".git" / "config").read_text() == "x"


@pytest.mark.heavy
def test_a_new_task_with_an_allow_list_runs_the_command_without_asking(
    page: Page, site: Site, tmp_path: Path
) -> None:
    ws = site.root / "allow-listed"
    ws.mkdir()
    spec = write_script(
        tmp_path / "allowed.jsonl",
        [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": "echo allowed-run"}}]},
            {"text": "Ran it without asking."},
        ],
    )
    _new_task(
        page,
        site,
        "Run the allowed command",
        ws,
        spec,
        allow="pytest*, echo allowed-*",
        sandbox="off",
    )
    tool = page.locator(".tool", has_text="echo allowed-run")
    expect(tool.locator(".tool-status")).to_have_text("completed")
    expect(page.locator(".msg.assistant .text").last).to_have_text("Ran it without asking.")
    expect(page.locator(".perm")).to_have_count(0)
    expect(page.locator(".session-head .badge")).to_have_text("completed")


@pytest.mark.heavy
def test_stop_on_the_page_stops_a_turn_run_by_the_cli(
    page: Page, site: Site, tmp_path: Path
) -> None:
    ws = site.root / "cli-run"
    ws.mkdir()
    spec = write_script(
        tmp_path / "cli.jsonl",
        [
            {
                "text": "Waiting on the slow job.",
                "tool_calls": [{"name": "run_command", "arguments": {"command": "sleep 60"}}],
            },
            {"text": "done"},
        ],
    )
    proc = subprocess.Popen(
        bubu(
            site.root / "bubu.db",
            "run",
            "Wait for the slow job",
            "-w",
            str(ws),
            "-m",
            spec,
            "--yes",
        ),
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        page.goto(site.url())
        row = page.locator("#sessions-body tr", has_text="Wait for the slow job")
        expect(row.locator(".badge")).to_have_text("running")
        row.locator("a.title").click()
        expect(page.locator(".tool", has_text="sleep 60")).to_be_visible()
        page.click("#stop")
        expect(page.locator(".session-head .badge")).to_have_text("stopped")
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 3, out + err  # the CLI's turn ended as Ctrl-C would end it
        assert "● turn stopped: stopped by the user" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.heavy
def test_a_running_session_updates_without_a_reload(page: Page, site: Site, tmp_path: Path) -> None:
    ws = site.root / "slow"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    words = " ".join(f"step{i}" for i in range(20))
    spec = write_script(
        tmp_path / "slow.jsonl",
        [
            {
                "text": "Reading the file first.",
                "delay_s": 0.5,
                "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}],
            },
            {
                "text": f"Now listing the files: {words}",
                "delay_s": 1.5,
                "tool_calls": [{"name": "list_files", "arguments": {}}],
            },
            {"text": "All done.", "delay_s": 0.3},
        ],
    )
    page.goto(site.url())
    made = page.request.post(
        f"{site.base}/api/sessions",
        data=json.dumps({"task": "Walk slowly", "workspace": str(ws), "model": spec}),
        headers={"content-type": "application/json", "authorization": f"Bearer {TOKEN}"},
    )
    assert made.status == 201, made.text()
    sid = made.json()["session"]
    page.goto(f"{site.base}/#/s/{sid}")  # no token in the URL: the tab's sessionStorage has it
    expect(page.locator(".session-head .badge")).to_have_text("running")
    page.evaluate("window.__still_the_same_page = true")
    expect(page.locator("#live")).to_be_visible()
    expect(page.locator(".msg.assistant .text").last).to_have_text("All done.")
    expect(page.locator(".session-head .badge")).to_have_text("completed")
    expect(page.locator(".tool.status-completed")).to_have_count(2)
    assert page.evaluate("window.__still_the_same_page") is True

    page.click("a.tab[data-tab=log]")
    expect(page.locator("#log-body tr").last.locator("td").first).to_have_text(
        str(site.store.head(sid).high_water)
    )


def test_a_large_result_opens_in_the_paged_viewer(page: Page, site: Site) -> None:
    page.goto(site.url())
    page.locator("#sessions-body tr", has_text="numbers up to 500").locator("a.title").click()
    card = page.locator(".tool", has_text="seq 1 500")
    expect(card.locator("pre.result")).to_contain_text("30")
    card.locator("button.open-result").click()
    viewer = page.locator("#viewer")
    expect(viewer.locator("#viewer-meta")).to_contain_text("501 lines")
    expect(viewer.locator("#viewer-page")).to_have_text("lines 1–200")
    viewer.locator("#viewer-next").click()
    expect(viewer.locator("#viewer-page")).to_have_text("lines 201–400")
    expect(viewer.locator(".line").first).to_have_text("201201")  # the line number, then the line
    viewer.locator("#viewer-close").click()
    expect(viewer).to_be_hidden()


@pytest.mark.heavy
def test_the_page_shows_a_turn_waiting_for_its_provider(
    page: Page, site: Site, tmp_path: Path
) -> None:
    from longrun.outage import serve_outages

    ws = site.root / "outage"
    ws.mkdir()
    with serve_outages() as server:
        server.outage(600.0, retry_after="2")
        proc = subprocess.Popen(
            bubu(
                site.root / "bubu.db",
                "run",
                "Ride out the outage",
                "-w",
                str(ws),
                "-m",
                "openai:gpt-outage",
                "--base-url",
                server.openai(),
            ),
            env={**clean_env(), "OPENAI_API_KEY": "sk-browser-outage-0123456789"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            page.goto(site.url())
            row = page.locator("#sessions-body tr", has_text="Ride out the outage")
            expect(row.locator(".badge")).to_have_text("running")
            row.locator("a.title").click()
            waiting = page.locator("#waiting")
            expect(waiting).to_contain_text("waiting for the provider: attempt ")
            expect(waiting).to_contain_text("(503)")
            expect(waiting).to_contain_text("temporarily unavailable")
            shot(page, tmp_path, "session-waiting.png")
            page.click("#stop")
            expect(page.locator(".session-head .badge")).to_have_text("stopped")
            expect(page.locator("#waiting")).to_have_count(0)
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 3, out + err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


NOTIFICATIONS = """
window.__notes = [];
window.Notification = class {
  constructor(title, options) { window.__notes.push({ title, body: options && options.body }); }
  static get permission() { return window.__permission || "default"; }
  static requestPermission() { window.__permission = "granted"; return Promise.resolve("granted"); }
};
"""
"""A Notification API that records what the page shows (headless Chromium has no desktop)."""


@pytest.mark.heavy
def test_the_page_asks_on_a_click_and_notifies_when_a_turn_ends(
    browser: Browser, site: Site
) -> None:
    context = browser.new_context()
    try:
        context.add_init_script(NOTIFICATIONS)
        pg = context.new_page()
        pg.goto(site.url("/"))
        ask = pg.locator("#notify-toggle")
        expect(ask).to_be_visible()
        ask.click()
        expect(ask).to_be_hidden()
        pg.wait_for_timeout(1000)  # the first round only learns what is there already
        assert pg.evaluate("window.__notes") == []
        run_scripted(site.store, site.root, "notify", "Say hello when done", [{"text": "hello"}])
        pg.wait_for_function("() => window.__notes.length > 0", timeout=15_000)
        notes = pg.evaluate("window.__notes")
        assert notes == [{"title": "Bubu · Turn completed", "body": "Say hello when done"}]
    finally:
        context.close()


@pytest.mark.heavy
def test_the_session_page_shows_the_plan_and_the_workspace_memory(
    page: Page, site: Site, tmp_path: Path
) -> None:
    run_scripted(
        site.store,
        site.root,
        "planner",
        "Remember the build",
        [
            {
                "tool_calls": [
                    {"name": "remember", "arguments": {"key": "build", "text": "make -j2"}}
                ]
            },
            {"text": "Noted."},
        ],
    )
    steps = [
        {"text": "read the code", "status": "completed"},
        {"text": "fix the bug", "status": "in_progress"},
    ]
    run_scripted(
        site.store,
        site.root,
        "planner",
        "Plan the fix",
        [
            {"tool_calls": [{"name": "update_plan", "arguments": {"items": steps}}]},
            {"text": "Planned."},
        ],
    )
    page.goto(site.url())
    page.locator("#sessions-body tr", has_text="Plan the fix").locator("a.title").click()
    plan = page.locator("#plan")
    expect(plan.locator(".panel-head")).to_contain_text("1/2")
    expect(plan.locator("li")).to_have_count(2)
    expect(plan.locator("li.in_progress")).to_have_text("▸fix the bug")
    memory = page.locator("#memory")
    expect(memory.locator("summary")).to_contain_text("1 note")
    memory.locator("summary").click()
    expect(memory.locator("dt")).to_have_text("build")
    expect(memory.locator("dd")).to_have_text("make -j2")
    shot(page, tmp_path, "plan-memory.png")
    page.goto(site.url())
    page.locator("#sessions-body tr", has_text="numbers up to 500").locator("a.title").click()
    expect(page.locator(".session h1")).to_have_text("Print the numbers up to 500")
    expect(page.locator("#plan")).to_have_count(0)
    expect(page.locator("#memory")).to_have_count(0)


@pytest.mark.heavy
def test_the_session_page_lists_the_running_background_processes(
    page: Page, site: Site, tmp_path: Path
) -> None:
    from bubu.engine.processes import end_session

    start = {
        "name": "run_command",
        "arguments": {"command": "exec sleep 300", "background": True, "keep": "session"},
    }
    sid = run_scripted(
        site.store,
        site.root,
        "server",
        "Start the server",
        [{"tool_calls": [start]}, {"text": "It runs."}],
    )
    try:
        page.goto(site.url())
        page.locator("#sessions-body tr", has_text="Start the server").locator("a.title").click()
        panel = page.locator("#processes")
        expect(panel.locator(".panel-head")).to_contain_text("1 running")
        expect(panel.locator("li")).to_contain_text("bg-1 exec sleep 300")
        expect(panel.locator("li")).to_contain_text("kept for the session")
        shot(page, tmp_path, "processes.png")
    finally:
        end_session(sid)


def test_a_command_of_two_lines_stays_two_lines_in_its_card_and_the_rewind_dialog(
    page: Page, site: Site
) -> None:
    two = "echo checked\necho cleaned"
    run_scripted(
        site.store,
        site.root,
        "two-lines",
        "Check, then clean",
        [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": two}}]},
            {"text": "Both ran."},
        ],
    )
    page.goto(site.url())
    page.locator("#sessions-body tr", has_text="Check, then clean").locator("a.title").click()
    expect(page.locator(".tool-arg").first).to_have_text("echo checked⏎ echo cleaned")
    page.locator(".msg.user button.rewind").first.click()
    expect(page.locator("#rewind .rw-commands li")).to_contain_text(
        "run_command echo checked⏎ echo cleaned"
    )
