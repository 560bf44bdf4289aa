"""File tools: read_file (read only) and the provable writes write_file and edit_file.

A provable write is split in two (DESIGN §4): `prepare` reads the file and computes exactly what
will be written, with the sha-256 before and after, so the dispatch can record them; `run` then
writes exactly that content atomically (temporary file, fsync, rename, fsync of the directory),
so the file is only ever *before* or *after* and recovery can tell which with `file_sha256`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import tempfile
from typing import BinaryIO

from bubu.errors import ToolError
from bubu.events import EffectClass
from bubu.tools.base import JSON, ToolContext, ToolResult, WriteIntent
from bubu.tools.workspace import (
    Args,
    BuiltinTool,
    cut_line,
    guard,
    is_binary,
    iter_lines,
    os_error_text,
    schema,
    sniff,
)

READ_LIMIT = 2000
"""Lines read_file shows when no limit is given."""

READ_MAX_CHARS = 100_000
"""The most text one read_file result holds; past it the result says where to continue."""

LINE_CHARS = 2000
"""Longer lines are cut, saying how many bytes were left out."""

_HASH_CHUNK = 1 << 20


def file_sha256(path: str | os.PathLike[str]) -> str | None:
    """The sha-256 hex of a file's bytes, or None when there is no file; recovery compares it.

    Raises OSError when the path exists but cannot be read (a directory, no permission).
    """
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_HASH_CHUNK):
                h.update(chunk)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return h.hexdigest()


# ---- read_file ----------------------------------------------------------------------------------


class ReadFile(BuiltinTool):
    """read_file{path, offset?, limit?}: numbered lines of a text file."""

    name = "read_file"
    effect: EffectClass = "read_only"
    description = (
        "Read a text file in the workspace. Lines come numbered like `cat -n`; `offset` is the "
        f"first line to show (1-based) and `limit` how many lines (default {READ_LIMIT}). "
        f"Lines longer than {LINE_CHARS} bytes are cut. Binary files are reported, not shown. "
        "When the file is longer than one read, the result says which offset to read next."
    )
    parameters = schema(
        {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "offset": {"type": "integer", "description": "First line to show, 1-based."},
            "limit": {"type": "integer", "description": "How many lines to show."},
        },
        ["path"],
    )

    def execute(self, args: Args, ctx: ToolContext, intent: WriteIntent | None) -> ToolResult:
        raw = args.text("path")
        offset = args.integer("offset", 1, minimum=1)
        limit = args.integer("limit", READ_LIMIT, minimum=1)
        path = guard(ctx, raw)
        if os.path.isdir(path):
            raise ToolError(f"{raw} is a directory; use list_files to see what it holds")
        if not os.path.exists(path):
            raise ToolError(f"{raw} does not exist; use list_files to find the right path")
        st = os.stat(path)
        # Opening a FIFO or a device could wait forever or never end.
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{raw} is not a regular file; it cannot be read")
        size = st.st_size
        if is_binary(sniff(path)):
            return ToolResult(output=f"{raw} is a binary file ({size:,} bytes); it is not shown.")
        shown: list[str] = []
        used = total = 0
        with open(path, "rb") as f:
            for n, (head, length) in enumerate(iter_lines(f, LINE_CHARS), start=1):
                total = n
                if n < offset:
                    continue
                line = f"{n:6}\t{cut_line(head, length, LINE_CHARS)}"
                shown.append(line)
                used += len(line) + 1
                if len(shown) >= limit or used >= READ_MAX_CHARS:
                    total += _count_rest(f)
                    break
        if total == 0:
            return ToolResult(output=f"{raw} is empty.")
        if offset > total:
            raise ToolError(f"{raw} has {total:,} lines; offset {offset:,} is past the end")
        last = offset + len(shown) - 1
        body = "\n".join(shown)
        if offset == 1 and last == total:
            return ToolResult(output=body)
        more = f"; next: offset={last + 1}" if last < total else "; end of file"
        return ToolResult(output=f"{body}\n(lines {offset:,}–{last:,} of {total:,}{more})")


def _count_rest(f: BinaryIO) -> int:
    """How many lines are left in `f` from its position (at the start of a line)."""
    count, last = 0, b"\n"
    while chunk := f.read(_HASH_CHUNK):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (0 if last == b"\n" else 1)


# ---- writes -------------------------------------------------------------------------------------


_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def _check_writable(raw: str, path: str) -> os.stat_result | None:
    """The existing file's status, to keep its mode (None when absent); raise if not writable."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{raw} is a directory; give the path of a file")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{raw} is not a regular file; it cannot be written")
    # os.access alone says yes to root; a file without any write bit is read-only on purpose.
    if not st.st_mode & _WRITE_BITS or not os.access(path, os.W_OK):
        raise ToolError(
            f"{raw} is read-only; it was not changed (ask the user to make it writable)"
        )
    return st


def _read_current(raw: str, path: str) -> bytes | None:
    _check_writable(raw, path)
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _intent(path: str, before: bytes | None, after: bytes) -> WriteIntent:
    return WriteIntent(
        path=path,
        before_sha256=None if before is None else hashlib.sha256(before).hexdigest(),
        after_sha256=hashlib.sha256(after).hexdigest(),
        content=after,
    )


def _umask() -> int:
    # os.umask can only be read by setting it, which races with other threads; Linux shows it here.
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_parents(directory: str) -> None:
    """Create missing parent directories, syncing each new entry into its parent."""
    missing: list[str] = []
    d = directory
    while not os.path.isdir(d):
        missing.append(d)
        d = os.path.dirname(d)
    for new in reversed(missing):
        os.mkdir(new)
        _fsync_dir(os.path.dirname(new))


def atomic_write(path: str, content: bytes, like: os.stat_result | None) -> None:
    """Replace `path` with `content` so that it is always wholly before or wholly after.

    Writes a temporary file in the same directory, fsyncs it, renames it over the target and
    fsyncs the directory. The new file keeps the mode (and, when allowed, the owner) of `like`,
    the file it replaces; without one it is made as `open` would make it.
    """
    directory = os.path.dirname(path)
    _make_parents(directory)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            if like is None:
                os.fchmod(f.fileno(), 0o666 & ~_umask())
            else:
                # Only root may give a file away; anyone else already owns what they create.
                with contextlib.suppress(PermissionError):
                    os.fchown(f.fileno(), like.st_uid, like.st_gid)
                os.fchmod(f.fileno(), stat.S_IMODE(like.st_mode))
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def stray_temp_files(path: str) -> list[str]:
    """Temporary files `atomic_write` left beside `path` because its process was killed mid-write."""
    directory, base = os.path.split(path)
    pattern = re.compile(rf"\.{re.escape(base)}\.[a-z0-9_]{{8}}\.tmp")
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names if pattern.fullmatch(n)]


class _Write(BuiltinTool):
    """What write_file and edit_file share: performing a prepared intent."""

    effect: EffectClass = "provable_write"

    def execute(self, args: Args, ctx: ToolContext, intent: WriteIntent | None) -> ToolResult:
        if intent is None:
            intent = self.prepare(dict(args.values), ctx)
            assert intent is not None
        raw = args.text("path")
        # Checked again at write time: the path may have been swapped for a symlink since prepare.
        path = guard(ctx, raw)
        if path != intent.path:
            raise ToolError(f"{raw} now resolves to {path}, not {intent.path}; nothing was written")
        like = _check_writable(raw, path)
        now = file_sha256(path)
        if now == intent.after_sha256:
            return ToolResult(output=f"{raw} already has the intended content; nothing to do.")
        if now != intent.before_sha256:
            raise ToolError(f"{raw} changed since this call was prepared; read it again and retry")
        atomic_write(path, intent.content, like)
        return ToolResult(output=self.summary(raw, intent))

    def prepare(self, args: dict[str, JSON], ctx: ToolContext) -> WriteIntent | None:
        """What the write will do, with the file's hash now and after; ToolError if it cannot."""
        try:
            return self.plan(Args.check(self.parameters, args), ctx)
        except OSError as err:
            raise ToolError(os_error_text(err)) from err

    def plan(self, args: Args, ctx: ToolContext) -> WriteIntent:
        """Compute the intent from checked arguments."""
        raise NotImplementedError

    def summary(self, raw: str, intent: WriteIntent) -> str:
        """What the model is told after a successful write."""
        raise NotImplementedError


def _size(data: bytes) -> str:
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return f"{len(data):,} bytes, {lines:,} {'line' if lines == 1 else 'lines'}"


class WriteFile(_Write):
    """write_file{path, content}: create or replace a file."""

    name = "write_file"
    description = (
        "Write a file in the workspace with exactly `content` (UTF-8), creating it and its parent "
        "directories if needed and replacing it whole if it exists. For small changes to an "
        "existing file prefer edit_file."
    )
    parameters = schema(
        {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "content": {"type": "string", "description": "The whole new content of the file."},
        },
        ["path", "content"],
    )

    def plan(self, args: Args, ctx: ToolContext) -> WriteIntent:
        """Resolve the target and hash it as it is now and as it will be."""
        raw = args.text("path")
        path = guard(ctx, raw)
        before = _read_current(raw, path)
        return _intent(path, before, _encode(args.text("content")))

    def summary(self, raw: str, intent: WriteIntent) -> str:
        verb = "created" if intent.before_sha256 is None else "replaced"
        return f"{verb} {raw} ({_size(intent.content)})."


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ToolError(
            "the text contains a lone surrogate character; it cannot be written"
        ) from err


class EditFile(_Write):
    """edit_file{path, old, new, replace_all?}: replace exact text in a file."""

    name = "edit_file"
    description = (
        "Replace the exact text `old` with `new` in a file of the workspace. `old` must occur "
        "exactly once (include surrounding lines to make it unique) unless `replace_all` is true, "
        "which replaces every occurrence. Whitespace and indentation must match the file."
    )
    parameters = schema(
        {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "old": {"type": "string", "description": "The exact text to replace."},
            "new": {"type": "string", "description": "The text to put in its place."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of exactly one (default false).",
            },
        },
        ["path", "old", "new"],
    )

    def plan(self, args: Args, ctx: ToolContext) -> WriteIntent:
        """Apply the edit in memory; raise ToolError when `old` is absent or ambiguous."""
        raw = args.text("path")
        old, new = _encode(args.text("old")), _encode(args.text("new"))
        if not old:
            raise ToolError("old is empty; give the exact text to replace, or use write_file")
        if old == new:
            raise ToolError("old and new are the same; there is nothing to change")
        path = guard(ctx, raw)
        before = _read_current(raw, path)
        if before is None:
            raise ToolError(f"{raw} does not exist; use write_file to create it")
        found = _occurrences(before, old)
        if found == 0:
            raise ToolError(
                f"old was not found in {raw}; read the file and copy the text exactly, "
                "whitespace included"
            )
        if found > 1 and not args.flag("replace_all", False):
            raise ToolError(
                f"old was found {found} times in {raw}; include more surrounding text to make it "
                "unique, or set replace_all to true"
            )
        return _intent(path, before, before.replace(old, new))

    def summary(self, raw: str, intent: WriteIntent) -> str:
        return f"edited {raw} ({_size(intent.content)})."


def _occurrences(data: bytes, needle: bytes) -> int:
    """How many places `needle` starts at in `data`, overlapping ones included."""
    count, at = 0, data.find(needle)
    while at != -1:
        count += 1
        at = data.find(needle, at + 1)
    return count
