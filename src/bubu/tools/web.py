"""web_fetch and web_search: the web, read through the network rules of the turn.

`web_fetch{url, format?}` is an HTTP(S) GET. It is allowed only when the turn may use the network
(``--network``: any address) or the host names an allow-list (``web_domains``): then only those
domains (and their subdomains) are fetched, a redirect to any other domain is refused, and a name
that resolves to a private, loopback or link-local address is refused unless the allow-list names
that very host. HTML becomes Markdown (markdownify); the body read is bounded (`MAX_BYTES`), and a
long page is offloaded like any large result. Fetching changes nothing, so the tool is read-only:
after a crash it is simply fetched again.

`web_search{query}` asks a search backend the user configured (``web_search_url``, a URL template
with ``{query}`` answering SearXNG's JSON, ``{"results": [{"title", "url", "content"}]}``); it is
offered only when one is configured. Models with a server-side search of their own (Anthropic's,
the Responses API's) search through it instead (`bubu.providers`).
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import quote_plus, urljoin, urlsplit

from bubu.errors import ToolError
from bubu.tools.base import Tool, ToolContext, ToolResult
from bubu.tools.decorator import tool
from bubu.tools.schema import Arguments

MAX_BYTES = 5 * 1024 * 1024
"""The most of a response body read; the rest is not fetched, and the result says so."""

MAX_REDIRECTS = 5
TIMEOUT_S = 30.0
SEARCH_RESULTS = 10
USER_AGENT = "bubu-web-fetch/1 (+https://github.com/bubu-agent)"


@dataclass(frozen=True, slots=True, kw_only=True)
class WebAccess:
    """What the turn may reach: the whole network, or the domains of an allow-list."""

    network: bool = False
    domains: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        """Whether anything may be fetched at all."""
        return self.network or bool(self.domains)


def access_of(ctx: ToolContext) -> WebAccess:
    """The web access of a call's context."""
    return WebAccess(network=ctx.network, domains=ctx.web_domains)


def _host_matches(host: str, domain: str) -> bool:
    d = domain.strip().lower().lstrip(".").removeprefix("*.")
    return host == d or host.endswith("." + d)


def _private(addr: str) -> bool:
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def _addresses(host: str, port: int) -> list[str]:
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, port)})
    except (socket.gaierror, UnicodeError) as e:
        raise ToolError(f"cannot resolve {host}: {e}") from None


def check_url(url: str, access: WebAccess) -> str:
    """Why `url` may not be fetched under `access` (raises ToolError), else its host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ToolError(f"only http and https URLs are fetched, not {url!r}")
    host = (parts.hostname or "").lower()
    if not host:
        raise ToolError(f"{url!r} names no host")
    if not access.allowed:
        raise ToolError(
            "web_fetch needs network permission: run with --network, or name the domains it may "
            'fetch in your config (web_domains = ["docs.python.org"]); nothing was fetched'
        )
    if access.network:
        return host
    named = [d for d in access.domains if _host_matches(host, d.lower())]
    if not named:
        raise ToolError(
            f"{host} is not in web_domains ({', '.join(access.domains)}); nothing was fetched"
        )
    exact = any(d.strip().lower() == host for d in named)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if not exact and any(_private(a) for a in _addresses(host, port)):
        raise ToolError(
            f"{host} resolves to a private or loopback address, which web_fetch reaches only when "
            "web_domains names that very host (or with --network); nothing was fetched"
        )
    return host


class FetchArgs(Arguments):
    """The arguments of web_fetch."""

    url: Annotated[str, "The http(s) URL to fetch."]
    format: Annotated[
        Literal["markdown", "text", "raw"],
        "markdown (default: HTML turned into Markdown), text (tags dropped) or raw (the body).",
    ] = "markdown"


@dataclass(frozen=True, slots=True)
class Page:
    """A fetched response: where it ended up, its status, type and body (cut at `MAX_BYTES`)."""

    url: str
    status: int
    content_type: str
    body: bytes
    cut: bool


def fetch(url: str, access: WebAccess, *, timeout_s: float = TIMEOUT_S) -> Page:
    """GET `url`, following redirects only to URLs `access` allows; ToolError when refused."""
    import httpx2

    check_url(url, access)
    with httpx2.Client(
        follow_redirects=False, timeout=timeout_s, headers={"user-agent": USER_AGENT}
    ) as client:
        for _ in range(MAX_REDIRECTS + 1):
            with client.stream("GET", url) as r:
                if r.is_redirect and "location" in r.headers:
                    target = urljoin(url, r.headers["location"])
                    try:
                        check_url(target, access)
                    except ToolError as e:
                        raise ToolError(
                            f"{url} redirects to {target}, which is refused: {e}"
                        ) from None
                    url = target
                    continue
                body, cut = bytearray(), False
                for chunk in r.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BYTES:
                        del body[MAX_BYTES:]
                        cut = True
                        break
                kind = r.headers.get("content-type", "")
                return Page(
                    url=str(r.url),
                    status=r.status_code,
                    content_type=kind,
                    body=bytes(body),
                    cut=cut,
                )
    raise ToolError(f"{url} redirects more than {MAX_REDIRECTS} times; nothing more was fetched")


def _charset(content_type: str) -> str:
    for part in content_type.split(";")[1:]:
        k, _, v = part.strip().partition("=")
        if k.lower() == "charset" and v:
            return v.strip('"')
    return "utf-8"


def to_markdown(html: str) -> str:
    """HTML as Markdown (scripts and styles dropped)."""
    try:
        from markdownify import MarkdownConverter
    except ImportError:
        raise ToolError(
            "turning HTML into Markdown needs the markdownify package (pip install markdownify); "
            'use format="raw" meanwhile'
        ) from None
    md = MarkdownConverter(heading_style="ATX").convert_soup(_soup(html))
    lines = [ln.rstrip() for ln in md.splitlines()]
    out: list[str] = []
    for ln in lines:
        if ln or (out and out[-1]):
            out.append(ln)
    return "\n".join(out).strip() + "\n"


def _soup(html: str) -> Any:
    try:
        from bs4 import BeautifulSoup  # markdownify's own parser
    except ImportError:
        raise ToolError(
            "reading HTML needs the markdownify package (pip install markdownify), which "
            'brings its parser; use format="raw" meanwhile'
        ) from None

    soup = BeautifulSoup(html, "html.parser")
    for t in soup(["script", "style", "noscript", "template"]):
        t.decompose()
    return soup


def _text_of(html: str) -> str:
    soup = _soup(html)
    return "\n".join(ln.strip() for ln in soup.get_text("\n").splitlines() if ln.strip()) + "\n"


def render(page: Page, fmt: str) -> str:
    """The page as the model reads it: one header line, then the body in `fmt`."""
    text = page.body.decode(_charset(page.content_type), errors="replace")
    is_html = "html" in page.content_type.lower() or text.lstrip()[:15].lower().startswith(
        ("<!doctype html", "<html")
    )
    if is_html and fmt == "markdown":
        text = to_markdown(text)
    elif is_html and fmt == "text":
        text = _text_of(text)
    cut = f"; only its first {MAX_BYTES:,} bytes were read" if page.cut else ""
    kind = page.content_type.split(";")[0] or "no content type"
    return f"[{page.url}: HTTP {page.status}, {kind}, {len(page.body):,} bytes{cut}]\n\n{text}"


@tool(
    effect="read_only",
    name="web_fetch",
    description=(
        "Fetch a web page or file over HTTP(S) (GET) and return it; HTML is turned into Markdown "
        "unless format is text or raw. Only the domains the user allows are reachable; a long "
        "page comes back as a handle to page through."
    ),
)
def web_fetch(args: FetchArgs, ctx: ToolContext) -> ToolResult:
    """web_fetch{url, format?}: an HTTP(S) GET under the turn's network rules."""
    import httpx2

    try:
        page = fetch(args.url.strip(), access_of(ctx), timeout_s=min(ctx.timeout_s, TIMEOUT_S))
    except httpx2.HTTPError as e:
        raise ToolError(f"fetching {args.url} failed: {str(e) or type(e).__name__}") from None
    return ToolResult(output=render(page, args.format), is_error=page.status >= 400)


class SearchArgs(Arguments):
    """The arguments of web_search."""

    query: Annotated[str, "What to search the web for."]


def search_url(template: str, query: str) -> str:
    """The backend's URL for `query` (``{query}`` in the template, URL-encoded)."""
    if "{query}" not in template:
        raise ToolError(f"web_search_url {template!r} has no {{query}} to put the query in")
    return template.replace("{query}", quote_plus(query))


def search_lines(answer: object) -> list[str]:
    """The results of a SearXNG-style JSON answer, one block each."""
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list):
        raise ToolError('the search backend answered without a "results" list')
    out: list[str] = []
    for r in results[:SEARCH_RESULTS]:
        if not isinstance(r, dict) or not isinstance(r.get("url"), str):
            continue
        title = str(r.get("title") or r["url"]).strip()
        snippet = str(r.get("content") or r.get("snippet") or "").strip()
        out.append(f"- {title}\n  {r['url']}" + (f"\n  {snippet}" if snippet else ""))
    return out


def make_web_search(template: str) -> Tool:
    """The web_search tool, asking the backend at `template` (the user's own setting)."""

    @tool(
        effect="read_only",
        name="web_search",
        description=(
            "Search the web; returns titles, URLs and snippets of the top results. Read a "
            "result with web_fetch."
        ),
    )
    def web_search(args: SearchArgs, ctx: ToolContext) -> ToolResult:
        """web_search{query}: the top results of the configured search backend."""
        import httpx2

        if not args.query.strip():
            raise ToolError("the query is empty; say what to search for")
        url = search_url(template, args.query.strip())
        try:
            r = httpx2.get(
                url,
                timeout=min(ctx.timeout_s, TIMEOUT_S),
                headers={"user-agent": USER_AGENT, "accept": "application/json"},
            )
            r.raise_for_status()
            answer = json.loads(r.content)
        except httpx2.HTTPError as e:
            raise ToolError(f"the search backend failed: {str(e) or type(e).__name__}") from None
        except ValueError:
            raise ToolError("the search backend answered with something that is not JSON") from None
        lines = search_lines(answer)
        if not lines:
            return ToolResult(output=f"no results for {args.query!r}")
        return ToolResult(output=f"results for {args.query!r}:\n" + "\n".join(lines))

    return web_search


def web_tools(*, network: bool, domains: Sequence[str], search: str | None) -> list[Tool]:
    """The web tools a host offers: web_fetch where the network or an allow-list lets it reach
    anything, web_search where a backend is configured."""
    out: list[Tool] = []
    if network or domains:
        out.append(web_fetch)
    if search:
        out.append(make_web_search(search))
    return out


__all__ = [
    "MAX_BYTES",
    "WebAccess",
    "check_url",
    "fetch",
    "make_web_search",
    "render",
    "search_lines",
    "search_url",
    "to_markdown",
    "web_fetch",
    "web_tools",
]
