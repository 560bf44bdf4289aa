"""Search tools: list_files (glob) and grep (Python regex over text files), both read only.

Both walk the workspace in a fixed order from directory descriptors (`bubu.tools.guard`), skip
version-control, cache and package directories (`JUNK_DIRS`) and what the `.gitignore` files
leave out (`bubu.tools.ignores`), never enter a symlinked directory,
open files without following a symlink out, and cap what they return, saying so.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from msgspec import UNSET, UnsetType

from bubu.errors import ToolError
from bubu.toolfacts import ToolFacts
from bubu.tools.base import ToolContext, ToolResult
from bubu.tools.decorator import tool
from bubu.tools.guard import Escape, is_regular, locate, open_beneath
from bubu.tools.guard import walk_files as walk_beneath
from bubu.tools.ignores import rules_above
from bubu.tools.schema import Arguments, given
from bubu.tools.workspace import (
    JUNK_DIRS,
    SNIFF_BYTES,
    Target,
    beneath,
    compile_pattern,
    decode,
    is_binary,
    iter_lines,
)

LIST_MAX = 1000
"""The most paths list_files returns."""

GREP_MAX_MATCHES = 200
GREP_MAX_CHARS = 30_000
"""The most matching lines, and text, one grep result holds."""

GREP_LINE_BYTES = 1 << 20
"""How much of each line grep searches; the rest of a longer line is not searched."""

GREP_SHOW_CHARS = 300
"""Matching lines longer than this are shown as a window around the match."""


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex for a glob over ``/``-separated paths: ``*``, ``?``, ``[…]``, ``**``, ``{a,b}``."""
    return re.compile(_translate(pattern) + r"\Z", re.DOTALL)


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            # Escaped so that nothing in the class means more to `re` than to a glob.
            body = "".join("\\" + ch if ch in "\\^[]&~|" else ch for ch in body)
            out.append(("[^" if negate else "[") + body + "]")
            i = end + 1
        elif c == "{" and (end := _closing_brace(pattern, i)) != -1:
            parts = _split_top(pattern[i + 1 : end])
            out.append("(?:" + "|".join(_translate(p) for p in parts) + ")")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _closing_brace(pattern: str, start: int) -> int:
    depth = 0
    for j in range(start, len(pattern)):
        if pattern[j] == "{":
            depth += 1
        elif pattern[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return -1


def _split_top(body: str) -> list[str]:
    parts, depth, last = [], 0, 0
    for j, c in enumerate(body):
        depth += {"{": 1, "}": -1}.get(c, 0)
        if c == "," and depth == 0:
            parts.append(body[last:j])
            last = j + 1
    parts.append(body[last:])
    return parts


def _matcher(pattern: str) -> tuple[re.Pattern[str], bool]:
    """The compiled glob, and whether it applies to the file name only (it has no ``/``)."""
    try:
        return glob_regex(pattern), "/" not in pattern
    except re.error as err:
        raise ToolError(f"the glob {pattern!r} is not valid ({err}); fix its brackets") from err


@dataclass(frozen=True, slots=True)
class Found:
    """A file met by a walk: its directory's descriptor (valid until the next one), its name,
    its path below the walk's start, the root-relative path that reaches it, and how it is
    shown to the model."""

    dir_fd: int
    name: str
    rel: str
    walk: str
    shown: str


def walk_files(ctx: ToolContext, t: Target) -> Iterator[Found]:
    """The files at or under the target in a fixed order; junk, ignored and symlinked
    directories skipped, every directory opened beneath the one before without following a
    symlink."""
    with locate(t.root, t.rel) as loc:
        try:
            fd = os.open(loc.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=loc.fd)
        except FileNotFoundError:
            raise ToolError(
                f"{t.raw} does not exist; use list_files to find the right path"
            ) from None
        except OSError as err:
            if err.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            # A single file (or one just swapped for a symlink: opened beneath the root below).
            name = os.path.basename(loc.rel)
            yield Found(dir_fd=loc.fd, name=loc.name, rel=name, walk=t.rel, shown=t.shown())
            return
    try:
        rules = rules_above(t.root, t.resolved, inside=t.inside)
        for dir_fd, name, rel in walk_beneath(fd, "", JUNK_DIRS, rules):
            if ctx.cancel.is_set():
                raise ToolError(f"{ctx.stopped_by()} before the search finished")
            yield Found(dir_fd=dir_fd, name=name, rel=rel, walk=t.walked(rel), shown=t.shown(rel))
    finally:
        os.close(fd)


def _selected(ctx: ToolContext, t: Target, pattern: str | None) -> Iterator[Found]:
    """The files under the target that the glob selects."""
    matcher = _matcher(pattern) if pattern else None
    for found in walk_files(ctx, t):
        if matcher is not None:
            regex, name_only = matcher
            rel = found.name if name_only else found.rel
            if not regex.match(rel):
                continue
        yield found


@contextlib.contextmanager
def _existing(ctx: ToolContext, raw: str | None) -> Iterator[Target]:
    with beneath(ctx, raw or ".") as t:
        try:
            with locate(t.root, t.rel) as loc:
                os.stat(loc.name, dir_fd=loc.fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            raise ToolError(
                f"{raw} does not exist; use list_files to find the right path"
            ) from None
        yield t


class ListFilesArgs(Arguments):
    """The arguments of list_files; without `path`, the whole workspace."""

    pattern: Annotated[str | UnsetType, "Glob, e.g. `*.py` or `src/**/test_*`."] = UNSET
    path: Annotated[str | UnsetType, "Directory to list, relative to workspace."] = UNSET


@tool(
    effect="read_only",
    name="list_files",
    facts=ToolFacts(headline="pattern"),
    path_arg="path",
    description=(
        "List files in the workspace, sorted, as paths relative to the workspace. `path` is the "
        "directory to look in (default: the whole workspace); `pattern` is a glob relative to it "
        "(`*`, `?`, `[abc]`, `**` for any depth, `{py,txt}`); a pattern without `/` matches file "
        f"names at any depth, e.g. `*.py`. Skips .git, node_modules, caches and virtualenvs. At "
        f"most {LIST_MAX} paths are returned."
    ),
)
def list_files(args: ListFilesArgs, ctx: ToolContext) -> ToolResult:
    """list_files{pattern?, path?}: the files of the workspace that match a glob, sorted."""
    pattern = given(args.pattern)
    total = 0

    def shown(t: Target) -> Iterator[str]:
        nonlocal total
        for found in _selected(ctx, t, pattern):
            total += 1
            yield found.shown

    with _existing(ctx, given(args.path)) as t:
        # nsmallest keeps memory bounded by the cap, however many files match.
        paths = heapq.nsmallest(LIST_MAX, shown(t))
    if not paths:
        return ToolResult(output="no files match" + (f" {pattern}" if pattern else ""))
    body = "\n".join(paths)
    if total > len(paths):
        body += f"\n… {total - len(paths):,} more (narrow the pattern or the path)"
    return ToolResult(output=body)


class GrepArgs(Arguments):
    """The arguments of grep; without `path`, the whole workspace."""

    pattern: Annotated[str, "Python regular expression."]
    path: Annotated[str | UnsetType, "File or directory, relative to workspace."] = UNSET
    glob: Annotated[str | UnsetType, "Only files matching this glob."] = UNSET


@tool(
    effect="read_only",
    name="grep",
    facts=ToolFacts(headline="pattern"),
    path_arg="path",
    description=(
        "Search text files in the workspace for a Python regular expression and return matching "
        "lines as `path:line:text`. `path` is a file or directory (default: the whole workspace); "
        "`glob` filters file names like list_files' pattern (e.g. `*.py`). Use `(?i)` for "
        f"case-insensitive search. Binary files are skipped. At most {GREP_MAX_MATCHES} matches."
    ),
)
def grep(args: GrepArgs, ctx: ToolContext) -> ToolResult:
    """grep{pattern, path?, glob?}: lines of text files matching a Python regex."""
    pattern = args.pattern
    regex = compile_pattern(pattern)
    lines: list[str] = []
    used = files = 0
    full = False
    with _existing(ctx, given(args.path)) as t:
        for found in _selected(ctx, t, given(args.glob)):
            hit = False
            for line in _grep_file(t, found, regex):
                lines.append(line)
                used += len(line) + 1
                hit = True
                if len(lines) >= GREP_MAX_MATCHES or used >= GREP_MAX_CHARS:
                    full = True
                    break
            files += hit
            if full:
                break
    if not lines:
        return ToolResult(output=f"no matches for {pattern}")
    if full:
        tail = f"… stopped after {len(lines)} matches; narrow the pattern, path or glob"
    else:
        tail = f"({_plural(len(lines), 'match', 'matches')} in {_plural(files, 'file', 'files')})"
    return ToolResult(output="\n".join([*lines, tail]))


def _grep_file(t: Target, found: Found, regex: re.Pattern[str]) -> Iterator[str]:
    """The file's matching lines as `path:line:text`; nothing for binary or unreadable files."""
    try:
        fd = _open_found(t, found)
    except OSError:
        return  # unreadable files are skipped, as grep -s does
    except Escape:
        return  # a symlink leading out of the workspace: not ours to read
    # Only regular files: reading a FIFO would wait forever for a writer.
    if not is_regular(fd):
        os.close(fd)
        return
    with os.fdopen(fd, "rb") as f:
        try:
            if is_binary(f.read(SNIFF_BYTES)):
                return
            f.seek(0)
            for n, (head, _) in enumerate(iter_lines(f, GREP_LINE_BYTES), start=1):
                text = decode(head)
                match = regex.search(text)
                if match is not None:
                    yield f"{found.shown}:{n}:{_window(text, match.start())}"
        except OSError:
            return


def _open_found(t: Target, found: Found) -> int:
    """Open a file met by the walk; a symlink is resolved beneath the root (Escape if it leads
    out)."""
    flags = os.O_RDONLY | os.O_NONBLOCK
    try:
        return os.open(found.name, flags | os.O_NOFOLLOW, dir_fd=found.dir_fd)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
    return open_beneath(t.root, found.walk, flags)


def _window(text: str, at: int) -> str:
    """The line, or a window of it around `at` when it is long."""
    if len(text) <= GREP_SHOW_CHARS:
        return text
    start = max(0, at - GREP_SHOW_CHARS // 3)
    end = start + GREP_SHOW_CHARS
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"
