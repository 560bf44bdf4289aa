"""What a snapshot leaves out: the workspace's own `.gitignore` files, and Bubu's list.

Matching is `pathspec`'s `GitIgnoreSpec` (git's own semantics, negation and directory patterns
included), one spec per directory that has a `.gitignore`, the deepest deciding first. Bubu's
list names what is rebuilt rather than written by hand, or is another tool's store: ignoring a
path also means a rewind or a checkout cannot bring it back, so the list stays short.
"""

from __future__ import annotations

from dataclasses import dataclass

import pathspec

ALWAYS_IGNORED = frozenset(
    {
        ".git",  # git's own store (a shadow copy of it would double the workspace)
        ".hg",
        ".svn",
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
    }
)
"""Names left out at any depth, whatever the ignore files say. `.bubu/` (the workspace's own
Bubu settings, written by a person) is kept."""


@dataclass(frozen=True, slots=True)
class Rules:
    """The ignore specs in force in one directory: (directory prefix, spec), outermost first."""

    specs: tuple[tuple[str, pathspec.GitIgnoreSpec], ...] = ()

    def within(self, prefix: str, gitignore: str | None) -> Rules:
        """The rules of the subdirectory `prefix` (with its trailing slash), given the text of
        its own `.gitignore` if it has one."""
        if gitignore is None:
            return self
        spec = pathspec.GitIgnoreSpec.from_lines(gitignore.splitlines())
        return Rules((*self.specs, (prefix, spec)))

    def ignored(self, path: str, *, directory: bool) -> bool:
        """Whether the relative `path` is ignored (Bubu's list first, then the deepest rule)."""
        name = path.rsplit("/", 1)[-1]
        return name in ALWAYS_IGNORED or self.gitignored(path, directory=directory)

    def gitignored(self, path: str, *, directory: bool) -> bool:
        """Whether the ignore files alone leave the relative `path` out (the deepest decides)."""
        probe = path + "/" if directory else path
        for prefix, spec in reversed(self.specs):
            got = spec.check_file(probe[len(prefix) :])
            if got.include is not None:
                return bool(got.include)
        return False


NO_RULES = Rules()
"""The rules above the workspace's root (one object, so that caches keyed by it hold)."""
