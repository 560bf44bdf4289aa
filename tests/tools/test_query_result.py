"""query_result and inspect_result on what commands print: JSON, JSON lines, CSV and logs are
recognized (the exit status is the result's metadata, not its content), and a structured result
is asked for items by JMESPath or by row."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bubu.tools import builtin_tools
from bubu.tools.base import JSON, ToolContext, ToolResult
from bubu.tools.inspect_result import detect
from bubu.tools.shell import run_command


@pytest.fixture
def blobs() -> dict[str, bytes]:
    return {}


def _ctx(tmp_path: Path, blobs: dict[str, bytes]) -> ToolContext:
    return ToolContext(workspace=tmp_path, blob=blobs.get)


def _store(blobs: dict[str, bytes], data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    blobs[sha] = data
    return sha


def _ask(ctx: ToolContext, **args: JSON) -> ToolResult:
    return builtin_tools()["query_result"].run(args, ctx, None)


ITEMS = {"items": [{"id": i, "status": "failed" if i % 3 == 0 else "ok"} for i in range(1, 61)]}


def test_a_json_result_is_asked_by_jmespath(tmp_path: Path, blobs: dict[str, bytes]) -> None:
    sha = _store(blobs, json.dumps(ITEMS).encode())
    ctx = _ctx(tmp_path, blobs)
    out = _ask(ctx, handle=sha, query="items[?status=='failed'].id").output.splitlines()
    assert out[0] == f"result {sha} (json), query \"items[?status=='failed'].id\": rows 1–20 of 20"
    assert json.loads("\n".join(out[1:-1])) == list(range(3, 61, 3))
    assert out[-1] == "(last row)"
    assert "60" in _ask(ctx, handle=sha, query="length(items)").output
    bad = _ask(ctx, handle=sha, query="items[?")
    assert bad.is_error
    assert "is not JMESPath" in bad.output


def test_json_lines_and_csv_are_paged_by_row(tmp_path: Path, blobs: dict[str, bytes]) -> None:
    ndjson = "".join(json.dumps(i) + "\n" for i in ITEMS["items"]).encode()
    sha = _store(blobs, ndjson)
    ctx = _ctx(tmp_path, blobs)
    out = _ask(ctx, handle=sha, row=59, rows=5).output.splitlines()
    assert out[0] == f"result {sha} (jsonl), the whole value: rows 59–60 of 60"
    assert [r["id"] for r in json.loads("\n".join(out[1:-1]))] == [59, 60]
    first = _ask(ctx, handle=sha).output.splitlines()
    assert first[-1] == f'next rows: query_result{{"handle": "{sha}", "row": 21}}'
    table = b"name,size\n" + b"".join(f"f{i}.txt,{i * 10}\n".encode() for i in range(30))
    sha = _store(blobs, table)
    got = _ask(ctx, handle=sha, query="[?size=='290'].name").output.splitlines()
    assert json.loads("\n".join(got[1:-1])) == ["f29.txt"]
    text = _store(blobs, b"just some words\nand more\n")
    refused = _ask(ctx, handle=text)
    assert refused.is_error
    assert "not JSON, JSON lines or CSV (its format: text)" in refused.output


@pytest.mark.parametrize(
    ("printed", "fmt"),
    [
        ('{"a": [1, 2, 3]}', "json"),
        ('{"n": 1}\n{"n": 2}\n{"n": 3}', "jsonl"),
        ("name,size\na,1\nb,2", "csv"),
        ("INFO start\nWARN slow\nERROR failed\nINFO done", "log"),
    ],
)
def test_what_a_command_prints_is_recognized_its_exit_status_kept_apart(
    tmp_path: Path, printed: str, fmt: str
) -> None:
    (tmp_path / "out.txt").write_text(printed + "\n")
    result = run_command.run(
        {"command": "cat out.txt; exit 3"}, ToolContext(workspace=tmp_path), None
    )
    assert result.status == "exit code 3", "how it ended is metadata of the result"
    assert result.output.endswith("\nexit code 3"), "the model still sees how it ended"
    assert detect(result.output.removesuffix("\nexit code 3").encode()) == fmt
