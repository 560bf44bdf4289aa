"""A file with no newlines (`/dev/zero`) given to `bubu import` or as a scripted model is refused
with one line naming the limit and the line, after reading at most the limit; an import reads
its file a line at a time and inserts its events in chunks."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from bubu.errors import ConfigError
from bubu.events import Event, Text, make
from bubu.log import transfer
from bubu.log.sqlite import SQLiteStore
from bubu.log.store import SessionInfo
from bubu.providers.scripted import SCRIPT_LINE_LIMIT, load_script

from .helpers import bubu, error_line


def test_a_scripted_model_given_dev_zero_is_refused_with_the_limit(tmp_path: Path) -> None:
    done = bubu(tmp_path / "bubu.db", "run", "hi", "-w", str(tmp_path), "-m", "scripted:/dev/zero")
    assert done.returncode == 2
    assert error_line(done.stderr) == (
        "bubu: error: line 1 of the script /dev/zero is longer than 16 MiB, the limit for one "
        "line (is it the right file?)"
    )


def test_a_long_script_line_is_named_by_its_number(tmp_path: Path) -> None:
    script = tmp_path / "s.jsonl"
    script.write_bytes(b'{"text": "one"}\n\n' + b"x" * (SCRIPT_LINE_LIMIT + 1) + b"\n")
    with pytest.raises(ConfigError, match=r"^line 3 of the script .* longer than 16 MiB"):
        load_script(script)
    script.write_bytes(b'{"text": "' + b"y" * (SCRIPT_LINE_LIMIT - 12) + b'"}\n')
    assert len(load_script(script)[0].text or "") == SCRIPT_LINE_LIMIT - 12, "the limit itself fits"


def test_importing_dev_zero_is_refused_with_the_limit(tmp_path: Path) -> None:
    db = tmp_path / "bubu.db"
    done = bubu(db, "import", "/dev/zero")
    assert done.returncode == 1
    assert error_line(done.stderr) == (
        "bubu: error: refused to import /dev/zero: line 1 of the file is longer than 128 MiB, "
        "the limit for one line (is it the right file?)"
    )


def test_importing_endless_standard_input_is_refused_with_the_limit(tmp_path: Path) -> None:
    with open("/dev/zero", "rb") as zero:
        done = subprocess.run(
            [sys.executable, "-m", "bubu", "--db", str(tmp_path / "bubu.db"), "import", "-"],
            stdin=zero,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 1
    assert error_line(done.stderr) == (
        "bubu: error: refused to import -: line 1 of the file is longer than 128 MiB, "
        "the limit for one line (is it the right file?)"
    )


class _Watching(SQLiteStore):
    """A real store that notes where the import's file stood as each chunk arrived."""

    source: io.BufferedReader
    seen: list[tuple[int, int]]

    def create_session_in_chunks(
        self,
        *,
        title: str,
        workspace: str,
        model: str | None,
        session_id: str,
        chunks: Iterable[Sequence[Event]],
        blobs: Sequence[bytes] = (),
    ) -> SessionInfo:
        def watched() -> Iterable[Sequence[Event]]:
            for chunk in chunks:
                self.seen.append((len(chunk), self.source.tell()))
                yield chunk

        return super().create_session_in_chunks(
            title=title,
            workspace=workspace,
            model=model,
            session_id=session_id,
            chunks=watched(),
            blobs=blobs,
        )


def test_an_import_reads_and_inserts_incrementally(tmp_path: Path) -> None:
    n = 3 * transfer._CHUNK + 17
    with SQLiteStore(tmp_path / "src.db") as src:
        info = src.create_session(title="big", workspace="/w")
        events = [
            make(session=info.id, role="user", author="user", ts=i, content=Text(text=f"e{i}"))
            for i in range(n)
        ]
        src.append(info.id, events, expect=0)
        export = tmp_path / "big.jsonl"
        export.write_bytes(
            b"".join(ln + b"\n" for ln in transfer.export_lines(src, src.session(info.id)))
        )
        expected = [(r.seq, r.hash) for r in src.read(info.id)]
    size = export.stat().st_size
    with _Watching(tmp_path / "dst.db") as dst, export.open("rb") as f:
        dst.source, dst.seen = f, []
        got, head = transfer.import_file(dst, f)
        assert head.high_water == n
        assert [(r.seq, r.hash) for r in dst.read(got.id, upto=n)] == expected
    sizes = [c for c, _ in dst.seen]
    assert sizes == [transfer._CHUNK] * 3 + [17 + 1], "chunks of events, the origin note last"
    positions = [p for _, p in dst.seen]
    assert positions == sorted(positions)
    assert positions[0] < size // 2, "the first chunk is inserted before most of the file is read"
