"""File tools: read_file (read only) and the provable writes write_file and edit_file.

A provable write is split in two (DESIGN §4): `prepare` reads the file and computes exactly what
will be written, with the sha-256 before and after, so the dispatch can record them; `run` then
writes exactly that content atomically (temporary file, fsync, rename, fsync of the directory),
so the file is only ever *before* or *after* and recovery can tell which with `file_sha256`.

Every file is opened beneath the workspace descriptor (`bubu.tools.guard`); a write resolves its
directory once, then checks the hash, creates the temporary file, renames and fsyncs relative to
that directory's descriptor, holding the file's write lock (`bubu.tools.writelock`) from the check
to the rename, so no other Bubu writer comes in between.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Iterator
from typing import Annotated, BinaryIO

from msgspec import Meta

from bubu.errors import ToolError
from bubu.toolfacts import ToolFacts
from bubu.tools.base import ToolContext, ToolResult, WriteIntent
from bubu.tools.decorator import tool
from bubu.tools.guard import Escape, Located, Root, fsync_dir, locate, open_beneath
from bubu.tools.schema import Arguments
from bubu.tools.workspace import (
    SNIFF_BYTES,
    Target,
    beneath,
    cut_line,
    is_binary,
    iter_lines,
    os_error_text,
)
from bubu.tools.writelock import write_lock

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


UNREACHABLE = "unreachable: the path now leads out of the workspace"
"""What `sha256_beneath` reports for a file a symlink now leads out to: it matches no hash."""


@contextlib.contextmanager
def _dir_beneath(workspace: str, path: str) -> Iterator[Located | None]:
    """The directory holding `path` (absolute) opened beneath `workspace` when it lies inside,
    else by name; None when it does not exist. Raises Escape when it now leads out."""
    root_path = os.path.realpath(workspace)
    rel = os.path.relpath(path, root_path)
    try:
        if rel == os.pardir or rel.startswith(os.pardir + os.sep):
            root, rel = Root.open(os.sep), path.lstrip(os.sep)
        else:
            root = Root.open(root_path)
    except OSError:
        yield None
        return
    with root:
        try:
            loc = locate(root, rel)
        except (FileNotFoundError, NotADirectoryError):
            yield None
            return
        with loc:
            yield loc


def sha256_beneath(workspace: str, path: str) -> str | None:
    """`file_sha256` of a dispatched write's target, opened beneath the workspace: what recovery
    compares with the recorded hashes (`UNREACHABLE` when a symlink now leads out)."""
    try:
        with _dir_beneath(workspace, path) as loc:
            if loc is None:
                return None
            try:
                fd = os.open(loc.name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=loc.fd)
            except FileNotFoundError:
                return None
            with os.fdopen(fd, "rb") as f:
                h = hashlib.sha256()
                while chunk := f.read(_HASH_CHUNK):
                    h.update(chunk)
                return h.hexdigest()
    except Escape:
        return UNREACHABLE
    except OSError as err:
        return UNREACHABLE if err.errno == errno.ELOOP else f"unreadable: {os_error_text(err)}"


def remove_stray_temp_files(workspace: str, path: str) -> None:
    """Remove the temporary files a killed `atomic_write` left beside `path`, in the directory
    found beneath the workspace (never through a symlink leading out)."""
    pattern = re.compile(rf"\.{re.escape(os.path.basename(path))}\.[a-z0-9_]{{8}}\.tmp")
    with contextlib.suppress(OSError, Escape), _dir_beneath(workspace, path) as loc:
        if loc is None:
            return
        for name in os.listdir(loc.fd):
            if pattern.fullmatch(name):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=loc.fd)


# ---- read_file ----------------------------------------------------------------------------------


FilePath = Annotated[str, "File path, relative to the workspace."]
Line = Annotated[int, Meta(ge=1)]


class ReadFileArgs(Arguments):
    """The arguments of read_file."""

    path: FilePath
    offset: Annotated[Line, "First line to show, 1-based."] = 1
    limit: Annotated[Line, "How many lines to show."] = READ_LIMIT


def _read_file(args: ReadFileArgs, ctx: ToolContext) -> ToolResult:
    """read_file{path, offset?, limit?}: numbered lines of a text file."""
    raw, offset, limit = args.path, args.offset, args.limit
    with beneath(ctx, raw) as t:
        try:
            fd = open_beneath(t.root, t.rel, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise ToolError(
                f"{raw} does not exist; use list_files to find the right path"
            ) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                raise ToolError(f"{raw} is a directory; use list_files to see what it holds")
            # Reading a FIFO or a device could wait forever or never end.
            raise ToolError(f"{raw} is not a regular file; it cannot be read")
        with os.fdopen(fd, "rb") as f:
            head = f.read(SNIFF_BYTES)
            image = _image(raw, head, f, st.st_size, ctx)
            if image is not None:
                return image
            if is_binary(head):
                return ToolResult(
                    output=f"{raw} is a binary file ({st.st_size:,} bytes); it is not shown."
                )
            f.seek(0)
            shown, total = _numbered(f, offset, limit)
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


def _image(raw: str, head: bytes, f: BinaryIO, size: int, ctx: ToolContext) -> ToolResult | None:
    """The result of reading an image file: the image itself for a model that is shown images,
    else what it is; None when the file is not an image."""
    from bubu import images

    media_type = images.sniff(head)
    if media_type is None:
        return None
    kind = media_type.removeprefix("image/").upper()
    if not ctx.images:
        return ToolResult(
            output=f"{raw} is a {kind} image ({size:,} bytes); this model is not shown images, "
            "so its content cannot be read"
        )
    if size > images.MAX_IMAGE_BYTES:
        return ToolResult(
            output=f"{raw} is a {kind} image of {size:,} bytes, larger than the "
            f"{images.MAX_IMAGE_BYTES // 2**20} MB an image may have; it is not shown"
        )
    f.seek(0)
    data = f.read(images.MAX_IMAGE_BYTES + 1)
    return ToolResult(
        output=f"{raw}: {kind} image, {len(data):,} bytes", images=((media_type, data),)
    )


def _numbered(f: BinaryIO, offset: int, limit: int) -> tuple[list[str], int]:
    """The numbered lines from `offset` (at most `limit` of them, and `READ_MAX_CHARS`), and how
    many lines the file has."""
    shown: list[str] = []
    used = total = 0
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
    return shown, total


def _count_rest(f: BinaryIO) -> int:
    """How many lines are left in `f` from its position (at the start of a line)."""
    count, last = 0, b"\n"
    while chunk := f.read(_HASH_CHUNK):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (0 if last == b"\n" else 1)


# ---- writes -------------------------------------------------------------------------------------


_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def _check_writable(raw: str, st: os.stat_result) -> None:
    """Raise ToolError unless `st` is a regular file this process may write."""
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{raw} is a directory; give the path of a file")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{raw} is not a regular file; it cannot be written")
    # Root may write anything, but a file without any write bit is read-only on purpose.
    uid = os.geteuid()
    if uid == 0:
        bits = _WRITE_BITS
    elif st.st_uid == uid:
        bits = stat.S_IWUSR
    elif st.st_gid == os.getegid() or st.st_gid in os.getgroups():
        bits = stat.S_IWGRP
    else:
        bits = stat.S_IWOTH
    if not st.st_mode & bits:
        raise ToolError(
            f"{raw} is read-only; it was not changed (ask the user to make it writable)"
        )


def _read_fd(raw: str, fd: int) -> tuple[bytes, os.stat_result]:
    """The whole content of an open file that is to be replaced, and its status."""
    try:
        st = os.fstat(fd)
        _check_writable(raw, st)
    except BaseException:  # undone, then re-raised: Ctrl-C and exits too
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        return f.read(), st


def _read_current(raw: str, t: Target) -> bytes | None:
    try:
        fd = open_beneath(t.root, t.rel, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    return _read_fd(raw, fd)[0]


def _intent(path: str, before: bytes | None, after: bytes) -> WriteIntent:
    return WriteIntent(
        path=path,
        before_sha256=None if before is None else hashlib.sha256(before).hexdigest(),
        after_sha256=hashlib.sha256(after).hexdigest(),
        content=after,
        before=before,
    )


def _umask() -> int:
    # os.umask can only be read by setting it, which races with other threads; Linux shows it here.
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _make_parents(directory: str) -> None:
    """Create missing parent directories, syncing each new entry into its parent."""
    missing: list[str] = []
    d = directory
    while not os.path.isdir(d):
        missing.append(d)
        d = os.path.dirname(d)
    for new in reversed(missing):
        os.mkdir(new)
        parent = os.open(os.path.dirname(new), os.O_RDONLY | os.O_DIRECTORY)
        try:
            fsync_dir(parent)
        finally:
            os.close(parent)


def atomic_write_at(
    dir_fd: int, name: str, content: bytes, like: os.stat_result | None, mode: int | None = None
) -> None:
    """Replace the file `name` of the directory `dir_fd` with `content`, wholly or not at all.

    Writes a temporary file in that directory, fsyncs it, renames it over the target and fsyncs
    the directory, all relative to `dir_fd`. The new file keeps the mode (and, when allowed, the
    owner) of `like`, the file it replaces; without one it is made as `open` would make it.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            if mode is not None:  # the permission bits a snapshot recorded
                os.fchmod(f.fileno(), mode & 0o7777)
            elif like is None:
                os.fchmod(f.fileno(), 0o666 & ~_umask())
            else:
                # Only root may give a file away; anyone else already owns what they create.
                with contextlib.suppress(PermissionError):
                    os.fchown(f.fileno(), like.st_uid, like.st_gid)
                os.fchmod(f.fileno(), stat.S_IMODE(like.st_mode))
            os.fsync(f.fileno())
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:  # undone, then re-raised: Ctrl-C and exits too
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    fsync_dir(dir_fd)


def atomic_write(path: str, content: bytes, like: os.stat_result | None) -> None:
    """Replace `path` with `content` so that it is always wholly before or wholly after (see
    `atomic_write_at`); missing parent directories are created."""
    directory, name = os.path.split(os.path.abspath(path))
    _make_parents(directory)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        atomic_write_at(dir_fd, name, content, like)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def locked_path(path: str, ctx: ToolContext) -> Iterator[None]:
    """Hold `path` against every other Bubu write (`bubu.tools.writelock`) while a tool that
    writes by name checks and replaces it; missing parent directories are created."""
    directory, name = os.path.split(os.path.abspath(path))
    _make_parents(directory)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        with write_lock(dir_fd, name, cancel=ctx.cancel, shown=path):
            yield
    finally:
        os.close(dir_fd)


def stray_temp_files(path: str) -> list[str]:
    """Temporary files `atomic_write` left beside `path` because its process was killed
    mid-write."""
    directory, base = os.path.split(path)
    pattern = re.compile(rf"\.{re.escape(base)}\.[a-z0-9_]{{8}}\.tmp")
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names if pattern.fullmatch(n)]


def _current_at(raw: str, dir_fd: int, name: str) -> tuple[str | None, os.stat_result | None]:
    """The hash and status of the file `name` in `dir_fd` now (None, None when absent)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None, None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ToolError(
                f"{raw} was just replaced by a symlink; nothing was written, read it again"
            ) from err
        raise
    data, st = _read_fd(raw, fd)
    return hashlib.sha256(data).hexdigest(), st


class WriteArgs(Arguments):
    """What the arguments of write_file and edit_file share: the file."""

    path: FilePath


def _perform(raw: str, ctx: ToolContext, intent: WriteIntent, done: str) -> ToolResult:
    """Write exactly the prepared `intent` to `raw`, or nothing; `done` is what the model is told
    after the write (write_file and edit_file share this)."""
    # Resolved again at write time, beneath the workspace: the path may have been swapped for a
    # symlink since prepare, and the directory found now is the one written through.
    with beneath(ctx, raw) as t, locate(t.root, t.rel, create=True) as loc:
        path = t.root.absolute(loc.rel)
        if path != intent.path:
            raise ToolError(f"{raw} now resolves to {path}, not {intent.path}; nothing was written")
        with write_lock(loc.fd, loc.name, cancel=ctx.cancel, shown=raw):
            now, like = _current_at(raw, loc.fd, loc.name)
            if now == intent.after_sha256:
                return ToolResult(output=f"{raw} already has the intended content; nothing to do.")
            if now != intent.before_sha256:
                raise ToolError(
                    f"{raw} changed since this call was prepared; read it again and retry"
                )
            try:
                atomic_write_at(loc.fd, loc.name, intent.content, like)
            except FileNotFoundError as err:
                # Its temporary file (or the directory) was removed under it by someone else.
                raise ToolError(
                    f"{raw} was not written: its directory changed while it was being "
                    "written; look at it again and retry"
                ) from err
    return ToolResult(output=done)


def _size(data: bytes) -> str:
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return f"{len(data):,} bytes, {lines:,} {'line' if lines == 1 else 'lines'}"


class WriteFileArgs(WriteArgs):
    """The arguments of write_file."""

    content: Annotated[str, "The whole new content of the file."]


def _plan_write(args: WriteFileArgs, ctx: ToolContext) -> WriteIntent:
    """Resolve the target and hash it as it is now and as it will be."""
    raw = args.path
    with beneath(ctx, raw) as t:
        before = _read_current(raw, t)
        return _intent(t.path, before, _encode(args.content))


def _write_file(args: WriteFileArgs, ctx: ToolContext, intent: WriteIntent) -> ToolResult:
    """write_file{path, content}: create or replace a file."""
    verb = "created" if intent.before_sha256 is None else "replaced"
    return _perform(args.path, ctx, intent, f"{verb} {args.path} ({_size(intent.content)}).")


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ToolError(
            "the text contains a lone surrogate character; it cannot be written"
        ) from err


class EditFileArgs(WriteArgs):
    """The arguments of edit_file."""

    old: Annotated[str, "The exact text to replace."]
    new: Annotated[str, "The text to put in its place."]
    replace_all: Annotated[
        bool, "Replace every occurrence instead of exactly one (default false)."
    ] = False


def _plan_edit(args: EditFileArgs, ctx: ToolContext) -> WriteIntent:
    """Apply the edit in memory; raise ToolError when `old` is absent or ambiguous."""
    raw = args.path
    old, new = _encode(args.old), _encode(args.new)
    if not old:
        raise ToolError("old is empty; give the exact text to replace, or use write_file")
    if old == new:
        raise ToolError("old and new are the same; there is nothing to change")
    with beneath(ctx, raw) as t:
        before = _read_current(raw, t)
        path = t.path
    if before is None:
        raise ToolError(f"{raw} does not exist; use write_file to create it")
    found = _occurrences(before, old)
    if found == 0:
        raise ToolError(
            f"old was not found in {raw}; read the file and copy the text exactly, "
            "whitespace included"
        )
    if found > 1 and not args.replace_all:
        raise ToolError(
            f"old was found {found} times in {raw}; include more surrounding text to make it "
            "unique, or set replace_all to true"
        )
    return _intent(path, before, before.replace(old, new))


def _edit_file(args: EditFileArgs, ctx: ToolContext, intent: WriteIntent) -> ToolResult:
    """edit_file{path, old, new, replace_all?}: replace exact text in a file."""
    return _perform(args.path, ctx, intent, f"edited {args.path} ({_size(intent.content)}).")


def _occurrences(data: bytes, needle: bytes) -> int:
    """How many places `needle` starts at in `data`, overlapping ones included."""
    count, at = 0, data.find(needle)
    while at != -1:
        count += 1
        at = data.find(needle, at + 1)
    return count


# ---- the tools, declared like every tool --------------------------------------------------------


read_file = tool(
    effect="read_only",
    name="read_file",
    facts=ToolFacts(headline="path"),
    path_arg="path",
    description=(
        "Read a text file in the workspace. Lines come numbered like `cat -n`; `offset` is the "
        f"first line to show (1-based) and `limit` how many lines (default {READ_LIMIT}). "
        f"Lines longer than {LINE_CHARS} bytes are cut. Binary files are reported, not shown; "
        "PNG, JPEG, GIF and WebP images are shown as images to models that see them. "
        "When the file is longer than one read, the result says which offset to read next."
    ),
)(_read_file)

write_file = tool(
    effect="provable_write",
    name="write_file",
    facts=ToolFacts(headline="path"),
    path_arg="path",
    prepare=_plan_write,
    description=(
        "Write a file in the workspace with exactly `content` (UTF-8), creating it and its parent "
        "directories if needed and replacing it whole if it exists. For small changes to an "
        "existing file prefer edit_file."
    ),
)(_write_file)

edit_file = tool(
    effect="provable_write",
    name="edit_file",
    facts=ToolFacts(headline="path"),
    path_arg="path",
    prepare=_plan_edit,
    description=(
        "Replace the exact text `old` with `new` in a file of the workspace. `old` must occur "
        "exactly once (include surrounding lines to make it unique) unless `replace_all` is true, "
        "which replaces every occurrence. Whitespace and indentation must match the file."
    ),
)(_edit_file)
