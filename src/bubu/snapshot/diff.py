"""What changed between two snapshots: per path, with line counts, and as a unified diff.

Line counts and the diff come from `difflib` over the objects in the store; a file that is not
UTF-8 text (or holds a NUL byte) is "binary" and counted by size only.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from bubu.snapshot import tree
from bubu.snapshot.tree import Change, ChangeKind, GetObject

DIFF_BYTES = 4 << 20
"""A file larger than this is diffed by size only (difflib is quadratic at worst)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Changed:
    """One changed path: how, and by how many lines (None for a binary or very large file)."""

    path: str
    kind: ChangeKind
    added: int | None
    removed: int | None
    mode_only: bool = False

    def line(self) -> str:
        """`modified src/a.py (+3 −1)`: the path as a person or a model reads it."""
        if self.mode_only:
            return f"{self.kind} {self.path} (mode only)"
        if self.added is None or self.removed is None:
            return f"{self.kind} {self.path} (binary)"
        counts = [f"+{self.added}"] if self.kind != "deleted" else []
        counts += [f"−{self.removed}"] if self.kind != "added" else []
        return f"{self.kind} {self.path} ({' '.join(counts)})"


def _text(get: GetObject, state: tree.FileState | None) -> list[str] | None:
    """The lines of a file's object ([] for none), or None when it is binary or too large."""
    if state is None:
        return []
    if state.size > DIFF_BYTES or state.mode == tree.LINK:
        return (
            None
            if state.mode != tree.LINK
            else [f"-> {(get(state.sha256) or b'').decode('utf-8', 'replace')}\n"]
        )
    data = get(state.sha256)
    if data is None or b"\0" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _hunks(a: list[str], b: list[str], path: str, kind: ChangeKind) -> Iterator[str]:
    old = "/dev/null" if kind == "added" else f"a/{path}"
    new = "/dev/null" if kind == "deleted" else f"b/{path}"
    for line in difflib.unified_diff(a, b, old, new):
        yield line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"


def summarize(get: GetObject, changes: Sequence[Change]) -> list[Changed]:
    """Each change with its line counts."""
    out = []
    for c in changes:
        a, b = _text(get, c.old), _text(get, c.new)
        if a is None or b is None:
            out.append(Changed(path=c.path, kind=c.kind, added=None, removed=None))
            continue
        if c.old is not None and c.new is not None and c.old.sha256 == c.new.sha256:
            out.append(Changed(path=c.path, kind=c.kind, added=0, removed=0, mode_only=True))
            continue
        added = removed = 0
        for line in _hunks(a, b, c.path, c.kind):
            if line.startswith("+") and not line.startswith("+++"):
                added += 1
            elif line.startswith("-") and not line.startswith("---"):
                removed += 1
        out.append(Changed(path=c.path, kind=c.kind, added=added, removed=removed))
    return out


def unified(get: GetObject, changes: Sequence[Change]) -> str:
    """The unified diff of the changes (a binary file as one line saying so)."""
    parts: list[str] = []
    for c in changes:
        a, b = _text(get, c.old), _text(get, c.new)
        if c.old is not None and c.new is not None and c.old.mode != c.new.mode:
            parts.append(f"mode {c.path}: {c.old.mode:o} -> {c.new.mode:o}\n")
        if a is None or b is None:
            parts.append(f"Binary file {c.path} {c.kind}\n")
            continue
        parts.extend(_hunks(a, b, c.path, c.kind))
    return "".join(parts)


def stat_lines(changed: Sequence[Changed]) -> list[str]:
    """One line per path and a total, like `git diff --stat`."""
    lines = [c.line() for c in changed]
    plus = sum(c.added or 0 for c in changed)
    minus = sum(c.removed or 0 for c in changed)
    n = len(changed)
    lines.append(f"{n} path{'s' if n != 1 else ''} changed, +{plus} −{minus}")
    return lines
