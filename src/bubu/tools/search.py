"""Search tools: list_files (glob) and grep (Python regex over text files), both read only.

Both walk the workspace in a fixed order, skip version-control, cache and package directories
(`JUNK_DIRS`), never follow a symlinked directory, and cap what they return, saying so.
"""

from __future__ import annotations

import heapq
import os
import re
import stat
from collections.abc import Iterator

from bubu.errors import ToolError
from bubu.events import EffectClass
from bubu.tools.base import ToolContext, ToolResult, WriteIntent
from bubu.tools.workspace import (
    JUNK_DIRS,
    Args,
    BuiltinTool,
    decode,
    display,
    guard,
    is_binary,
    is_inside,
    iter_lines,
    schema,
    sniff,
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


def walk_files(ctx: ToolContext, root: str) -> Iterator[str]:
    """Paths of the files under `root` in a fixed order; junk and symlinked directories skipped."""
    if not os.path.isdir(root):
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        if ctx.cancel.is_set():
            raise ToolError(f"{ctx.stopped_by()} before the search finished")
        dirnames[:] = sorted(d for d in dirnames if d not in JUNK_DIRS)
        for name in sorted(filenames):
            yield os.path.join(dirpath, name)


def _selected(ctx: ToolContext, root: str, pattern: str | None) -> Iterator[str]:
    """The files under `root` that the glob selects."""
    matcher = _matcher(pattern) if pattern else None
    for path in walk_files(ctx, root):
        if matcher is not None:
            regex, name_only = matcher
            rel = os.path.basename(path) if name_only else os.path.relpath(path, root)
            if not regex.match(rel.replace(os.sep, "/")):
                continue
        yield path


def _existing(ctx: ToolContext, raw: str | None) -> str:
    path = guard(ctx, raw or ".")
    if not os.path.exists(path):
        raise ToolError(f"{raw} does not exist; use list_files to find the right path")
    return path


class ListFiles(BuiltinTool):
    """list_files{pattern?, path?}: the files of the workspace that match a glob, sorted."""

    name = "list_files"
    effect: EffectClass = "read_only"
    description = (
        "List files in the workspace, sorted, as paths relative to the workspace. `path` is the "
        "directory to look in (default: the whole workspace); `pattern` is a glob relative to it "
        "(`*`, `?`, `[abc]`, `**` for any depth, `{py,txt}`); a pattern without `/` matches file "
        f"names at any depth, e.g. `*.py`. Skips .git, node_modules, caches and virtualenvs. At "
        f"most {LIST_MAX} paths are returned."
    )
    parameters = schema(
        {
            "pattern": {"type": "string", "description": "Glob, e.g. `*.py` or `src/**/test_*`."},
            "path": {"type": "string", "description": "Directory to list, relative to workspace."},
        },
        [],
    )

    def execute(self, args: Args, ctx: ToolContext, intent: WriteIntent | None) -> ToolResult:
        root = _existing(ctx, args.opt_text("path"))
        pattern = args.opt_text("pattern")
        total = 0

        def shown() -> Iterator[str]:
            nonlocal total
            for path in _selected(ctx, root, pattern):
                total += 1
                yield display(ctx, path)

        # nsmallest keeps memory bounded by the cap, however many files match.
        paths = heapq.nsmallest(LIST_MAX, shown())
        if not paths:
            return ToolResult(output="no files match" + (f" {pattern}" if pattern else ""))
        body = "\n".join(paths)
        if total > len(paths):
            body += f"\n… {total - len(paths):,} more (narrow the pattern or the path)"
        return ToolResult(output=body)


class Grep(BuiltinTool):
    """grep{pattern, path?, glob?}: lines of text files matching a Python regex."""

    name = "grep"
    effect: EffectClass = "read_only"
    description = (
        "Search text files in the workspace for a Python regular expression and return matching "
        "lines as `path:line:text`. `path` is a file or directory (default: the whole workspace); "
        "`glob` filters file names like list_files' pattern (e.g. `*.py`). Use `(?i)` for "
        f"case-insensitive search. Binary files are skipped. At most {GREP_MAX_MATCHES} matches."
    )
    parameters = schema(
        {
            "pattern": {"type": "string", "description": "Python regular expression."},
            "path": {"type": "string", "description": "File or directory, relative to workspace."},
            "glob": {"type": "string", "description": "Only files matching this glob."},
        },
        ["pattern"],
    )

    def execute(self, args: Args, ctx: ToolContext, intent: WriteIntent | None) -> ToolResult:
        pattern = args.text("pattern")
        try:
            regex = re.compile(pattern)
        except re.error as err:
            raise ToolError(
                f"the pattern is not a valid Python regex ({err}); escape special characters "
                "with a backslash"
            ) from err
        root = _existing(ctx, args.opt_text("path"))
        lines: list[str] = []
        used = files = 0
        full = False
        for path in _selected(ctx, root, args.opt_text("glob")):
            hit = False
            for line in _grep_file(ctx, path, regex):
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
            tail = (
                f"({_plural(len(lines), 'match', 'matches')} in {_plural(files, 'file', 'files')})"
            )
        return ToolResult(output="\n".join([*lines, tail]))


def _grep_file(ctx: ToolContext, path: str, regex: re.Pattern[str]) -> Iterator[str]:
    """The file's matching lines as `path:line:text`; nothing for binary or unreadable files."""
    real = os.path.realpath(path)
    if not is_inside(ctx, real) and not ctx.outside_allowed:
        return  # a symlink leading out of the workspace: not ours to read
    name = display(ctx, path)
    try:
        # Only regular files: opening a FIFO would wait forever for a writer.
        if not stat.S_ISREG(os.stat(real).st_mode) or is_binary(sniff(real)):
            return
        with open(real, "rb") as f:
            for n, (head, _) in enumerate(iter_lines(f, GREP_LINE_BYTES), start=1):
                text = decode(head)
                found = regex.search(text)
                if found is not None:
                    yield f"{name}:{n}:{_window(text, found.start())}"
    except OSError:
        return  # unreadable files are skipped, as grep -s does


def _window(text: str, at: int) -> str:
    """The line, or a window of it around `at` when it is long."""
    if len(text) <= GREP_SHOW_CHARS:
        return text
    start = max(0, at - GREP_SHOW_CHARS // 3)
    end = start + GREP_SHOW_CHARS
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"
