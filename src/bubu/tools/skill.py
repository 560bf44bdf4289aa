"""skill{name, file?}: read a skill's SKILL.md, or another file of its directory, on demand.

The model is told each skill's name and description in the prefix (`bubu.projections.skills`);
this tool gives the body when a task calls for it. The result names the file's sha-256, so the
log says exactly which version the model read. It only reads: after a crash it is re-run.
Workspace skills are read beneath the workspace's directory descriptor (no symlink out of it is
followed); a file outside the skill's own directory is refused.
"""

from __future__ import annotations

import hashlib
import os
from typing import Annotated

from bubu.errors import ToolError
from bubu.tools import guard
from bubu.tools.base import ToolContext, ToolResult
from bubu.tools.decorator import tool
from bubu.tools.schema import Arguments

MAX_BYTES = 256 * 1024
MAX_LISTED = 50


class SkillArgs(Arguments):
    """The arguments of skill."""

    name: Annotated[str, "The skill's name, as listed under Skills."]
    file: Annotated[str, "A file of the skill's directory (default SKILL.md)."] = "SKILL.md"


def _inside(file: str) -> str:
    parts = [p for p in file.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts or os.path.isabs(file):
        raise ToolError(f"{file!r} is not a file of the skill's directory; give a relative path")
    return "/".join(parts)


def _read_workspace(ctx: ToolContext, rel: str) -> bytes:
    with guard.Root.open(str(ctx.workspace)) as root:
        try:
            fd = guard.open_beneath(root, rel, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise ToolError(f"{rel} does not exist") from None
        try:
            if not guard.is_regular(fd):
                raise ToolError(f"{rel} is not a regular file")
            return os.read(fd, MAX_BYTES + 1)
        finally:
            os.close(fd)


def _read_user(directory: str, rel: str) -> bytes:
    base = os.path.realpath(directory)
    path = os.path.realpath(os.path.join(base, rel))
    if not path.startswith(base + os.sep):
        raise ToolError(f"{rel} leads out of the skill's directory")
    try:
        with open(path, "rb") as f:
            return f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ToolError(f"the skill has no file {rel}") from None
    except IsADirectoryError:
        raise ToolError(f"{rel} is a directory") from None


def _listing(directory: str) -> list[str]:
    out: list[str] = []
    for dirpath, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(dirpath, f), directory)
            if rel != "SKILL.md":
                out.append(rel)
            if len(out) >= MAX_LISTED:
                return out
    return out


@tool(
    effect="read_only",
    name="skill",
    description=(
        "Read a skill listed under Skills: its SKILL.md (the instructions), or another of its "
        "files with file=PATH (relative to the skill's directory)."
    ),
)
def skill(args: SkillArgs, ctx: ToolContext) -> ToolResult:
    """skill{name, file?}: a skill's SKILL.md or one of its files, with its sha-256."""
    from bubu.engine.extensions import skills

    found = {s.name: s for s in skills(str(ctx.workspace))}
    s = found.get(args.name.strip())
    if s is None:
        names = ", ".join(found) or "none"
        raise ToolError(f"there is no skill {args.name!r}; the skills are: {names}")
    rel = _inside(args.file)
    if s.origin == "workspace":
        data = _read_workspace(ctx, f"{s.where}/{rel}")
    else:
        data = _read_user(s.directory, rel)
    cut = len(data) > MAX_BYTES
    data = data[:MAX_BYTES]
    digest = hashlib.sha256(data).hexdigest()
    head = f"[skill {s.name}: {rel}, {len(data):,} bytes, sha256 {digest}"
    head += f"; only its first {MAX_BYTES:,} bytes]" if cut else "]"
    body = data.decode("utf-8", "replace")
    more = _listing(s.directory) if rel == "SKILL.md" else []
    tail = ("\n\n[its other files: " + ", ".join(more) + "]") if more else ""
    return ToolResult(output=f"{head}\n\n{body.rstrip()}{tail}\n")


__all__ = ["skill"]
