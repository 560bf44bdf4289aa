"""What every built-in tool shares: the workspace guard, error texts and bounded text.

The guard resolves a path the model gave beneath the workspace's directory descriptor
(`bubu.tools.guard`): symlinks that stay inside are followed, and a ``..``, an absolute path or a
symlink that leads out is seen for what it is: outside. `permission` reports such a path as a
reason to ask; `run` refuses it unless the user allowed it (`ToolContext.outside_allowed` for
one call, `ToolContext.allow_write` ahead of time), and then it is resolved from ``/``.
`resolved_relative` is the workspace-relative path a call really reaches, for checks on where inside
the workspace it lands.

The built-in tools are declared with `@tool` (`bubu.tools.decorator`), whose ``path_arg=`` puts
this guard in front of a path argument.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from bubu.errors import ToolError
from bubu.tools.base import ToolContext
from bubu.tools.guard import Escape, Root, resolve_beneath

SNIFF_BYTES = 8192
"""How much of a file is read to decide whether it is binary (a NUL byte means binary)."""

JUNK_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        ".idea",
    }
)
"""Directories that listing and searching skip: version control, caches, installed packages."""


# ---- the guard ----------------------------------------------------------------------------------


def workspace_root(ctx: ToolContext) -> str:
    """The workspace as an absolute path with every symlink resolved."""
    return os.path.realpath(ctx.workspace)


def _check_raw(raw: str) -> None:
    if not raw:
        raise ToolError("the path is empty; give a path relative to the workspace")
    if "\0" in raw:
        raise ToolError("the path contains a NUL character; give a plain path")
    try:
        raw.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as err:
        raise ToolError("the path contains a lone surrogate character; give a plain path") from err


@dataclass(frozen=True, slots=True)
class Target:
    """A path the model gave, ready to open beneath `root` (see `bubu.tools.guard`).

    `rel` is what to walk from the root; `resolved` is where it leads now, relative to the root;
    `inside` says whether the root is the workspace (else it is ``/``, the user having allowed a
    path outside).
    """

    raw: str
    root: Root
    rel: str
    resolved: str
    inside: bool

    @property
    def path(self) -> str:
        """The resolved absolute path (what a dispatch records and recovery hashes)."""
        return self.root.absolute(self.resolved)

    def shown(self, sub: str = "") -> str:
        """How a path at or below the target is shown to the model."""
        rel = (
            self.resolved if not sub else sub if self.resolved == "." else f"{self.resolved}/{sub}"
        )
        return rel if self.inside else self.root.absolute(rel)

    def walked(self, rel: str) -> str:
        """The root-relative path to walk for `rel` below the target."""
        return rel if self.resolved == "." else f"{self.resolved}/{rel}"


def _relative(ctx: ToolContext, raw: str, root: str) -> str | None:
    """`raw` relative to the workspace, or None when it is absolute and elsewhere."""
    if not os.path.isabs(raw):
        return raw
    for base in (root, os.path.abspath(ctx.workspace)):
        if raw == base or raw.startswith(base.rstrip(os.sep) + os.sep):
            return raw[len(base) :].lstrip(os.sep) or "."
    return None


def _outside_path(ctx: ToolContext, raw: str) -> str:
    where = os.path.join(workspace_root(ctx), raw)
    try:
        return os.path.realpath(where)  # only shown: it may race with a change, nothing opens it
    except OSError:
        return os.path.normpath(where)


def _outside(ctx: ToolContext, raw: str) -> str:
    """`raw` is outside the workspace, which is named; where it leads too, when that is not
    what `raw` says already."""
    leads = _outside_path(ctx, raw)
    said = f"{raw} is outside the workspace {workspace_root(ctx)}"
    return said if leads == raw else f"{said} (it leads to {leads})"


@contextlib.contextmanager
def beneath(ctx: ToolContext, raw: str) -> Iterator[Target]:
    """Open the workspace and resolve `raw` beneath it, for the duration of one tool call.

    A path that leads out (``..``, an absolute path elsewhere, a symlink pointing out) raises
    ToolError, unless the user allowed it for this call: then it is resolved from ``/``.
    """
    _check_raw(raw)
    with Root.open(workspace_root(ctx)) as root:
        target = _inside(ctx, raw, root)
        if target is not None:
            yield target
            return
        if not (ctx.outside_allowed or named_outside(ctx, _outside_path(ctx, raw))):
            raise ToolError(
                f"{_outside(ctx, raw)}; use a path inside the workspace or ask the user to allow it"
            )
        with Root.open(os.sep) as top:
            rel = os.path.join(root.path, raw).lstrip(os.sep) or "."
            yield Target(
                raw=raw, root=top, rel=rel, resolved=resolve_beneath(top, rel), inside=False
            )


def _inside(ctx: ToolContext, raw: str, root: Root) -> Target | None:
    rel = _relative(ctx, raw, root.path)
    if rel is None:
        return None
    try:
        resolved = resolve_beneath(root, rel)
    except Escape:
        return None
    return Target(raw=raw, root=root, rel=rel, resolved=resolved, inside=True)


def escape_text(raw: str, err: Escape) -> str:
    """The error a tool gives for a path that a walk found leading out of the workspace."""
    why = f"the symlink {err.link} points to {err.target}" if err.link else "'..' climbs above it"
    return (
        f"{raw} is outside the workspace ({why}); Bubu does not follow a path out of the "
        "workspace, nothing was done"
    )


def resolved_relative(ctx: ToolContext, raw: str) -> str | None:
    """Where `raw` leads now, relative to the workspace ("." for the workspace itself), symlinks
    inside it resolved; None when it leads out. Raises ToolError for a malformed path."""
    _check_raw(raw)
    with Root.open(workspace_root(ctx)) as root:
        rel = _relative(ctx, raw, root.path)
        if rel is None:
            return None
        try:
            return resolve_beneath(root, rel)
        except Escape:
            return None


def resolve(ctx: ToolContext, raw: str) -> str:
    """`raw` resolved against the workspace: beneath it when it stays inside, else as the
    operating system resolves it (the absolute result is only shown, never opened)."""
    _check_raw(raw)
    rel = resolved_relative(ctx, raw)
    if rel is None:
        return _outside_path(ctx, raw)
    root = workspace_root(ctx)
    return root if rel == "." else os.path.join(root, rel)


def is_inside(ctx: ToolContext, resolved: str) -> bool:
    """Whether an already resolved path is the workspace or lies below it."""
    root = workspace_root(ctx)
    return resolved == root or resolved.startswith(root.rstrip(os.sep) + os.sep)


def outside_reason(ctx: ToolContext, raw: str) -> str | None:
    """Why `raw` needs permission (it leads outside the workspace), or None."""
    try:
        _check_raw(raw)
        inside = resolved_relative(ctx, raw) is not None
    except (ToolError, OSError):
        return None  # run() reports the bad path; nothing to ask about
    if inside or ctx.outside_allowed or named_outside(ctx, _outside_path(ctx, raw)):
        return None
    return _outside(ctx, raw)


def named_outside(ctx: ToolContext, resolved: str) -> bool:
    """Whether the user named `resolved` (an absolute path, symlinks resolved) ahead of time with
    ``--allow-write``: it is one of those paths or lies below one."""
    return named_base(ctx, resolved) is not None


def named_base(ctx: ToolContext, resolved: str) -> str | None:
    """The deepest ``--allow-write`` path that `resolved` is or lies below, or None."""
    found: str | None = None
    for entry in ctx.allow_write:
        for form in dict.fromkeys((os.path.normpath(entry), os.path.realpath(entry))):
            below = resolved == form or resolved.startswith(form.rstrip(os.sep) + os.sep)
            if below and (found is None or len(form) > len(found)):
                found = form
    return found


def guard(ctx: ToolContext, raw: str) -> str:
    """The resolved absolute path for `raw`; raises ToolError when it is outside and that is not
    allowed. Only for code that opens by name; the built-in tools open beneath a descriptor."""
    with beneath(ctx, raw) as t:
        return t.path


def display(ctx: ToolContext, resolved: str) -> str:
    """How a resolved path is shown to the model: relative inside the workspace, else absolute."""
    root = workspace_root(ctx)
    if resolved == root:
        return "."
    if is_inside(ctx, resolved):
        return os.path.relpath(resolved, root)
    return resolved


# ---- errors -----------------------------------------------------------------------------------


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A model's regex (grep, search_result); ToolError, one sentence, when it is not valid."""
    try:
        return re.compile(pattern)
    except re.error as err:
        raise ToolError(
            f"the pattern is not a valid Python regex ({err}); escape special characters "
            "with a backslash"
        ) from err


def os_error_text(err: OSError) -> str:
    """One sentence for an operating-system error, naming the file when there is one."""
    where = f"{err.filename}: " if err.filename else ""
    reason = err.strerror or errno.errorcode.get(err.errno or 0, str(err))
    return f"{where}{reason.lower()}"


# ---- bounded text -------------------------------------------------------------------------------


def is_binary(head: bytes) -> bool:
    """Whether a file's first bytes say it is binary (it contains a NUL byte)."""
    return b"\0" in head


def drop_partial_utf8(data: bytes) -> bytes:
    """`data` without a UTF-8 sequence cut short at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: the sequence starts further back
        # A lead byte: 110xxxxx needs 2 bytes, 1110xxxx 3, 11110xxx 4; ASCII needs 1.
        need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
        return data[:-back] if need > back else data
    return data


def decode(data: bytes) -> str:
    """Text for the model: invalid UTF-8 becomes U+FFFD, so no lone surrogate ever appears."""
    return data.decode("utf-8", errors="replace")


def iter_lines(stream: BinaryIO, keep: int) -> Iterator[tuple[bytes, int]]:
    """Each line as (its first `keep` bytes without the newline, its full length in bytes).

    Memory stays bounded by `keep` however long a line is.
    """
    while True:
        head = stream.readline(keep)
        if not head:
            return
        if head.endswith(b"\n"):
            yield head[:-1], len(head) - 1
            continue
        # Longer than `keep` (or the last line, without a newline): count the rest, keep none of it.
        length = len(head)
        while rest := stream.readline(1 << 16):
            if rest.endswith(b"\n"):
                length += len(rest) - 1
                break
            length += len(rest)
        yield head, length


def cut_line(head: bytes, length: int, limit: int) -> str:
    """A line for display from its first bytes and full length: at most `limit` bytes of it,
    cut on a character boundary, saying how much was left out."""
    shown = head[:limit]
    if length > len(shown):
        shown = drop_partial_utf8(shown)
    text = decode(shown)
    if length > len(shown):
        text += f" … [line cut: {length - len(shown):,} more bytes]"
    return text
