"""The ignore rules of listing and searching: `.gitignore` files at any depth, matched with
`pathspec` as a workspace snapshot matches them (`bubu.snapshot.ignore`).

A walk reads each directory's `.gitignore` through the directory's own descriptor (no symlink
followed), after those of the directories above its start, from the workspace's root down. The
start itself is never ignored: a path the model names is searched.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace

from bubu.snapshot.ignore import NO_RULES, Rules
from bubu.tools.guard import Root, is_regular, locate

GITIGNORE = ".gitignore"
GITIGNORE_MAX_BYTES = 1 << 20
"""The most of one `.gitignore` that is read (past it, the rest is not)."""


def read_gitignore(dir_fd: int) -> str | None:
    """The text of the `.gitignore` in the directory `dir_fd`, or None (none, not a regular
    file, or unreadable)."""
    try:
        fd = os.open(GITIGNORE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            if not is_regular(f.fileno()):
                return None
            return f.read(GITIGNORE_MAX_BYTES).decode("utf-8", "replace")
        except OSError:
            return None


@dataclass(frozen=True, slots=True)
class WalkRules:
    """The ignore rules of one directory of a walk that starts at `base` (root-relative, ``""``
    for the root); the paths it is asked about are relative to the walk's start."""

    base: str
    rules: Rules = NO_RULES

    def _full(self, path: str) -> str:
        return f"{self.base}/{path}" if self.base and path else (self.base or path)

    def enter(self, dir_fd: int, path: str) -> WalkRules:
        """The rules below the directory `path` (open as `dir_fd`), its `.gitignore` added."""
        text = read_gitignore(dir_fd)
        if text is None:
            return self
        full = self._full(path)
        return replace(self, rules=self.rules.within(f"{full}/" if full else "", text))

    def ignored(self, path: str, *, directory: bool) -> bool:
        """Whether an ignore file in force leaves `path` out."""
        return self.rules.gitignored(self._full(path), directory=directory)


def rules_above(root: Root, rel: str, *, inside: bool) -> WalkRules:
    """The rules in force at the directory `rel` (root-relative) from the `.gitignore` files of
    the directories above it, up to the workspace's root (`inside`: the root is the workspace;
    elsewhere only the walk's own files count)."""
    base = "" if rel in (".", "") else rel
    rules = WalkRules(base="")
    if inside and base:
        parts = base.split("/")
        for depth in range(len(parts)):
            above = "/".join(parts[:depth])
            with contextlib.suppress(OSError), locate(root, above or ".") as loc:
                fd = os.open(loc.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=loc.fd)
                try:
                    rules = rules.enter(fd, above)
                finally:
                    os.close(fd)
    if base and rules.rules.gitignored(base, directory=True):
        return WalkRules(base=base)  # the model named an ignored directory: search it
    return replace(rules, base=base)
