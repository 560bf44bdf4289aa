"""restore_file: the provable write a rewind makes, one per file (never offered to the model).

``restore_file{path, sha256?, expect?}`` puts back the content stored in the blob table under
`sha256`, or, without it, deletes the file (it was created after the seq the rewind goes back to).
It is a provable write like write_file (`bubu.tools.files`): its dispatch records the file's hash
now and the hash it will have (`DELETED` for a removal), the earlier content is kept, the file is
found beneath the workspace descriptor, held by the write lock from the hash check to the rename (or
the unlink), and replaced atomically. A protected path (`bubu.tools.protected`) and a path
outside the workspace are refused: a rewind is no way around what the write tools ask for. With
`expect` (the hash the rewind's preview saw), a file changed since the preview is not touched.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable
from typing import Annotated

from msgspec import UNSET, UnsetType

from bubu.errors import ToolError
from bubu.projections.recovery import DELETED
from bubu.tools.base import Tool, ToolContext, ToolResult, WriteIntent
from bubu.tools.decorator import tool
from bubu.tools.files import FilePath, _current_at, _read_current, atomic_write_at
from bubu.tools.guard import fsync_dir, locate
from bubu.tools.protected import write_reason
from bubu.tools.schema import Arguments, given
from bubu.tools.workspace import beneath
from bubu.tools.writelock import write_lock

NAME = "restore_file"
ABSENT = "absent"
"""The `expect` of a file that did not exist when the rewind was previewed."""


class RestoreFileArgs(Arguments):
    """The arguments of restore_file; without `sha256` the file is deleted."""

    path: FilePath
    sha256: Annotated[str | UnsetType, "The stored content to put back."] = UNSET
    expect: Annotated[
        str | UnsetType,
        f"The file's sha-256 when the rewind was previewed ({ABSENT!r}: "
        "no file); a file that differs now is not touched.",
    ] = UNSET
    mode: Annotated[
        int | UnsetType, "The permission bits to give the restored file (from a snapshot)."
    ] = UNSET


def restore_tool(blob: Callable[[str], bytes | None]) -> Tool:
    """restore_file{path, sha256?, expect?}: put a file back as it was, the content read from
    `blob` (see the module docstring)."""

    def plan(args: RestoreFileArgs, ctx: ToolContext) -> WriteIntent:
        """The file's hash now and the one it will have; ToolError when it cannot be restored."""
        raw, sha = args.path, given(args.sha256)
        with beneath(ctx, raw) as t:
            if not t.inside:
                raise ToolError(f"{raw} is outside the workspace; a rewind restores none there")
            why = write_reason(ctx, t.path)
            if why is not None:
                raise ToolError(f"{why}; a rewind does not write it, restore it by hand")
            before = _read_current(raw, t)
            path = t.path
        now = ABSENT if before is None else hashlib.sha256(before).hexdigest()
        expect = given(args.expect)
        if expect is not None and now != expect:
            raise ToolError(f"{raw} changed since the rewind's preview; it was not touched")
        content = b""
        if sha is not None:
            stored = blob(sha)
            if stored is None or hashlib.sha256(stored).hexdigest() != sha:
                raise ToolError(f"the content of {raw} to restore ({sha[:12]}…) is not in the log")
            content = stored
        elif before is None:
            raise ToolError(f"{raw} does not exist; there is nothing to delete")
        return WriteIntent(
            path=path,
            before_sha256=None if before is None else hashlib.sha256(before).hexdigest(),
            after_sha256=sha if sha is not None else DELETED,
            content=content,
            before=before,
        )

    return tool(
        effect="provable_write",
        name=NAME,
        path_arg="path",
        permission=_nothing_to_ask,
        prepare=plan,
        description=(
            "Put a file of the workspace back to the content stored under `sha256`, or delete it "
            "when no sha256 is given. Used by a rewind."
        ),
    )(_restore)


def _nothing_to_ask(args: object) -> None:
    """Nothing to ask: the rewind's preview was the question."""
    return


def _restore(args: RestoreFileArgs, ctx: ToolContext, intent: WriteIntent) -> ToolResult:
    """Perform the prepared restore (or deletion), exactly as prepared, or nothing."""
    raw = args.path
    delete = intent.after_sha256 == DELETED
    with beneath(ctx, raw) as t:
        try:
            loc = locate(t.root, t.rel, create=not delete)
        except FileNotFoundError:
            if delete:
                return ToolResult(output=f"{raw} is already gone; nothing to do.")
            raise
        with loc:
            path = t.root.absolute(loc.rel)
            if path != intent.path:
                raise ToolError(
                    f"{raw} now resolves to {path}, not {intent.path}; nothing was written"
                )
            with write_lock(loc.fd, loc.name, cancel=ctx.cancel, shown=raw):
                now, like = _current_at(raw, loc.fd, loc.name)
                if now == (None if delete else intent.after_sha256):
                    return ToolResult(output=f"{raw} is already as it was; nothing to do.")
                if now != intent.before_sha256:
                    raise ToolError(f"{raw} changed since the rewind looked at it; not touched")
                if delete:
                    try:
                        os.unlink(loc.name, dir_fd=loc.fd)
                    except FileNotFoundError:
                        pass
                    except OSError as err:
                        if err.errno != errno.ENOENT:
                            raise
                    fsync_dir(loc.fd)
                    return ToolResult(output=f"deleted {raw} (it was created after the seq).")
                atomic_write_at(loc.fd, loc.name, intent.content, like, given(args.mode))
    return ToolResult(output=f"restored {raw} ({len(intent.content):,} bytes).")


__all__ = ["ABSENT", "NAME", "restore_tool"]
