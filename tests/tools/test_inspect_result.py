"""inspect_result: the structure of an offloaded result (size, lines, format, JSON keys and array
lengths, lines per log level), through the real tool and a blob reader like the engine's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bubu.tools import ToolContext, builtin_tools

from .test_results import blob_reader, store


def inspect(ws: Path, data: bytes) -> tuple[bool, str]:
    blobs: dict[str, bytes] = {}
    sha = store(blobs, data)
    ctx = ToolContext(workspace=ws, blob=blob_reader(blobs))
    r = builtin_tools()["inspect_result"].run({"handle": sha[:16]}, ctx, None)
    return r.is_error, r.output


def test_json_shows_its_top_level_keys_and_array_lengths(tmp_path: Path) -> None:
    doc = {
        "items": [{"id": i, "sku": f"S{i}"} for i in range(1234)],
        "total": 1234,
        "meta": {"a": 1},
    }
    err, out = inspect(tmp_path, json.dumps(doc, indent=1).encode())
    assert not err
    assert "format: json" in out
    assert "top level: object of 3 keys" in out
    assert "  items: array of 1,234" in out
    assert "  total: int" in out
    assert "  meta: object of 1 keys" in out
    assert len(out) < 6000


def test_a_json_array_and_json_lines(tmp_path: Path) -> None:
    _, out = inspect(tmp_path, json.dumps([{"id": 1, "name": "a"}] * 7).encode())
    assert "top level: array of 7" in out
    assert "first item keys: id, name" in out
    lines = b"".join(
        json.dumps({"ts": i, "msg": "m", **({"err": 1} if i % 2 else {})}).encode() + b"\n"
        for i in range(10)
    )
    _, out = inspect(tmp_path, lines)
    assert "format: jsonl" in out
    assert "10 JSON lines; keys (in how many lines): ts (10), msg (10), err (5)" in out


def test_a_log_counts_its_lines_per_level(tmp_path: Path) -> None:
    log = (
        "".join(
            f"2026-12-01 08:00:{i % 60:02d} {lv} worker: step {i}\n"
            for i, lv in enumerate(["INFO"] * 50 + ["ERROR"] * 3 + ["warning"] * 7 + ["DEBUG"] * 40)
        )
        + "Traceback (most recent call last):\n"
    )
    _, out = inspect(tmp_path, log.encode())
    assert "101 lines, format: log" in out
    assert "lines per level: ERROR 3, WARNING 7, INFO 50, DEBUG 40, (no level) 1" in out


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        (b"a,b,c\n1,2,3\n4,5,6\n", "csv"),
        (b"just words\nand more\n", "text"),
        (b"\x00\x01bin", "binary"),
    ],
)
def test_other_formats(tmp_path: Path, data: bytes, fmt: str) -> None:
    err, out = inspect(tmp_path, data)
    assert not err
    assert f"format: {fmt}" in out
    assert f"{len(data):,} bytes" in out


def test_an_unknown_handle_is_a_clear_error(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path, blob=blob_reader({}))
    r = builtin_tools()["inspect_result"].run({"handle": "ab" * 8}, ctx, None)
    assert r.is_error
    assert "no offloaded result has the handle abababababababab" in r.output
