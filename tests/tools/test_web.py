"""web_fetch and web_search against a real local HTTP server: the page's Markdown reaches the
model's request; nothing is fetched without network permission or an allow-list naming the host;
a redirect off the allow-list is refused; the search backend's JSON becomes a list of results."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest

from bubu.engine.permissions import Policy
from bubu.engine.session import new_session, start_turn
from bubu.errors import ToolError
from bubu.events import FunctionResponse
from bubu.log.sqlite import SQLiteStore
from bubu.tools import ToolContext, builtin_tools
from bubu.tools.web import WebAccess, check_url, make_web_search, web_fetch, web_tools


@pytest.fixture
def markdown() -> None:
    """HTML becomes Markdown through markdownify (a dependency; skipped where it is missing)."""
    pytest.importorskip("markdownify")


PAGE = b"""<!doctype html><html><head><title>t</title><style>p{color:red}</style>
<script>alert(1)</script></head><body><h1>Release notes</h1>
<p>Version <b>2.0</b> adds <a href="/docs">docs</a>.</p><ul><li>one</li><li>two</li></ul>
</body></html>"""


class _Handler(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        port = self.server.server_port  # type: ignore[attr-defined]
        if self.path == "/away":
            self._send(302, b"", location=f"http://localhost:{port}/page")
        elif self.path == "/here":
            self._send(302, b"", location="/page")
        elif self.path.startswith("/search"):
            q = parse_qs(urlsplit(self.path).query)["q"][0]
            body = {
                "results": [
                    {"title": f"About {q}", "url": "https://example.org/a", "content": "a snippet"},
                    {"title": "no url"},
                ]
            }
            self._send(200, json.dumps(body).encode(), kind="application/json")
        else:
            self._send(200, PAGE, kind="text/html; charset=utf-8")

    def _send(self, status: int, body: bytes, kind: str = "", location: str = "") -> None:
        self.send_response(status)
        if kind:
            self.send_header("content-type", kind)
        if location:
            self.send_header("location", location)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    """A local http.server; its base URL."""
    _Handler.hits = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _run(ctx: ToolContext, url: str, fmt: str = "markdown") -> tuple[str, bool]:
    r = web_fetch.run({"url": url, "format": fmt}, ctx, None)
    return r.output, r.is_error


@pytest.mark.usefixtures("markdown")
def test_html_becomes_markdown_when_the_allow_list_names_the_host(
    server: str, ctx: ToolContext
) -> None:
    out, err = _run(replace(ctx, web_domains=("127.0.0.1",)), server + "/page")
    assert not err, out
    assert "# Release notes" in out
    assert "**2.0**" in out
    assert "[docs](/docs)" in out
    assert "alert(1)" not in out
    assert "color:red" not in out
    assert out.startswith(f"[{server}/page: HTTP 200, text/html,")


def test_without_network_permission_nothing_is_fetched(server: str, ctx: ToolContext) -> None:
    out, err = _run(ctx, server + "/page")
    assert err
    assert "--network" in out
    assert "web_domains" in out
    out, err = _run(replace(ctx, web_domains=("example.org",)), server + "/page")
    assert err
    assert "127.0.0.1 is not in web_domains" in out
    assert _Handler.hits == []


@pytest.mark.usefixtures("markdown")
def test_a_redirect_off_the_allow_list_is_refused_one_on_it_followed(
    server: str, ctx: ToolContext
) -> None:
    allowed = replace(ctx, web_domains=("127.0.0.1",))
    out, err = _run(allowed, server + "/away")
    assert err
    assert "redirects to http://localhost:" in out
    assert "refused" in out
    assert _Handler.hits == ["/away"]
    out, err = _run(allowed, server + "/here")
    assert not err
    assert "# Release notes" in out


def test_the_network_permission_reaches_any_host_and_raw_keeps_the_body(
    server: str, ctx: ToolContext
) -> None:
    out, err = _run(replace(ctx, network=True), server.replace("127.0.0.1", "localhost"), "raw")
    assert not err
    assert "<h1>Release notes</h1>" in out


def test_private_addresses_need_the_host_named_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    from bubu.tools import web

    # A name under an allowed domain that resolves inside (DNS answers as a rebinding one would).
    monkeypatch.setattr(web, "_addresses", lambda host, port: ["10.0.0.7", "::ffff:127.0.0.1"])
    with pytest.raises(ToolError, match="private or loopback"):
        check_url("http://intranet.example.org/", WebAccess(domains=("example.org",)))
    monkeypatch.setattr(web, "_addresses", lambda host, port: ["93.184.215.14"])
    assert check_url("http://www.example.org/", WebAccess(domains=("example.org",))) == (
        "www.example.org"
    )
    assert check_url("http://localhost:1/", WebAccess(domains=("localhost",))) == "localhost"
    with pytest.raises(ToolError, match="only http and https"):
        check_url("file:///etc/passwd", WebAccess(network=True))


def test_the_host_offers_web_tools_only_where_the_settings_let_them_reach_something() -> None:
    assert web_tools(network=False, domains=(), search=None) == []
    assert [
        t.name for t in web_tools(network=False, domains=("a.org",), search="http://s/?q={query}")
    ] == ["web_fetch", "web_search"]
    assert "web_fetch" not in builtin_tools()


def test_web_search_reads_a_searxng_style_backend(server: str, ctx: ToolContext) -> None:
    search = make_web_search(server + "/search?format=json&q={query}")
    r = search.run({"query": "bubu agent"}, ctx, None)
    assert not r.is_error, r.output
    assert "About bubu agent" in r.output
    assert "https://example.org/a" in r.output
    assert "a snippet" in r.output
    assert "no url" not in r.output
    assert _Handler.hits == ["/search?format=json&q=bubu+agent"]


@pytest.mark.usefixtures("markdown")
def test_the_markdown_reaches_the_model_request_and_the_log(server: str, tmp_path: Path) -> None:
    from bubu.engine.session import Host
    from engine.helpers import FAST, call, scripted, write_script

    ws = tmp_path / "ws"
    ws.mkdir()
    model = scripted(
        write_script(
            tmp_path / "m.jsonl",
            [{"tool_calls": [call("web_fetch", url=server + "/page")]}, {"text": "done"}],
        )
    )
    with SQLiteStore(tmp_path / "bubu.db") as store:
        tools = {**builtin_tools(), "web_fetch": web_fetch}
        host = Host(
            store=store,
            provider=model,
            tools=tools,
            policy=Policy(web_domains=("127.0.0.1",)),
            config=FAST,
        )
        info = new_session(store, task="t", workspace=ws, model=model.spec)
        assert start_turn(host, info, "read the notes") == "completed"
        records = store.read(info.id)
    (resp,) = [c for r in records if isinstance(c := r.event.content, FunctionResponse)]
    assert "# Release notes" in resp.result
    assert not resp.is_error
    last = model.requests[-1]
    assert any("# Release notes" in str(m) for m in last.messages)
