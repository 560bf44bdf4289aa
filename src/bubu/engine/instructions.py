"""Reading project instructions (AGENTS.md, else CLAUDE.md) from the workspace for the log.

The files are read beneath the workspace's directory descriptor (`bubu.tools.guard`): a symlink
that points out of the workspace is not followed, nor one that resolves to a protected path, and
a protected directory (``.git/`` …) is never looked in; each such file is recorded as skipped,
with why. What was read is committed to the log (`ProjectInstructions` notes) and the request is
built from the log alone (`bubu.projections.instructions`): a recovered turn sees what was read
then, and a file changed since is noticed at the start of the next turn, as a new note.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bubu.events import (
    Event,
    InstructionFile,
    ProjectInstructions,
    Record,
    SkillEntry,
    SkillsListed,
    SystemNote,
)
from bubu.projections.instructions import (
    MAX_FILE_BYTES,
    NAMES,
    InstructionsFold,
    chain,
    with_instructions,
)
from bubu.tools import guard
from bubu.tools.protected import protected_reason
from bubu.tools.workspace import decode, drop_partial_utf8, is_binary

if TYPE_CHECKING:
    from bubu.engine.ports import Appender
    from bubu.projections.turn import CallState

NoteMaker = Callable[[ProjectInstructions | SkillsListed, bool], Event]
"""Builds the event of a note: `(note, visible) -> Event`."""

PATH_TOOLS = frozenset({"read_file", "write_file", "edit_file", "list_files", "grep"})
"""The tools whose `path` argument says which directory the model works in."""


def read_one(root: guard.Root, rel: str) -> InstructionFile | None:
    """The instruction file `rel` as it is now, None when there is none."""
    try:
        resolved = guard.resolve_beneath(root, rel)
    except guard.Escape as e:
        where = f" ({e.target})" if e.target else ""
        return InstructionFile(
            path=rel, skipped=f"a symlink that points outside the workspace{where}, not followed"
        )
    except OSError:
        return None
    if resolved != rel and protected_reason(resolved) is not None:
        return InstructionFile(path=rel, skipped=f"it resolves to the protected path {resolved}")
    try:
        fd = guard.open_beneath(root, rel, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except guard.Escape:
        return InstructionFile(path=rel, skipped="a symlink that points outside the workspace")
    except OSError as e:
        return InstructionFile(path=rel, skipped=f"it cannot be read ({e.strerror or e})")
    try:
        if not guard.is_regular(fd):
            return InstructionFile(path=rel, skipped="not a regular file")
        h, size, head = hashlib.sha256(), 0, bytearray()
        while chunk := os.read(fd, 1 << 16):
            h.update(chunk)
            size += len(chunk)
            if len(head) <= MAX_FILE_BYTES:
                head += chunk[: MAX_FILE_BYTES + 1 - len(head)]
    except OSError as e:
        return InstructionFile(path=rel, skipped=f"it cannot be read ({e.strerror or e})")
    finally:
        os.close(fd)
    if is_binary(bytes(head)):
        return InstructionFile(path=rel, sha256=h.hexdigest(), size=size, skipped="not text")
    truncated = size > MAX_FILE_BYTES
    data = drop_partial_utf8(bytes(head[:MAX_FILE_BYTES])) if truncated else bytes(head)
    return InstructionFile(
        path=rel, sha256=h.hexdigest(), size=size, text=decode(data), truncated=truncated
    )


def read_directory(root: guard.Root, directory: str) -> InstructionFile | None:
    """The instruction file of `directory` ("" for the root): its AGENTS.md, else its CLAUDE.md."""
    if directory and protected_reason(directory + "/x") is not None:
        return None  # never look inside .git/, .bubu/ …
    for name in NAMES:
        found = read_one(root, f"{directory}/{name}" if directory else name)
        if found is not None:
            return found
    return None


def _same(a: InstructionFile | None, b: InstructionFile | None) -> bool:
    if a is None or (not a.sha256 and a.skipped is None):
        return b is None or (not b.sha256 and b.skipped is None)
    return b is not None and (a.path, a.sha256, a.skipped) == (b.path, b.sha256, b.skipped)


def call_directory(root: guard.Root, raw: object, tool: str) -> str | None:
    """The workspace-relative directory a call's `path` argument works in, None when it names
    no place inside the workspace."""
    if not isinstance(raw, str) or not raw or "\0" in raw:
        return None
    path = raw
    if os.path.isabs(path):
        if path != root.path and not path.startswith(root.path.rstrip(os.sep) + os.sep):
            return None
        path = os.path.relpath(path, root.path)
    try:
        rel = guard.resolve_beneath(root, path)
    except (guard.Escape, OSError, ValueError):
        return None
    if rel == ".":
        return ""
    is_dir = tool in ("list_files", "grep") and os.path.isdir(root.absolute(rel))
    return rel if is_dir else rel.rpartition("/")[0]


def skill_entries(workspace: str) -> list[SkillEntry]:
    """The skills found now (`bubu.engine.extensions`), as a `SkillsListed` note records them."""
    from bubu.engine.extensions import skills

    return [
        SkillEntry(name=s.name, description=s.description, where=s.where, sha256=s.sha256)
        for s in skills(workspace)
    ]


@dataclass(eq=False)
class Instructions:
    """A runner's project instructions: the log's fold, and the directories looked in (and found
    without a file) by this process, so each is read once."""

    fold: InstructionsFold = field(default_factory=InstructionsFold)
    looked: set[str] = field(default_factory=set)

    def apply(self, r: Record) -> None:
        """Fold one record in."""
        self.fold.apply(r)

    def system(self, base: str) -> str:
        """The system prompt `base` with the prefix's instructions."""
        return with_instructions(base, self.fold)

    def at_turn_start(
        self,
        workspace: str,
        *,
        enabled: bool,
        called: bool,
        make_note: NoteMaker,
        skills: bool = False,
    ) -> list[Event]:
        """The notes a new turn starts with: the session's first read (`called`: the model was
        called already, so the prefix is fixed and a first read goes to the history too), or
        the files that changed since they were recorded; with `skills` (the host offers the
        `skill` tool), the skills found, listed once, before the model's first call."""
        notes: list[Event] = []
        if enabled:
            with contextlib.suppress(OSError):  # no workspace to read: the turn says so itself
                notes = self._turn_notes(workspace, called=called, make_note=make_note)
        if skills and not called and not self.fold.skills_listed:
            listed = skill_entries(workspace)
            if listed:
                notes.append(make_note(SkillsListed(skills=listed), False))
        return notes

    def _turn_notes(self, workspace: str, *, called: bool, make_note: NoteMaker) -> list[Event]:
        with guard.Root.open(workspace) as root:
            if not self.fold.started and not called:
                first = read_directory(root, "")
                if first is None:
                    return []
                return [make_note(ProjectInstructions(cause="start", files=[first]), False)]
            changed: list[InstructionFile] = []
            for d in sorted({"", *self.fold.current}, key=lambda d: (d.count("/"), d)):
                now, before = read_directory(root, d), self.fold.current.get(d)
                if _same(before, now):
                    continue
                if now is None:
                    assert before is not None
                    changed.append(InstructionFile(path=before.path))  # removed
                else:
                    changed.append(now)
        if not changed:
            return []
        return [make_note(ProjectInstructions(cause="changed", files=changed), True)]

    def after_tools(self, workspace: str, log: Appender, calls: Sequence[CallState]) -> None:
        """Give the model the instructions of directories its calls just worked in for the
        first time (each directory between the root and the file), as one visible note."""
        if not self.fold.enabled:
            return
        found: list[InstructionFile] = []
        try:
            wanted = self._directories(workspace, calls)
            if not wanted:
                return
            with guard.Root.open(workspace) as root:
                for d in wanted:
                    self.looked.add(d)
                    f = read_directory(root, d)
                    if f is not None:
                        found.append(f)
        except OSError:
            return  # the workspace itself is gone: the tools say so, not this
        if found:
            note = ProjectInstructions(cause="directory", files=found)
            log.append([log.event("system", "system", SystemNote(note=note))])

    def _directories(self, workspace: str, calls: Iterable[CallState]) -> list[str]:
        out: dict[str, None] = {}
        with guard.Root.open(workspace) as root:
            for c in calls:
                if c.name not in PATH_TOOLS:
                    continue
                d = call_directory(root, c.arguments.get("path"), c.name)
                if d is None:
                    continue
                for step in chain(d)[1:]:
                    if step not in self.fold.current and step not in self.looked:
                        out[step] = None
        return sorted(out, key=lambda d: (d.count("/"), d))


__all__ = ["PATH_TOOLS", "Instructions", "call_directory", "read_directory", "read_one"]
