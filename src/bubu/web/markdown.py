"""Model text as HTML for the web UI: Markdown rendered by `markdown-it-py` (CommonMark, tables
and strikethrough; raw HTML in the text is not passed through but shown as text), then cleaned
by `nh3` (the Ammonia sanitizer) down to the tags and attributes Markdown makes. Links open in a
new tab without a referrer; images are not loaded (a model's text must not make the page fetch
anything), and only http, https and mailto links are kept.
"""

from __future__ import annotations

import functools

import nh3
from markdown_it import MarkdownIt

_MD = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])

TAGS = frozenset(
    {
        "p",
        "br",
        "hr",
        "em",
        "strong",
        "del",
        "s",
        "code",
        "pre",
        "blockquote",
        "a",
        "ul",
        "ol",
        "li",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
    }
)
"""The tags Markdown produces that the page shows (no images, no raw HTML)."""

ATTRIBUTES = {
    "a": {"href", "title"},
    "code": {"class"},
    "ol": {"start"},
}
"""Per tag, the attributes kept (a fenced block's ``language-…`` class); no inline style, which
the page's content security policy refuses anyway."""

URL_SCHEMES = frozenset({"http", "https", "mailto"})

CACHED = 4096
"""Rendered texts kept: a page polling a long session renders each message once."""


@functools.lru_cache(maxsize=CACHED)
def to_html(text: str) -> str:
    """`text` (Markdown) as sanitized HTML."""
    return nh3.clean(
        _MD.render(text),
        tags=set(TAGS),
        attributes={k: set(v) for k, v in ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        link_rel="noopener noreferrer nofollow",
        set_tag_attribute_values={"a": {"target": "_blank"}},
        strip_comments=True,
    )


__all__ = ["ATTRIBUTES", "TAGS", "URL_SCHEMES", "to_html"]
