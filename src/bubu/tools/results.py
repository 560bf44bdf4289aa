"""Result readers: read_result and search_result page through an offloaded tool result.

A large tool result is stored whole in the blob table and the model sees a placeholder with a
handle (DESIGN §6): the result's sha-256, or a unique prefix of it of at least 12 hex digits. These
tools read the bytes through `ToolContext.blob` and return bounded, line-based pages, so that a
page is always small enough to stay inline (below the offload threshold) and never be offloaded in
turn.
"""

from __future__ import annotations

import io
import string
from typing import Annotated

from msgspec import UNSET, Meta, UnsetType

from bubu.errors import ToolError
from bubu.toolfacts import ToolFacts
from bubu.tools.base import ToolContext, ToolResult
from bubu.tools.decorator import tool
from bubu.tools.schema import Arguments, given
from bubu.tools.workspace import compile_pattern, cut_line, decode, iter_lines

PAGE_LINES = 200
"""Lines read_result shows when no limit is given."""

PAGE_BYTES = 6000
"""The most UTF-8 bytes of lines in one page (either tool); below the offload threshold, so pages
stay inline."""

LINE_BYTES = 1000
"""Longer lines are cut in a page; search_result finds text anywhere in them."""

SEARCH_LINE_BYTES = 1 << 20
"""How much of each line search_result searches."""

SEARCH_MAX_MATCHES = 50
"""The most matching lines one search_result shows (all are counted)."""

SNIPPET_CHARS = 200
"""A matching line longer than this is shown as a window around the match."""

MIN_HANDLE = 12


def line_count(data: bytes) -> int:
    """The number of lines in `data` as these tools count them (a final newline ends a line)."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _handle(raw: str) -> str:
    handle = raw.strip().lower().removeprefix("sha256:")
    if not MIN_HANDLE <= len(handle) <= 64 or not set(handle) <= set(string.hexdigits):
        raise ToolError(
            f"{raw!r} is not a result handle; give the sha-256 from the placeholder "
            f"(or its first {MIN_HANDLE} or more hex digits)"
        )
    return handle


def _blob(ctx: ToolContext, handle: str) -> bytes:
    if ctx.blob is None:
        raise ToolError("offloaded results cannot be read here; re-run the tool instead")
    # The blob reader resolves a unique prefix; it raises ToolError when a prefix is ambiguous.
    data = ctx.blob(handle)
    if data is None:
        raise ToolError(
            f"no offloaded result has the handle {handle}; copy it from the placeholder"
        )
    return data


def _line_start(data: bytes, line: int) -> int:
    """The byte offset where 1-based `line` starts; the line must exist."""
    pos = 0
    for _ in range(line - 1):
        pos = data.index(b"\n", pos) + 1
    return pos


Handle = Annotated[str, "The result's sha-256 or its prefix."]
Line = Annotated[int, Meta(ge=1)]


class ReadResultArgs(Arguments):
    """The arguments of read_result."""

    handle: Handle
    offset: Annotated[Line, "First line to show, 1-based."] = 1
    limit: Annotated[Line, "How many lines to show."] = PAGE_LINES
    byte_offset: Annotated[
        Annotated[int, Meta(ge=0)] | UnsetType,
        "Read bytes from here (0-based) instead of lines.",
    ] = UNSET
    bytes: Annotated[
        Annotated[int, Meta(ge=1, le=PAGE_BYTES)] | UnsetType,
        "How many bytes.",
    ] = UNSET


@tool(
    effect="read_only",
    name="read_result",
    facts=ToolFacts(headline="handle"),
    description=(
        "Read part of a large tool result that was replaced by a placeholder. `handle` is the "
        "sha-256 shown in the placeholder (at least its first 12 hex digits); `offset` is the "
        f"first line (1-based, default 1) and `limit` how many lines (default {PAGE_LINES}). "
        f"Pages are at most {PAGE_BYTES:,} bytes; each says which lines it holds and how to "
        "get the next; `byte_offset` and `bytes` read inside a long line instead."
    ),
)
def read_result(args: ReadResultArgs, ctx: ToolContext) -> ToolResult:
    """read_result{handle, offset?, limit?, byte_offset?, bytes?}: a page of numbered lines of
    an offloaded result, or a range of its bytes."""
    handle = _handle(args.handle)
    offset, limit = args.offset, args.limit
    data = _blob(ctx, handle)
    start = given(args.byte_offset)
    if start is not None:
        return _byte_range(handle, data, start, given(args.bytes) or PAGE_BYTES)
    total = line_count(data)
    if total == 0:
        return ToolResult(output=f"result {handle} is empty.")
    if offset > total:
        raise ToolError(
            f"offset {offset:,} is past the end: result {handle} has {total:,} lines "
            f"(read from offset 1 to {total:,})"
        )
    stream = io.BytesIO(data)
    stream.seek(_line_start(data, offset))
    shown: list[str] = []
    used = 0
    at = _line_start(data, offset)
    cut: tuple[int, int, int] | None = None  # the first cut line: number, byte offset, length
    for n, (head, length) in enumerate(iter_lines(stream, LINE_BYTES), start=offset):
        line = f"{n:6}\t{cut_line(head, length, LINE_BYTES)}"
        # A page always holds at least one line: a long line is cut to fit.
        size = len(line.encode()) + 1
        if shown and (len(shown) >= limit or used + size > PAGE_BYTES):
            break
        shown.append(line)
        used += size
        if cut is None and length > LINE_BYTES:
            cut = (n, at, length)
        at += length + 1
    last = offset + len(shown) - 1
    header = f"lines {offset:,}–{last:,} of {total:,} of result {handle} ({len(data):,} bytes)"
    if last < total:
        footer = f'next page: read_result{{"handle": "{handle}", "offset": {last + 1}}}'
    else:
        footer = "(end of result)"
    if cut is not None:
        n, where, length = cut
        footer += (
            f"\nline {n:,} is {length:,} bytes, cut here: read inside it with "
            f'read_result{{"handle": "{handle}", "byte_offset": {where + LINE_BYTES}}}'
        )
    return ToolResult(output="\n".join([header, *shown, footer]))


def _byte_range(handle: str, data: bytes, start: int, size: int) -> ToolResult:
    """Bytes [start, start + size) of a result, as text (a character cut at either edge is
    shown as U+FFFD), with where the next range starts."""
    if start >= len(data):
        raise ToolError(
            f"byte_offset {start:,} is past the end: result {handle} has {len(data):,} bytes "
            f"(read from byte_offset 0 to {max(0, len(data) - 1):,})"
        )
    end = min(len(data), start + size)
    line = data.count(b"\n", 0, start) + 1
    header = (
        f"bytes {start:,}–{end - 1:,} of {len(data):,} of result {handle} "
        f"(from inside line {line:,})"
    )
    text = data[start:end].decode("utf-8", errors="replace")
    if end < len(data):
        footer = f'next range: read_result{{"handle": "{handle}", "byte_offset": {end}}}'
    else:
        footer = "(end of result)"
    return ToolResult(output="\n".join([header, text, footer]))


class SearchResultArgs(Arguments):
    """The arguments of search_result."""

    handle: Handle
    pattern: Annotated[str, "Python regular expression."]


@tool(
    effect="read_only",
    name="search_result",
    facts=ToolFacts(headline="pattern"),
    description=(
        "Search a large tool result that was replaced by a placeholder for a Python regular "
        "expression. Returns the numbers of matching lines with the matching text (the first "
        f"{SEARCH_MAX_MATCHES}; all are counted); read around one with read_result and its line "
        "number as offset."
    ),
)
def search_result(args: SearchResultArgs, ctx: ToolContext) -> ToolResult:
    """search_result{handle, pattern}: the lines of an offloaded result that match a regex."""
    handle = _handle(args.handle)
    pattern = args.pattern
    regex = compile_pattern(pattern)
    data = _blob(ctx, handle)
    total = line_count(data)
    shown: list[str] = []
    used = matched = 0
    for n, (head, _) in enumerate(iter_lines(io.BytesIO(data), SEARCH_LINE_BYTES), start=1):
        text = decode(head)
        found = regex.search(text)
        if found is None:
            continue
        matched += 1
        line = f"{n:6}\t{_snippet(text, found.start())}"
        size = len(line.encode()) + 1
        if len(shown) < SEARCH_MAX_MATCHES and used + size <= PAGE_BYTES:
            shown.append(line)
            used += size
    where = f"result {handle} ({total:,} lines)"
    if not matched:
        return ToolResult(output=f"no line of {where} matches {pattern}")
    header = f"{matched:,} lines of {where} match {pattern}:"
    footer = (
        f"showing the first {len(shown)} of {matched:,}; narrow the pattern to see others. "
        if len(shown) < matched
        else ""
    ) + f'Read around a match with read_result{{"handle": "{handle}", "offset": LINE}}.'
    return ToolResult(output="\n".join([header, *shown, footer]))


def _snippet(text: str, start: int) -> str:
    """The line, or a window of it around the match when it is long."""
    if len(text) <= SNIPPET_CHARS:
        return text
    begin = max(0, start - SNIPPET_CHARS // 4)
    stop = begin + SNIPPET_CHARS
    return ("…" if begin else "") + text[begin:stop] + ("…" if stop < len(text) else "")
