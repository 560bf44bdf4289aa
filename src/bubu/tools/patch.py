"""The file tools behind the providers' own tool shapes (never offered to a model by name).

    apply_patch{path, operation, diff?}     one file of an OpenAI `apply_patch` call (V4A diff)
    insert_text{path, insert_line, text}    Anthropic's text-editor `insert` command
    tool_reply{message, error?}             the answer to a native call Bubu cannot carry out

Both are provable writes like write_file and edit_file (`bubu.tools.files`), whose checks and
atomic write they share: `prepare` reads the file beneath the workspace descriptor and computes
the content it will have, so the dispatch records the hashes before and after and recovery can
prove whether the write happened. A deletion is recorded with `DELETED` as its hash after: it is
applied once the file is gone, and what the file held is kept for a rewind. A diff that does
not apply is an error result the model sees; the file is not touched.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Mapping
from typing import Annotated, Literal

from msgspec import UNSET, Meta, UnsetType

from bubu.errors import ToolError
from bubu.projections.recovery import DELETED
from bubu.tools.base import Tool, ToolContext, ToolResult, WriteIntent
from bubu.tools.decorator import tool
from bubu.tools.files import (
    FilePath,
    _current_at,
    _encode,
    _intent,
    _perform,
    _read_current,
    _size,
)
from bubu.tools.guard import fsync_dir, locate
from bubu.tools.schema import Arguments, given
from bubu.tools.v4a import apply_diff
from bubu.tools.workspace import beneath
from bubu.tools.writelock import write_lock

APPLY_PATCH = "apply_patch"
INSERT_TEXT = "insert_text"
TOOL_REPLY = "tool_reply"


class ApplyPatchArgs(Arguments):
    """The arguments of apply_patch: one file operation."""

    path: FilePath
    operation: Annotated[
        Literal["create_file", "update_file", "delete_file"], "What to do with the file."
    ]
    diff: Annotated[str | UnsetType, "The V4A diff (create and update)."] = UNSET


def _text(raw: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ToolError(f"{raw} is not UTF-8 text; a diff cannot be applied to it") from err


def _plan_patch(args: ApplyPatchArgs, ctx: ToolContext) -> WriteIntent:
    """The file's hash now and the one the operation gives it; ToolError when it cannot apply."""
    raw, diff = args.path, given(args.diff) or ""
    with beneath(ctx, raw) as t:
        before = _read_current(raw, t)
        path = t.path
    match args.operation:
        case "create_file":
            return _intent(path, before, _encode(apply_diff("", diff, create=True)))
        case "update_file":
            if before is None:
                raise ToolError(f"{raw} does not exist; create it with a create_file operation")
            return _intent(path, before, _encode(apply_diff(_text(raw, before), diff)))
        case "delete_file":
            if before is None:
                raise ToolError(f"{raw} does not exist; there is nothing to delete")
            return WriteIntent(
                path=path,
                before_sha256=hashlib.sha256(before).hexdigest(),
                after_sha256=DELETED,
                content=b"",
                before=before,
            )


def _apply_patch(args: ApplyPatchArgs, ctx: ToolContext, intent: WriteIntent) -> ToolResult:
    """Perform the prepared operation, exactly as prepared, or nothing."""
    raw = args.path
    if intent.after_sha256 == DELETED:
        return _delete(raw, ctx, intent)
    verb = {"create_file": "created", "update_file": "updated"}[args.operation]
    if args.operation == "create_file" and intent.before_sha256 is not None:
        verb = "replaced"
    return _perform(raw, ctx, intent, f"{verb} {raw} ({_size(intent.content)}).")


def _delete(raw: str, ctx: ToolContext, intent: WriteIntent) -> ToolResult:
    """Remove the file if it still has the content the dispatch recorded."""
    with beneath(ctx, raw) as t:
        try:
            loc = locate(t.root, t.rel, create=False)
        except FileNotFoundError:
            return ToolResult(output=f"{raw} is already gone; nothing to do.")
        with loc:
            path = t.root.absolute(loc.rel)
            if path != intent.path:
                raise ToolError(f"{raw} now resolves to {path}, not {intent.path}; not deleted")
            with write_lock(loc.fd, loc.name, cancel=ctx.cancel, shown=raw):
                now, _ = _current_at(raw, loc.fd, loc.name)
                if now is None:
                    return ToolResult(output=f"{raw} is already gone; nothing to do.")
                if now != intent.before_sha256:
                    raise ToolError(
                        f"{raw} changed since this call was prepared; it was not deleted"
                    )
                try:
                    os.unlink(loc.name, dir_fd=loc.fd)
                except OSError as err:
                    if err.errno != errno.ENOENT:
                        raise
                fsync_dir(loc.fd)
    return ToolResult(output=f"deleted {raw}.")


class InsertTextArgs(Arguments):
    """The arguments of insert_text."""

    path: FilePath
    insert_line: Annotated[int, Meta(ge=0), "The line after which to insert (0: the start)."]
    text: Annotated[str, "The text to insert."]


def _plan_insert(args: InsertTextArgs, ctx: ToolContext) -> WriteIntent:
    raw = args.path
    with beneath(ctx, raw) as t:
        before = _read_current(raw, t)
        path = t.path
    if before is None:
        raise ToolError(f"{raw} does not exist; create it first")
    lines = _text(raw, before).splitlines(keepends=True)
    if args.insert_line > len(lines):
        raise ToolError(
            f"{raw} has {len(lines):,} lines; insert_line {args.insert_line:,} is past the end"
        )
    if lines and not lines[-1].endswith("\n") and args.insert_line == len(lines):
        lines[-1] += "\n"
    text = args.text if args.text.endswith("\n") or not args.text else args.text + "\n"
    lines.insert(args.insert_line, text)
    return _intent(path, before, _encode("".join(lines)))


def _insert_text(args: InsertTextArgs, ctx: ToolContext, intent: WriteIntent) -> ToolResult:
    done = f"inserted text after line {args.insert_line} of {args.path} ({_size(intent.content)})."
    return _perform(args.path, ctx, intent, done)


apply_patch = tool(
    effect="provable_write",
    name=APPLY_PATCH,
    path_arg="path",
    prepare=_plan_patch,
    description="Create, update (with a V4A diff) or delete one file of the workspace.",
)(_apply_patch)

insert_text = tool(
    effect="provable_write",
    name=INSERT_TEXT,
    path_arg="path",
    prepare=_plan_insert,
    description="Insert text after a given line of a file of the workspace.",
)(_insert_text)


class ToolReplyArgs(Arguments):
    """The arguments of tool_reply."""

    message: Annotated[str, "What the model is told."]
    error: Annotated[bool, "Whether it is an error."] = True


def _reply(args: ToolReplyArgs, ctx: ToolContext) -> ToolResult:
    """tool_reply{message, error?}: the message, as the call's result; nothing runs."""
    return ToolResult(output=args.message, is_error=args.error)


tool_reply = tool(
    effect="read_only",
    name=TOOL_REPLY,
    description="Answer a call in the provider's own tool shape that Bubu cannot carry out.",
)(_reply)


def offered(tools: Mapping[str, Tool]) -> list[str]:
    """The names of `tools` a model is offered by name: all but the hidden companions."""
    hidden = (apply_patch, insert_text, tool_reply)
    return [name for name, t in tools.items() if not any(t is h for h in hidden)]


def companions(tools: Mapping[str, Tool]) -> dict[str, Tool]:
    """The hidden tools that carry out the native shapes of the tools in `tools` (a host that
    offers write_file and edit_file runs apply_patch and insert_text too); a tool of the same
    name in `tools` wins."""
    hidden: list[Tool] = [tool_reply]
    if "write_file" in tools and "edit_file" in tools:
        hidden += [apply_patch, insert_text]
    return {t.name: t for t in hidden if t.name not in tools}


__all__ = [
    "APPLY_PATCH",
    "INSERT_TEXT",
    "TOOL_REPLY",
    "apply_patch",
    "companions",
    "insert_text",
    "offered",
    "tool_reply",
]
