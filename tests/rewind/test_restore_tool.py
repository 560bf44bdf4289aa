"""restore_file: a provable write through the workspace guard, that refuses what write_file would
ask about and touches nothing that changed since the preview."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bubu.errors import ToolError
from bubu.projections.recovery import DELETED
from bubu.tools.base import Tool, ToolContext
from bubu.tools.restore import ABSENT, restore_tool

OLD = b"old content\n"
SHA = hashlib.sha256(OLD).hexdigest()


def _tool() -> Tool:
    return restore_tool({SHA: OLD, hashlib.sha256(b"x").hexdigest(): b"not x"}.get)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ToolContext(workspace=ws.resolve())


def test_it_puts_back_the_stored_content_and_keeps_what_it_replaces(ctx: ToolContext) -> None:
    f = ctx.workspace / "a.txt"
    f.write_bytes(b"new\n")
    tool = _tool()
    args = {"path": "a.txt", "sha256": SHA, "expect": _sha(f)}
    intent = tool.prepare(args, ctx)
    assert intent is not None
    assert (intent.before, intent.after_sha256) == (b"new\n", SHA)
    result = tool.run(args, ctx, intent)
    assert not result.is_error, result.output
    assert f.read_bytes() == OLD
    again = tool.run(args, ctx, intent)  # a re-run after a crash finds it done
    assert not again.is_error
    assert "already" in again.output


def test_it_deletes_a_file_created_later_as_a_provable_write(ctx: ToolContext) -> None:
    f = ctx.workspace / "new.txt"
    f.write_bytes(b"created\n")
    tool = _tool()
    args = {"path": "new.txt", "expect": _sha(f)}
    intent = tool.prepare(args, ctx)
    assert intent is not None
    assert intent.after_sha256 == DELETED
    assert not tool.run(args, ctx, intent).is_error
    assert not f.exists()


def test_a_file_changed_since_the_preview_is_not_touched(ctx: ToolContext) -> None:
    f = ctx.workspace / "a.txt"
    f.write_bytes(b"changed after the preview\n")
    tool = _tool()
    with pytest.raises(ToolError, match="changed since the rewind's preview"):
        tool.prepare({"path": "a.txt", "sha256": SHA, "expect": ABSENT}, ctx)
    intent = tool.prepare({"path": "a.txt", "sha256": SHA}, ctx)
    f.write_bytes(b"and again, between prepare and run\n")
    result = tool.run({"path": "a.txt", "sha256": SHA}, ctx, intent)
    assert result.is_error
    assert f.read_bytes() == b"and again, between prepare and run\n"


@pytest.mark.parametrize(
    ("path", "said"),
    [
        (".git/config", "protected path"),
        (".bashrc", "protected path"),
        ("../outside.txt", "outside the workspace"),
        ("link/x.txt", "outside the workspace"),
    ],
)
def test_what_a_rewind_must_not_write_is_refused(ctx: ToolContext, path: str, said: str) -> None:
    outside = ctx.workspace.parent / "elsewhere"
    outside.mkdir()
    (ctx.workspace / "link").symlink_to(outside)
    (ctx.workspace / ".git").mkdir()
    with pytest.raises(ToolError, match=said):
        _tool().prepare({"path": path, "sha256": SHA}, ctx)
    assert list(outside.iterdir()) == []
    assert not (ctx.workspace.parent / "outside.txt").exists()


def test_content_that_is_not_what_its_hash_says_is_refused(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="not in the log"):
        _tool().prepare({"path": "a.txt", "sha256": hashlib.sha256(b"x").hexdigest()}, ctx)
    with pytest.raises(ToolError, match="not in the log"):
        _tool().prepare({"path": "a.txt", "sha256": "0" * 64}, ctx)
    assert not (ctx.workspace / "a.txt").exists()
