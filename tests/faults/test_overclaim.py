"""What a cut output's placeholder says it kept: an output over the 64 MiB kept whole says the
middle was dropped (how many bytes) instead of `stored whole`; one under it is stored whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bubu.events import FunctionResponse
from bubu.tools.shell import FULL_BYTES, HEAD_BYTES, TAIL_BYTES

from .helpers import call, results, run_script


@pytest.mark.slow
def test_an_output_too_large_to_keep_whole_says_what_was_dropped(tmp_path: Path) -> None:
    total = FULL_BYTES + (6 << 20)
    ws = tmp_path / "ws"
    ws.mkdir()
    run = run_script(
        tmp_path,
        ws,
        [
            {
                "tool_calls": [
                    call("run_command", command=f"yes 0123456789abcdefghi | head -c {total}")
                ]
            },
            {"text": "done"},
        ],
    )
    (result,) = results(run.records)
    assert isinstance(result, FunctionResponse)
    assert "stored whole" not in result.result
    header = result.result.splitlines()[0]
    m = re.fullmatch(
        r"\[large result of run_command stored: ([\d,]+) bytes, [\d,]+ lines, sha256 [0-9a-f]{64}; "
        r"not the whole output: ([\d,]+) bytes from its middle were dropped "
        r"and are stored nowhere\]",
        header,
    )
    assert m is not None, header
    dropped = int(m.group(2).replace(",", ""))
    assert dropped == total - HEAD_BYTES - TAIL_BYTES
    assert result.blob is not None
    assert result.blob.size == int(m.group(1).replace(",", ""))
    assert (
        f"exit code 0; the output was {total:,} bytes, more than the 64 MiB kept whole: only its "
        f"first and last bytes are kept, {dropped:,} bytes between them were dropped"
    ) in result.result


def test_an_output_kept_whole_says_so(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    run = run_script(
        tmp_path,
        ws,
        [
            {
                "tool_calls": [
                    call("run_command", command="yes 0123456789abcdefghi | head -c 200000")
                ]
            },
            {"text": "done"},
        ],
    )
    (result,) = results(run.records)
    assert result.result.startswith("[large result of run_command stored whole: 200,0")
    assert "dropped" not in result.result.splitlines()[0]
