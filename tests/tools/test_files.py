"""read_file, write_file and edit_file on real files: paging, binary files, provable writes."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from bubu.errors import ToolError
from bubu.tools import ToolContext, file_sha256
from bubu.tools.base import JSON, Tool
from bubu.tools.files import LINE_CHARS, READ_LIMIT


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read(tools: dict[str, Tool], ctx: ToolContext, **args: JSON) -> str:
    result = tools["read_file"].run(args, ctx, None)
    assert not result.is_error, result.output
    return result.output


# ---- read_file ----------------------------------------------------------------------------------


def test_read_file_numbers_lines_like_cat_n(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "a.py").write_text("import os\n\n    x = 1\n")
    assert read(tools, ctx, path="a.py") == "     1\timport os\n     2\t\n     3\t    x = 1"


def test_read_file_pages_with_offset_and_limit(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    out = read(tools, ctx, path="a.txt", offset=4, limit=3)
    assert out.splitlines() == [
        "     4\tline 4",
        "     5\tline 5",
        "     6\tline 6",
        "(lines 4–6 of 10; next: offset=7)",
    ]
    assert read(tools, ctx, path="a.txt", offset=10).endswith(
        "10\tline 10\n(lines 10–10 of 10; end of file)"
    )
    past = tools["read_file"].run({"path": "a.txt", "offset": 11}, ctx, None)
    assert past.is_error
    assert past.output == "a.txt has 10 lines; offset 11 is past the end"


def test_read_file_default_limit_and_a_last_line_without_newline(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "big.txt").write_text("\n".join(str(n) for n in range(1, READ_LIMIT + 6)))
    out = read(tools, ctx, path="big.txt").splitlines()
    assert len(out) == READ_LIMIT + 1
    assert (
        out[-1] == f"(lines 1–{READ_LIMIT:,} of {READ_LIMIT + 5:,}; next: offset={READ_LIMIT + 1})"
    )
    tail = read(tools, ctx, path="big.txt", offset=READ_LIMIT + 1).splitlines()
    assert tail[-2] == f"  {READ_LIMIT + 5}\t{READ_LIMIT + 5}"


def test_read_file_cuts_long_lines(tools: dict[str, Tool], ws: Path, ctx: ToolContext) -> None:
    (ws / "min.js").write_bytes(b"a" * 50_000 + b"\nok\n")
    out = read(tools, ctx, path="min.js").splitlines()
    assert (
        out[0]
        == "     1\t" + "a" * LINE_CHARS + f" … [line cut: {50_000 - LINE_CHARS:,} more bytes]"
    )
    assert out[1] == "     2\tok"


def test_read_file_reports_binary_files_without_dumping_them(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "prog").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(8) + bytes(range(256)) * 4)
    result = tools["read_file"].run({"path": "prog"}, ctx, None)
    assert not result.is_error
    assert result.output == "prog is a binary file (1,040 bytes); it is not shown."


def test_read_file_replaces_invalid_utf8(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "latin1.txt").write_bytes("café\n".encode("latin-1") + b"\xed\xa0\x80 surrogate\n")
    out = read(tools, ctx, path="latin1.txt")
    assert out == "     1\tcaf\ufffd\n     2\t\ufffd\ufffd\ufffd surrogate"
    out.encode("utf-8")  # no lone surrogate made it through


def test_read_file_errors(tools: dict[str, Tool], ws: Path, ctx: ToolContext) -> None:
    (ws / "d").mkdir()
    (ws / "empty").write_bytes(b"")
    os.mkfifo(ws / "fifo")
    cases = {
        "missing.py": "missing.py does not exist; use list_files",
        "d": "d is a directory; use list_files",
        "fifo": "fifo is not a regular file",
    }
    for path, message in cases.items():
        result = tools["read_file"].run({"path": path}, ctx, None)
        assert result.is_error
        assert message in result.output
    assert read(tools, ctx, path="empty") == "empty is empty."


# ---- provable writes ----------------------------------------------------------------------------


def write(tools: dict[str, Tool], ctx: ToolContext, name: str, **args: JSON) -> tuple[str, str]:
    """Prepare and run like the engine does; (output, after hash recorded in the intent)."""
    intent = tools[name].prepare(args, ctx)
    assert intent is not None
    result = tools[name].run(args, ctx, intent)
    assert not result.is_error, result.output
    return result.output, intent.after_sha256


def test_write_file_creates_parents_and_records_hashes(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    args: dict[str, JSON] = {"path": "pkg/sub/mod.py", "content": "x = 1\n"}
    intent = tools["write_file"].prepare(args, ctx)
    assert intent is not None
    assert intent.path == str(ws / "pkg" / "sub" / "mod.py")
    assert intent.before_sha256 is None
    assert intent.after_sha256 == sha(b"x = 1\n")
    assert intent.content == b"x = 1\n"
    assert not (ws / "pkg").exists()  # prepare does not touch the disk
    result = tools["write_file"].run(args, ctx, intent)
    assert result.output == "created pkg/sub/mod.py (6 bytes, 1 line)."
    assert (ws / "pkg" / "sub" / "mod.py").read_bytes() == b"x = 1\n"
    assert file_sha256(ws / "pkg" / "sub" / "mod.py") == intent.after_sha256
    assert file_sha256(ws / "nope") is None
    mode = stat.S_IMODE((ws / "pkg" / "sub" / "mod.py").stat().st_mode)
    assert mode & 0o600 == 0o600  # made as `open` would make it, not mkstemp's 0600-only


def test_write_replaces_atomically_keeping_the_mode(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    target = ws / "run.sh"
    target.write_text("echo old\n")
    target.chmod(0o751)
    inode = target.stat().st_ino
    intent = tools["write_file"].prepare({"path": "run.sh", "content": "echo new\n"}, ctx)
    assert intent is not None
    assert intent.before_sha256 == sha(b"echo old\n")
    out = tools["write_file"].run({"path": "run.sh", "content": "echo new\n"}, ctx, intent)
    assert out.output == "replaced run.sh (9 bytes, 1 line)."
    assert target.read_text() == "echo new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert target.stat().st_ino != inode  # a new file renamed over the old one
    assert sorted(p.name for p in ws.iterdir()) == ["run.sh"]  # no temporary file left behind


def test_write_through_a_symlink_inside_the_workspace_writes_its_target(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "real.txt").write_text("a\n")
    (ws / "alias.txt").symlink_to("real.txt")
    write(tools, ctx, "edit_file", path="alias.txt", old="a", new="b")
    assert (ws / "alias.txt").is_symlink()
    assert (ws / "real.txt").read_text() == "b\n"


def test_edit_file_replaces_exactly_one_occurrence(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "a.py").write_text("def f():\n    return 1\n")
    output, after = write(tools, ctx, "edit_file", path="a.py", old="return 1", new="return 2")
    assert output == "edited a.py (22 bytes, 2 lines)."
    assert (ws / "a.py").read_text() == "def f():\n    return 2\n"
    assert file_sha256(ws / "a.py") == after


def test_edit_file_not_found_or_ambiguous_is_refused(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "a.py").write_text("x = 1\nx = 1\ny = 2\n")
    edit = tools["edit_file"]
    cases: list[tuple[dict[str, JSON], str]] = [
        ({"old": "z = 3", "new": "z = 4"}, "old was not found in a.py"),
        ({"old": "x = 1", "new": "x = 2"}, "old was found 2 times in a.py"),
        ({"old": "", "new": "x"}, "old is empty"),
        ({"old": "y = 2", "new": "y = 2"}, "old and new are the same"),
    ]
    for extra, message in cases:
        args: dict[str, JSON] = {"path": "a.py", **extra}
        with pytest.raises(ToolError, match=message):
            edit.prepare(args, ctx)
        result = edit.run(args, ctx, None)
        assert result.is_error
        assert message in result.output
    missing = edit.run({"path": "b.py", "old": "a", "new": "b"}, ctx, None)
    assert "b.py does not exist; use write_file" in missing.output
    assert (ws / "a.py").read_text() == "x = 1\nx = 1\ny = 2\n"


def test_edit_file_counts_overlapping_occurrences_and_replace_all(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "a.txt").write_text("aaa\n")
    with pytest.raises(ToolError, match="found 2 times"):
        tools["edit_file"].prepare({"path": "a.txt", "old": "aa", "new": "b"}, ctx)
    (ws / "b.txt").write_text("x = 1\nx = 1\n")
    write(tools, ctx, "edit_file", path="b.txt", old="x = 1", new="x = 2", replace_all=True)
    assert (ws / "b.txt").read_text() == "x = 2\nx = 2\n"


def test_a_read_only_file_is_not_replaced(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    target = ws / "locked.txt"
    target.write_text("keep\n")
    args: dict[str, JSON] = {"path": "locked.txt", "content": "changed\n"}
    intent = tools["write_file"].prepare(args, ctx)  # prepared while still writable
    target.chmod(0o444)
    result = tools["write_file"].run(args, ctx, intent)
    assert result.is_error
    assert (
        result.output
        == "locked.txt is read-only; it was not changed (ask the user to make it writable)"
    )
    with pytest.raises(ToolError, match="read-only"):
        tools["edit_file"].prepare({"path": "locked.txt", "old": "keep", "new": "x"}, ctx)
    assert target.read_text() == "keep\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o444


def test_a_file_changed_since_prepare_is_not_overwritten(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "a.txt").write_text("one\n")
    args: dict[str, JSON] = {"path": "a.txt", "old": "one", "new": "two"}
    intent = tools["edit_file"].prepare(args, ctx)
    (ws / "a.txt").write_text("someone else\n")
    result = tools["edit_file"].run(args, ctx, intent)
    assert result.is_error
    assert "a.txt changed since this call was prepared" in result.output
    assert (ws / "a.txt").read_text() == "someone else\n"


def test_running_an_applied_intent_again_changes_nothing(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "a.txt").write_text("one\n")
    args: dict[str, JSON] = {"path": "a.txt", "old": "one", "new": "two"}
    intent = tools["edit_file"].prepare(args, ctx)
    assert not tools["edit_file"].run(args, ctx, intent).is_error
    again = tools["edit_file"].run(args, ctx, intent)
    assert not again.is_error
    assert "already has the intended content" in again.output
    assert (ws / "a.txt").read_text() == "two\n"


def test_a_symlink_swapped_in_after_prepare_is_refused(
    tools: dict[str, Tool], ws: Path, outside: Path, ctx: ToolContext
) -> None:
    (ws / "a.txt").write_text("top secret\n")
    args: dict[str, JSON] = {"path": "a.txt", "content": "pwned\n"}
    intent = tools["write_file"].prepare(args, ctx)
    (ws / "a.txt").unlink()
    (ws / "a.txt").symlink_to(outside / "secret.txt")
    result = tools["write_file"].run(args, ctx, intent)
    assert result.is_error
    assert "outside the workspace" in result.output
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_writing_a_directory_or_a_lone_surrogate_is_refused(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "d").mkdir()
    result = tools["write_file"].run({"path": "d", "content": "x"}, ctx, None)
    assert result.is_error
    assert "d is a directory" in result.output
    bad = tools["write_file"].run({"path": "s.txt", "content": "\ud800"}, ctx, None)
    assert bad.is_error
    assert "lone surrogate" in bad.output
    assert not (ws / "s.txt").exists()


def test_a_replaced_file_keeps_its_owner(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    target = ws / "theirs.txt"
    target.write_text("a\n")
    if os.geteuid() == 0:  # only root can give a file away; others keep their own files
        os.chown(target, 4321, 4321)
    owner = (target.stat().st_uid, target.stat().st_gid)
    write(tools, ctx, "edit_file", path="theirs.txt", old="a", new="b")
    assert (target.stat().st_uid, target.stat().st_gid) == owner
    assert target.read_text() == "b\n"


def test_prepare_turns_os_errors_into_tool_errors(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "a.txt").write_text("")
    with pytest.raises(ToolError, match="not a directory"):
        tools["write_file"].prepare({"path": "a.txt/b.txt", "content": "x"}, ctx)
    result = tools["write_file"].run({"path": "a.txt/b.txt", "content": "x"}, ctx, None)
    assert result.is_error
    assert "not a directory" in result.output
    bad = tools["read_file"].run({"path": "\udc80\ud800"}, ctx, None)
    assert bad.is_error
    assert "lone surrogate" in bad.output
