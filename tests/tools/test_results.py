"""read_result and search_result paging through offloaded results held in a dict."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from bubu.errors import ToolError
from bubu.tools import ToolContext, ToolResult, line_count
from bubu.tools.base import JSON, Tool
from bubu.tools.results import LINE_BYTES, PAGE_BYTES, PAGE_LINES, SEARCH_MAX_MATCHES

NEXT = re.compile(r'next page: read_result\{"handle": "([0-9a-f]+)", "offset": (\d+)\}$')


def blob_reader(blobs: dict[str, bytes]) -> Callable[[str], bytes | None]:
    """What the engine gives tools: bytes by sha-256 or by a unique prefix of it."""

    def read(handle: str) -> bytes | None:
        hits = [sha for sha in blobs if sha.startswith(handle)]
        if len(hits) > 1:
            raise ToolError(f"the handle {handle} matches {len(hits)} results; give more digits")
        return blobs[hits[0]] if hits else None

    return read


def store(blobs: dict[str, bytes], data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    blobs[sha] = data
    return sha


@pytest.fixture
def blobs() -> dict[str, bytes]:
    return {}


@pytest.fixture
def rctx(ws: Path, blobs: dict[str, bytes]) -> ToolContext:
    return ToolContext(workspace=ws, blob=blob_reader(blobs))


def page(tools: dict[str, Tool], ctx: ToolContext, **args: JSON) -> ToolResult:
    return tools["read_result"].run(args, ctx, None)


def numbered(n_lines: int, width: int = 8) -> bytes:
    return b"".join(f"{n:0{width}}".encode() + b"\n" for n in range(1, n_lines + 1))


def test_line_count() -> None:
    assert [line_count(d) for d in (b"", b"a", b"a\n", b"a\nb", b"\n\n")] == [0, 1, 1, 2, 2]


def test_pages_at_the_boundaries_and_past_the_end(
    tools: dict[str, Tool], rctx: ToolContext, blobs: dict[str, bytes]
) -> None:
    sha = store(blobs, numbered(450))
    first = page(tools, rctx, handle=sha).output.splitlines()
    assert first[0] == f"lines 1–{PAGE_LINES} of 450 of result {sha} (4,050 bytes)"
    assert first[1] == "     1\t00000001"
    assert first[PAGE_LINES] == f"   {PAGE_LINES}\t{PAGE_LINES:08}"
    assert first[-1] == f'next page: read_result{{"handle": "{sha}", "offset": {PAGE_LINES + 1}}}'
    last = page(tools, rctx, handle=sha, offset=401).output.splitlines()
    assert last[0] == f"lines 401–450 of 450 of result {sha} (4,050 bytes)"
    assert last[-2] == "   450\t00000450"
    assert last[-1] == "(end of result)"
    one = page(tools, rctx, handle=sha, offset=450, limit=5).output.splitlines()
    assert one == [
        f"lines 450–450 of 450 of result {sha} (4,050 bytes)",
        "   450\t00000450",
        "(end of result)",
    ]
    exact = page(tools, rctx, handle=sha, offset=441, limit=10).output.splitlines()
    assert exact[-1] == "(end of result)"
    past = page(tools, rctx, handle=sha, offset=451)
    assert past.is_error
    assert past.output == (
        f"offset 451 is past the end: result {sha} has 450 lines (read from offset 1 to 450)"
    )


def test_following_next_page_reads_every_line_once_within_the_byte_cap(
    tools: dict[str, Tool], rctx: ToolContext, blobs: dict[str, bytes]
) -> None:
    data = numbered(3000, width=60) + b"no newline at the end"
    sha = store(blobs, data)
    handle, offset, seen, pages = sha[:12], 1, [], 0
    while True:
        out = page(tools, rctx, handle=handle, offset=offset).output
        pages += 1
        assert len(out.encode()) <= PAGE_BYTES + 300
        lines = out.splitlines()
        assert lines[0].startswith(f"lines {offset:,}–")
        seen += [line.split("\t", 1)[1] for line in lines[1:-1]]
        found = NEXT.match(lines[-1])
        if found is None:
            assert lines[-1] == "(end of result)"
            break
        assert found.group(1) == handle
        offset = int(found.group(2))
    assert "\n".join(seen).encode() == data
    # Each shown line is 67 bytes: the byte cap, not the line limit, made the pages.
    assert pages >= 3001 * 67 // PAGE_BYTES > 3001 // PAGE_LINES


def test_long_lines_are_cut_but_a_page_always_moves_on(
    tools: dict[str, Tool], rctx: ToolContext, blobs: dict[str, bytes]
) -> None:
    sha = store(blobs, b"short\n" + b"z" * 100_000 + b"\n" + b"\xff\xfe tail\n")
    out = page(tools, rctx, handle=sha, offset=2, limit=1).output.splitlines()
    assert (
        out[1]
        == "     2\t" + "z" * LINE_BYTES + f" … [line cut: {100_000 - LINE_BYTES:,} more bytes]"
    )
    assert out[-2].endswith('"offset": 3}')
    # The cut line says where to read on inside it: its start (6) plus what the page showed.
    assert out[-1] == (
        f"line 2 is 100,000 bytes, cut here: read inside it with "
        f'read_result{{"handle": "{sha}", "byte_offset": {6 + LINE_BYTES}}}'
    )
    assert (
        page(tools, rctx, handle=sha, offset=3).output.splitlines()[1]
        == "     3\t\ufffd\ufffd tail"
    )


def test_a_byte_range_reads_inside_a_long_line_to_its_end(
    tools: dict[str, Tool], rctx: ToolContext, blobs: dict[str, bytes]
) -> None:
    # Minified JSON: one line of 50,000 bytes with a needle in its middle.
    body = b'{"a": "' + b"x" * 25_000 + b'", "needle": 42, "b": "' + b"y" * 25_000 + b'"}'
    sha = store(blobs, body)
    at = body.index(b'"needle"')
    out = page(tools, rctx, handle=sha, byte_offset=at, bytes=20).output.splitlines()
    assert (
        out[0] == f"bytes {at:,}–{at + 19:,} of {len(body):,} of result {sha} (from inside line 1)"
    )
    assert out[1] == '"needle": 42, "b": "'
    assert out[2] == f'next range: read_result{{"handle": "{sha}", "byte_offset": {at + 20}}}'
    # Paging on by the footer reaches the end, every byte once.
    seen, start = b"", 0
    while True:
        lines = page(tools, rctx, handle=sha, byte_offset=start).output.split("\n")
        seen += "\n".join(lines[1:-1]).encode()
        if lines[-1] == "(end of result)":
            break
        start = int(lines[-1].rsplit(" ", 1)[1].rstrip("}"))
    assert seen == body
    past = page(tools, rctx, handle=sha, byte_offset=len(body))
    assert past.is_error
    assert f"byte_offset {len(body):,} is past the end" in past.output


def test_a_page_of_wide_characters_stays_within_the_byte_cap(
    tools: dict[str, Tool], rctx: ToolContext, blobs: dict[str, bytes]
) -> None:
    sha = store(blobs, ("漢字" * 100 + "\n").encode() * 100)
    out = page(tools, rctx, handle=sha).output
    assert len(out.encode()) <= PAGE_BYTES + 300
    assert NEXT.match(out.splitlines()[-1])


def test_an_empty_result(
    tools: dict[str, Tool], rctx: ToolContext, blobs: dict[str, bytes]
) -> None:
    sha = store(blobs, b"")
    assert page(tools, rctx, handle=sha).output == f"result {sha} is empty."


def test_bad_handles(
    tools: dict[str, Tool], rctx: ToolContext, blobs: dict[str, bytes], ws: Path
) -> None:
    a = store(blobs, b"a\n")
    cases = {
        "abc": "'abc' is not a result handle",
        "z" * 64: "is not a result handle",
        "0" * 64: f"no offloaded result has the handle {'0' * 64}",
    }
    for handle, message in cases.items():
        result = page(tools, rctx, handle=handle)
        assert result.is_error
        assert message in result.output
    assert page(tools, rctx, handle="SHA256:" + a.upper()).output.startswith("lines 1–1 of 1")
    no_blobs = page(tools, ToolContext(workspace=ws), handle=a)
    assert no_blobs.is_error
    assert "cannot be read here" in no_blobs.output


def test_an_ambiguous_prefix_is_reported(
    tools: dict[str, Tool], rctx: ToolContext, blobs: dict[str, bytes]
) -> None:
    blobs["ab" * 6 + "0" * 52] = b"one\n"
    blobs["ab" * 6 + "1" * 52] = b"two\n"
    result = page(tools, rctx, handle="ab" * 6)
    assert result.is_error
    assert result.output == f"the handle {'ab' * 6} matches 2 results; give more digits"
    assert page(tools, rctx, handle="ab" * 6 + "1").output.splitlines()[1] == "     1\ttwo"


def search(tools: dict[str, Tool], ctx: ToolContext, handle: str, pattern: str) -> str:
    result = tools["search_result"].run({"handle": handle, "pattern": pattern}, ctx, None)
    assert not result.is_error, result.output
    return result.output


def test_search_result_lists_matching_line_numbers(
    tools: dict[str, Tool], rctx: ToolContext, blobs: dict[str, bytes]
) -> None:
    data = b"".join(
        (b"FAILED test_%d\n" % n if n % 100 == 0 else b"PASSED test_%d\n" % n)
        for n in range(1, 501)
    )
    sha = store(blobs, data)
    out = search(tools, rctx, sha[:16], r"FAILED test_\d+")
    assert out.splitlines() == [
        f"5 lines of result {sha[:16]} (500 lines) match FAILED test_\\d+:",
        "   100\tFAILED test_100",
        "   200\tFAILED test_200",
        "   300\tFAILED test_300",
        "   400\tFAILED test_400",
        "   500\tFAILED test_500",
        f'Read around a match with read_result{{"handle": "{sha[:16]}", "offset": LINE}}.',
    ]
    assert search(tools, rctx, sha, "ERROR") == f"no line of result {sha} (500 lines) matches ERROR"


def test_search_result_caps_what_it_shows_and_counts_everything(
    tools: dict[str, Tool], rctx: ToolContext, blobs: dict[str, bytes]
) -> None:
    sha = store(blobs, b"hit\n" * 1000)
    lines = search(tools, rctx, sha, "hit").splitlines()
    assert lines[0] == f"1,000 lines of result {sha} (1,000 lines) match hit:"
    assert len(lines) == SEARCH_MAX_MATCHES + 2
    assert lines[-1].startswith(
        f"showing the first {SEARCH_MAX_MATCHES} of 1,000; narrow the pattern"
    )


def test_search_result_shows_a_window_of_a_long_line(
    tools: dict[str, Tool], rctx: ToolContext, blobs: dict[str, bytes]
) -> None:
    sha = store(blobs, b"a" * 50_000 + b"NEEDLE" + b"b" * 50_000 + b"\n")
    lines = search(tools, rctx, sha, "NEEDLE").splitlines()
    assert lines[1].startswith("     1\t…aaa")
    assert "aNEEDLEb" in lines[1]
    assert lines[1].endswith("b…")
    assert len(lines[1]) < 220


def test_search_result_rejects_an_invalid_regex(
    tools: dict[str, Tool], rctx: ToolContext, blobs: dict[str, bytes]
) -> None:
    sha = store(blobs, b"x\n")
    result = tools["search_result"].run({"handle": sha, "pattern": "[x"}, rctx, None)
    assert result.is_error
    assert "not a valid Python regex" in result.output
