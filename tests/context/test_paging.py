"""Paging through an offloaded result end to end: the model gets a placeholder, calls read_result
and search_result with its handle, and sees bounded pages (DESIGN §6, §9)."""

from __future__ import annotations

import re
from pathlib import Path

from bubu.engine.session import new_session, start_turn
from bubu.log.sqlite import SQLiteStore
from bubu.providers.base import ModelRequest, ToolCallPart
from bubu.providers.function import FunctionProvider, Reply
from bubu.tools.results import PAGE_BYTES

from .helpers import config, emit_line, host, model, responses, results, sha, write_script

COLD = config(None, hot_max_bytes=4096)
"""Results above 4 KB are placeholders even when newest, so the model must page through them."""

ROWS = b"".join(f"row {n:05d}\n".encode() for n in range(1, 1001))
"""1,000 short lines (10,000 bytes, above the offload threshold): pages are cut by line count."""

HANDLE = re.compile(r"^handle: ([0-9a-f]{64})$", re.M)
NEXT = re.compile(r'next page: read_result\{"handle": "([0-9a-f]+)", "offset": (\d+)\}$')


def _read(handle: str, **kw: object) -> dict[str, object]:
    return {"name": "read_result", "arguments": {"handle": handle, **kw}}


def test_read_result_pages_at_the_boundaries_and_past_the_end(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    h = sha(ROWS)
    calls = [
        _read(h),
        _read(h, offset=201),
        _read(h, offset=801),
        _read(h, offset=1000),
        _read(h, offset=1001),
        _read(h, offset=990, limit=50),
        {"name": "search_result", "arguments": {"handle": h, "pattern": r"row 0(0500|1000)$"}},
        {"name": "search_result", "arguments": {"handle": h, "pattern": "nothing like this"}},
    ]
    script = write_script(
        tmp_path / "s.jsonl", [emit_line("rows"), {"tool_calls": calls}, {"text": "done"}]
    )
    provider = model(script)
    info = new_session(sqlite_store, task="page", workspace=tmp_path, model=provider.spec)
    assert (
        start_turn(host(sqlite_store, provider, {"rows": ROWS}, config=COLD), info, "page")
        == "completed"
    )

    # The model saw a placeholder whose handle is the result's sha-256 ...
    placeholder = results(provider.turns()[1])[0].content
    m = HANDLE.search(placeholder)
    assert m is not None
    assert m.group(1) == h
    # ... and, in the next request, every page, in call order.
    first, second, last, one, past, clipped, found, none = results(provider.turns()[2])[1:]
    assert first.content.splitlines()[0] == f"lines 1–200 of 1,000 of result {h} (10,000 bytes)"
    assert first.content.splitlines()[1] == "     1\trow 00001"
    assert first.content.splitlines()[-2] == "   200\trow 00200"
    assert first.content.endswith(f'next page: read_result{{"handle": "{h}", "offset": 201}}')
    assert second.content.splitlines()[1] == "   201\trow 00201"
    assert last.content.splitlines()[0] == f"lines 801–1,000 of 1,000 of result {h} (10,000 bytes)"
    assert last.content.endswith("  1000\trow 01000\n(end of result)")
    assert one.content.splitlines()[1:] == ["  1000\trow 01000", "(end of result)"]
    assert past.is_error
    assert "offset 1,001 is past the end" in past.content
    assert "has 1,000 lines" in past.content
    assert clipped.content.splitlines()[0].startswith("lines 990–1,000 of 1,000")
    assert not any(r.is_error for r in (first, second, last, one, clipped, found, none))
    assert found.content.splitlines()[1:3] == ["   500\trow 00500", "  1000\trow 01000"]
    assert found.content.startswith(f"2 lines of result {h} (1,000 lines) match")
    assert none.content.startswith("no line of result")
    # Pages stay inline: none of them was offloaded in turn.
    assert [r.blob is None for _, r in responses(sqlite_store.read(info.id))][1:] == [True] * 8


def test_read_result_accepts_a_prefix_of_the_handle_through_the_engine(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    # The tool promises "the sha-256 … (at least its first 12 hex digits)"; the engine's blob reader
    # must resolve such a prefix among the stored results.
    prefix = sha(ROWS)[:16]
    script = write_script(
        tmp_path / "s.jsonl",
        [emit_line("rows"), {"tool_calls": [_read(prefix, offset=3, limit=2)]}, {"text": "done"}],
    )
    provider = model(script)
    info = new_session(sqlite_store, task="page", workspace=tmp_path, model=provider.spec)
    assert (
        start_turn(host(sqlite_store, provider, {"rows": ROWS}, config=COLD), info, "page")
        == "completed"
    )

    (page,) = results(provider.turns()[2])[-1:]
    assert not page.is_error, page.content
    assert page.content.splitlines()[1:3] == ["     3\trow 00003", "     4\trow 00004"]


def pager(request: ModelRequest) -> Reply:
    """A model that runs emit once, then follows the placeholder and each page's "next page" hint
    until the result ends: what a model paging through a large result does."""
    n = request.ordinal
    if n == 0:
        return ToolCallPart(call_id="c0", name="emit", arguments={"key": "wide"})
    newest = results(request)[-1].content
    if (m := HANDLE.search(newest)) is not None:
        args: dict[str, object] = {"handle": m.group(1)}
    elif (m := NEXT.search(newest)) is not None:
        args = {"handle": m.group(1), "offset": int(m.group(2))}
    else:
        return "read it all"
    return ToolCallPart(call_id=f"c{n}", name="read_result", arguments=args)


def test_following_the_pages_reads_every_line_once_within_the_page_cap(
    tmp_path: Path, sqlite_store: SQLiteStore
) -> None:
    # Lines of varying width, so the byte cap (not the line count) ends most pages.
    wide = b"".join(f"{n:04d} ".encode() + b"w" * (n % 97) + b"\n" for n in range(1, 701))
    paging = FunctionProvider(pager, spec="test:pager")
    info = new_session(sqlite_store, task="page", workspace=tmp_path, model=paging.spec)
    assert (
        start_turn(host(sqlite_store, paging, {"wide": wide}, config=COLD), info, "page")
        == "completed"
    )

    pages = [r.result for _, r in responses(sqlite_store.read(info.id))][1:]
    assert len(pages) > 4
    got: list[str] = []
    for page in pages:
        assert len(page.encode()) <= PAGE_BYTES + 400  # the cap, plus a header and a footer line
        body = page.splitlines()[1:-1]
        got += [line.split("\t", 1)[1] for line in body]
    assert got == wide.decode().splitlines()
    assert pages[-1].endswith("(end of result)")
