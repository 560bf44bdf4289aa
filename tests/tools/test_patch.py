"""apply_patch, insert_text and tool_reply on real files: provable intents, refusals, deletions."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bubu.errors import ToolError
from bubu.projections.recovery import DELETED
from bubu.tools import ToolContext, builtin_tools
from bubu.tools.base import JSON, ToolResult
from bubu.tools.patch import apply_patch, companions, insert_text, tool_reply
from bubu.tools.protected import protected_write


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def patch(ctx: ToolContext, **args: JSON) -> ToolResult:
    intent = apply_patch.prepare(args, ctx)
    return apply_patch.run(args, ctx, intent)


def test_an_update_records_both_hashes_and_writes_the_patched_file(
    ws: Path, ctx: ToolContext
) -> None:
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    args: dict[str, JSON] = {
        "path": "a.py",
        "operation": "update_file",
        "diff": "@@\n x = 1\n-y = 2\n+y = 3\n",
    }
    intent = apply_patch.prepare(args, ctx)
    assert intent is not None
    assert intent.before_sha256 == sha(b"x = 1\ny = 2\n")
    assert intent.after_sha256 == sha(b"x = 1\ny = 3\n")
    assert (ws / "a.py").read_text() == "x = 1\ny = 2\n"  # prepare writes nothing
    result = apply_patch.run(args, ctx, intent)
    assert not result.is_error
    assert result.output.startswith("updated a.py")
    assert (ws / "a.py").read_text() == "x = 1\ny = 3\n"


def test_a_create_makes_the_file_and_its_directories(ws: Path, ctx: ToolContext) -> None:
    result = patch(ctx, path="src/new.txt", operation="create_file", diff="+hello\n+world\n")
    assert result.output.startswith("created src/new.txt")
    assert (ws / "src/new.txt").read_text() == "hello\nworld\n"


def test_a_delete_is_provable_and_keeps_what_the_file_held(ws: Path, ctx: ToolContext) -> None:
    (ws / "old.txt").write_text("bye\n")
    intent = apply_patch.prepare({"path": "old.txt", "operation": "delete_file"}, ctx)
    assert intent is not None
    assert intent.after_sha256 == DELETED
    assert intent.before_sha256 == sha(b"bye\n")
    assert intent.before == b"bye\n"
    result = apply_patch.run({"path": "old.txt", "operation": "delete_file"}, ctx, intent)
    assert result.output == "deleted old.txt."
    assert not (ws / "old.txt").exists()
    # Run again (a recovery re-running it): the file is gone, nothing to do.
    again = apply_patch.run({"path": "old.txt", "operation": "delete_file"}, ctx, intent)
    assert "already gone" in again.output


def test_a_delete_of_a_file_changed_since_it_was_prepared_is_refused(
    ws: Path, ctx: ToolContext
) -> None:
    (ws / "old.txt").write_text("bye\n")
    intent = apply_patch.prepare({"path": "old.txt", "operation": "delete_file"}, ctx)
    (ws / "old.txt").write_text("changed\n")
    result = apply_patch.run({"path": "old.txt", "operation": "delete_file"}, ctx, intent)
    assert result.is_error
    assert "changed since" in result.output
    assert (ws / "old.txt").read_text() == "changed\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"path": "a.py", "operation": "update_file", "diff": "@@\n-nope\n+x\n"}, "does not match"),
        ({"path": "gone.py", "operation": "update_file", "diff": "@@\n-a\n+b\n"}, "does not exist"),
        ({"path": "gone.py", "operation": "delete_file"}, "nothing to delete"),
        ({"path": "b.py", "operation": "create_file", "diff": "no plus\n"}, "does not start"),
    ],
)
def test_an_operation_that_cannot_apply_changes_nothing(
    ws: Path, ctx: ToolContext, args: dict[str, JSON], says: str
) -> None:
    (ws / "a.py").write_text("x = 1\n")
    with pytest.raises(ToolError, match=says):
        apply_patch.prepare(args, ctx)
    assert (ws / "a.py").read_text() == "x = 1\n"
    assert not (ws / "b.py").exists()


def test_git_control_files_are_protected_for_every_operation(ctx: ToolContext) -> None:
    for op in ("create_file", "update_file", "delete_file"):
        why = protected_write(apply_patch, {"path": ".git/config", "operation": op}, ctx)
        assert why is not None
        assert ".git" in why


def test_insert_text_goes_after_the_line_and_is_provable(ws: Path, ctx: ToolContext) -> None:
    (ws / "a.txt").write_text("one\ntwo")
    for line, text, want in [
        (0, "zero", "zero\none\ntwo"),
        (1, "one and a half\n", "one\none and a half\ntwo"),
        (2, "three", "one\ntwo\nthree\n"),
    ]:
        (ws / "a.txt").write_text("one\ntwo")
        args: dict[str, JSON] = {"path": "a.txt", "insert_line": line, "text": text}
        intent = insert_text.prepare(args, ctx)
        assert intent is not None
        assert intent.before_sha256 == sha(b"one\ntwo")
        insert_text.run(args, ctx, intent)
        assert (ws / "a.txt").read_text() == want
    with pytest.raises(ToolError, match="past the end"):
        insert_text.prepare({"path": "a.txt", "insert_line": 9, "text": "x"}, ctx)


def test_tool_reply_answers_without_running_anything(ctx: ToolContext) -> None:
    result = tool_reply.run({"message": "no such command"}, ctx, None)
    assert result.is_error
    assert result.output == "no such command"
    assert tool_reply.effect == "read_only"


def test_a_host_with_the_file_tools_runs_the_hidden_ones_but_offers_them_never() -> None:
    tools = builtin_tools()
    assert not {"apply_patch", "insert_text", "tool_reply"} & set(tools)
    assert set(companions(tools)) == {"apply_patch", "insert_text", "tool_reply"}
    assert companions(tools)["apply_patch"].effect == "provable_write"
    without_writes = {k: v for k, v in tools.items() if k != "write_file"}
    assert set(companions(without_writes)) == {"tool_reply"}
