"""V4A diffs: the patch format OpenAI's models write for the `apply_patch` tool (pure, no I/O).

A V4A diff names no line numbers. Each section starts with ``@@`` (optionally followed by an
anchor line to find first, such as a function's ``def`` line) and holds lines that start with a
space (context, kept), ``-`` (removed) or ``+`` (added); ``*** End of File`` says the section
ends at the file's end. A section's context and removed lines, in order, must be found in the
file at or after where the previous section ended; they are replaced by its context and added
lines. Matching is exact first, then ignoring trailing whitespace, then ignoring the indentation
too, as the format's own applier does.

A create operation's diff is every line of the new file prefixed with ``+``. The whole-patch form
(``*** Begin Patch`` … ``*** End Patch`` around ``*** Add File:``, ``*** Update File:`` and
``*** Delete File:`` sections) is split into those same per-file operations by `parse_patch`.

A diff that does not apply raises `DiffError`, which says where and why; nothing is half applied.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from bubu.errors import ToolError

OperationKind: TypeAlias = Literal["create_file", "update_file", "delete_file"]

BEGIN_PATCH = "*** Begin Patch"
END_PATCH = "*** End Patch"
END_OF_FILE = "*** End of File"
_HEADERS: dict[str, OperationKind] = {
    "*** Add File: ": "create_file",
    "*** Update File: ": "update_file",
    "*** Delete File: ": "delete_file",
}
_MOVE = "*** Move to: "
_UNIFIED = re.compile(r"-\d+(,\d+)? \+\d+(,\d+)? @@")


class DiffError(ToolError):
    """A diff that cannot be read or does not apply to the file it names."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """One file's change in a patch: its kind, path and (for create and update) its diff."""

    kind: OperationKind
    path: str
    diff: str = ""
    move_to: str | None = None


@dataclass(slots=True)
class _Section:
    anchor: str | None
    lines: list[tuple[str, str]] = field(default_factory=list)
    """Each line of the section: its mark (" " kept, "-" removed, "+" added) and its text."""
    at_end: bool = False

    @property
    def old(self) -> list[str]:
        return [text for mark, text in self.lines if mark != "+"]

    @property
    def changes(self) -> bool:
        return any(mark != " " for mark, _ in self.lines)

    def new(self, found: Sequence[str]) -> list[str]:
        """The section's lines after the change, context as the file has it (`found`)."""
        out, k = [], 0
        for mark, text in self.lines:
            if mark == "+":
                out.append(text)
                continue
            if mark == " ":
                out.append(found[k])
            k += 1
        return out


def apply_diff(original: str, diff: str, *, create: bool = False) -> str:
    """`original` with the V4A `diff` applied (`create`: the diff is a new file's content)."""
    lines = _diff_lines(diff)
    if create:
        return _created(lines)
    sections = _sections(lines)
    if not any(s.changes for s in sections):
        raise DiffError("the diff changes nothing: it has no line starting with + or -")
    body, newline = _split(original)
    at = 0
    for number, section in enumerate(sections, 1):
        at = _apply_section(body, section, at, number)
    return "\n".join(body) + ("\n" if newline and body else "")


def _diff_lines(diff: str) -> list[str]:
    lines = diff.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the diff's own final newline
    while lines and lines[-1].strip() == END_PATCH:
        lines.pop()
    return lines


def _created(lines: Sequence[str]) -> str:
    out = []
    for n, line in enumerate(lines, 1):
        if not line.startswith("+"):
            raise DiffError(
                f"line {n} of a new file's diff does not start with '+' ({_shown(line)}); "
                "every line of a created file is written as +TEXT"
            )
        out.append(line[1:])
    return "".join(f"{line}\n" for line in out)


def _sections(lines: Sequence[str]) -> list[_Section]:
    sections: list[_Section] = []
    for n, line in enumerate(lines, 1):
        if line.startswith("@@"):
            anchor = line[2:].strip()
            if _UNIFIED.match(anchor):
                anchor = ""  # a unified diff's line numbers: V4A places by context instead
            sections.append(_Section(anchor=anchor or None))
            continue
        if line.strip() == END_OF_FILE:
            if not sections:
                raise DiffError(f"line {n} of the diff ends a file before any change")
            sections[-1].at_end = True
            continue
        if not sections:
            sections.append(_Section(anchor=None))  # a diff may start without "@@"
        if line == "":
            sections[-1].lines.append((" ", ""))  # an empty context line without its space
        elif line[0] in " -+":
            sections[-1].lines.append((line[0], line[1:]))
        else:
            raise DiffError(
                f"line {n} of the diff starts with neither ' ', '+', '-' nor '@@' "
                f"({_shown(line)}); prefix context lines with one space"
            )
    return sections


def _split(text: str) -> tuple[list[str], bool]:
    """The lines of `text` and whether it ended with a newline (an empty text: no lines)."""
    if text == "":
        return [], True
    lines = text.split("\n")
    if lines[-1] == "":
        return lines[:-1], True
    return lines, False


_Same: TypeAlias = Callable[[str, str], bool]
_PASSES: tuple[_Same, ...] = (
    lambda a, b: a == b,
    lambda a, b: a.rstrip() == b.rstrip(),
    lambda a, b: a.strip() == b.strip(),
)


def _apply_section(body: list[str], s: _Section, at: int, number: int) -> int:
    if s.anchor is not None:
        found = _find(body, [s.anchor], at)
        if found is None:
            raise DiffError(
                f"section {number} of the diff starts at the line {_shown(s.anchor)}, which is "
                f"not in the file{_after(at)}; the file was not changed"
            )
        at = found + 1
    old = s.old
    if not old:
        where = len(body) if s.at_end else at
        added = s.new(())
        body[where:where] = added
        return where + len(added)
    start = None
    if s.at_end:
        start = _find(body, old, max(at, len(body) - len(old)))
    if start is None:
        start = _find(body, old, at)
    if start is None:
        raise DiffError(
            f"section {number} of the diff does not match the file{_after(at)}: its context and "
            f"removed lines (from {_shown(old[0])}, {len(old)} lines) are not there in that "
            "order; read the file again and send a diff of what it holds now. The file was not "
            "changed"
        )
    new = s.new(body[start : start + len(old)])
    body[start : start + len(old)] = new
    return start + len(new)


def _find(body: list[str], block: list[str], start: int) -> int | None:
    last, size = len(body) - len(block), len(block)
    i = start
    while i <= last:  # the exact pass, at list speed: most diffs match exactly
        try:
            i = body.index(block[0], i, last + 1)
        except ValueError:
            break
        if body[i : i + size] == block:
            return i
        i += 1
    for same in _PASSES[1:]:
        for i in range(start, last + 1):
            if all(same(body[i + k], line) for k, line in enumerate(block)):
                return i
    return None


def _after(at: int) -> str:
    return f" after line {at}" if at else ""


def _shown(line: str) -> str:
    return repr(line if len(line) <= 60 else line[:59] + "…")


# ---- the whole-patch form ---------------------------------------------------------------------


def parse_patch(text: str) -> list[Operation]:
    """The per-file operations of a ``*** Begin Patch`` … ``*** End Patch`` text, in order."""
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or lines[0].strip() != BEGIN_PATCH:
        raise DiffError(f"a patch starts with {BEGIN_PATCH!r}")
    if lines[-1].strip() != END_PATCH:
        raise DiffError(f"a patch ends with {END_PATCH!r}")
    ops: list[Operation] = []
    kind: OperationKind | None = None
    path = ""
    move: str | None = None
    body: list[str] = []

    def close() -> None:
        if kind is not None:
            diff = "".join(f"{line}\n" for line in body)
            ops.append(Operation(kind=kind, path=path, diff=diff, move_to=move))

    for n, line in enumerate(lines[1:-1], 2):
        header = next((h for h in _HEADERS if line.startswith(h)), None)
        if header is not None:
            close()
            kind, path, move, body = _HEADERS[header], line[len(header) :].strip(), None, []
            if not path:
                raise DiffError(f"line {n} of the patch names no file")
        elif kind is None:
            raise DiffError(f"line {n} of the patch comes before any *** Add/Update/Delete File")
        elif line.startswith(_MOVE) and kind == "update_file" and not body:
            move = line[len(_MOVE) :].strip()
        elif kind == "delete_file":
            raise DiffError(f"line {n} of the patch follows a *** Delete File, which takes none")
        else:
            body.append(line)
    close()
    if not ops:
        raise DiffError("the patch holds no file operation")
    return ops


# ---- making a diff (what the tests and a rewind's preview use) --------------------------------


def make_diff(before: str, after: str) -> str:
    """A V4A diff that turns `before` into `after`: each section's context reaches back to where
    the previous one ended, so it applies at exactly one place."""
    import difflib

    old, _ = _split(before)
    new, _ = _split(after)
    out: list[str] = []
    kept = 0  # the first line of `old` no section has covered yet
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        out.append("@@")
        out.extend(f" {line}" for line in old[kept:i1])
        out.extend(f"-{line}" for line in old[i1:i2])
        out.extend(f"+{line}" for line in new[j1:j2])
        kept = i2
    return "".join(f"{line}\n" for line in out)


__all__ = [
    "BEGIN_PATCH",
    "END_OF_FILE",
    "END_PATCH",
    "DiffError",
    "Operation",
    "OperationKind",
    "apply_diff",
    "make_diff",
    "parse_patch",
]
