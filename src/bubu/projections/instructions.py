"""Project instructions (AGENTS.md, or CLAUDE.md where a directory has none), as the log records
them: which files the model was given, with which bytes, and where in the request.

- The session's first read (a hidden `start` note, before any model call) is part of the stable
  prefix: it is appended to the system prompt, in a fixed order (the workspace root first, then
  deeper directories), and never rewritten, so the provider's prefix cache keeps hitting.
- A file under a directory the model reads or writes for the first time, and a file that changed
  since it was recorded, enter as visible notes in the history (`directory`, `changed`): the
  model reads them where they happened.

Everything here is a pure function of the log: a recovered turn sees exactly the text that was
recorded, whatever the files on disk say by now.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from bubu.events import (
    InstructionFile,
    ProjectInstructions,
    Record,
    SkillEntry,
    SkillsListed,
    SystemNote,
    TurnStarted,
)

NAMES = ("AGENTS.md", "CLAUDE.md")
"""The file names looked for in each directory, preferred first: CLAUDE.md only counts where a
directory has no AGENTS.md."""

MAX_FILE_BYTES = 32 * 1024
"""The most of one file the model is given; a larger file is cut, and the cut is said."""

KINDS = ("project_instructions", "turn_started", "skills_listed")
"""The record kinds the fold reads."""


def directory_of(path: str) -> str:
    """The workspace-relative directory an instruction file `path` belongs to ("" for the root)."""
    head, _, _ = path.rpartition("/")
    return head


def depth_order(path: str) -> tuple[int, str]:
    """The fixed order of instruction files: the root first, then deeper directories, by name."""
    d = directory_of(path)
    return (0 if not d else d.count("/") + 1, d)


def chain(directory: str) -> list[str]:
    """The directories from the workspace root down to `directory` ("" is the root)."""
    parts = [p for p in directory.split("/") if p]
    return ["", *("/".join(parts[: i + 1]) for i in range(len(parts)))]


class InstructionsFold(msgspec.Struct):
    """What the log says about the session's project instructions."""

    enabled: bool = True
    """The latest turn's choice (`--no-project-instructions` turns it off)."""
    prefix: tuple[InstructionFile, ...] = ()
    """The files of the session's `start` note: the system prompt's part."""
    started: bool = False
    """Whether a `start` note was recorded (the prefix is fixed once the model was called)."""
    current: dict[str, InstructionFile] = msgspec.field(default_factory=dict)
    """The latest recorded file of each directory (sha256 "" once it was removed)."""
    seqs: dict[str, int] = msgspec.field(default_factory=dict)
    """The seq of the note that recorded each directory's latest file."""
    where: dict[str, str] = msgspec.field(default_factory=dict)
    """"prefix" or "history" for each directory's latest file."""
    skills: tuple[SkillEntry, ...] = ()
    """The skills of the session's first `SkillsListed` note: the system prompt's part."""
    skills_listed: bool = False

    def apply(self, r: Record) -> None:
        """Fold one record in."""
        c = r.event.content
        if not isinstance(c, SystemNote):
            return
        n = c.note
        if isinstance(n, TurnStarted):
            self.enabled = n.project_instructions
        elif isinstance(n, SkillsListed):
            if not self.skills_listed:
                self.skills_listed = True
                self.skills = tuple(n.skills)
        elif isinstance(n, ProjectInstructions):
            if n.cause == "start" and not self.started:
                self.started = True
                self.prefix = tuple(f for f in n.files if f.skipped is None and f.sha256)
            for f in n.files:
                d = directory_of(f.path)
                self.current[d] = f
                self.seqs[d] = r.seq
                self.where[d] = "prefix" if n.cause == "start" else "history"

    @property
    def directories(self) -> list[str]:
        """The directories whose instructions were recorded, root first."""
        return sorted(self.current, key=lambda d: depth_order(d + "/x"))


def fold_instructions(records: Iterable[Record]) -> InstructionsFold:
    """Fold records (those of `KINDS` suffice) into a fresh fold."""
    f = InstructionsFold()
    for r in records:
        f.apply(r)
    return f


def _body(f: InstructionFile) -> str:
    text = f.text.rstrip("\n")
    if f.truncated:
        text += (
            f"\n[{f.path} is {f.size:,} bytes; only its first {MAX_FILE_BYTES:,} bytes are "
            "given here (the size cap for project instructions). Read the file for the rest.]"
        )
    return text


def system_section(files: Iterable[InstructionFile]) -> str:
    """The part of the system prompt that holds the prefix's instruction files ("" for none)."""
    given = sorted(
        (f for f in files if f.skipped is None and f.sha256), key=lambda f: depth_order(f.path)
    )
    if not given:
        return ""
    out = [
        "\n# Project instructions\n",
        "The project's maintainers wrote these instructions for agents working in this "
        "workspace. Follow them unless the user asks otherwise. Instructions in a deeper "
        "directory apply to the files under it and take precedence there.",
    ]
    for f in given:
        out.append(f"\n## {f.path}\n\n{_body(f)}")
    return "\n".join(out) + "\n"


def with_instructions(system: str, fold: InstructionsFold) -> str:
    """`system` followed by the prefix's project instructions (when the turn gives them) and
    the skills the session was given."""
    from bubu.projections import skills

    section = system_section(fold.prefix) if fold.enabled else ""
    return system + section + skills.system_section(fold.skills)


def history_text(note: ProjectInstructions) -> str:
    """A visible note as the model reads it in the history."""
    lines: list[str] = []
    for f in sorted(note.files, key=lambda f: depth_order(f.path)):
        d = directory_of(f.path)
        scope = f"the files under {d}/" if d else "the whole workspace"
        if not f.sha256:
            lines.append(
                f"[Project instructions: {f.path} was removed; what it said no longer applies.]"
            )
        elif f.skipped is not None:
            lines.append(f"[Project instructions: {f.path} is not given: {f.skipped}.]")
        elif note.cause == "changed":
            lines.append(
                f"[Project instructions: {f.path} changed; this is its new text, which applies "
                f"to {scope} and replaces what it said before.]\n{_body(f)}"
            )
        else:
            lines.append(
                f"[Project instructions from {f.path}, which apply to {scope}:]\n{_body(f)}"
            )
    return "\n\n".join(lines)


def restated_text(notes: Iterable[ProjectInstructions]) -> str:
    """The latest version of each file the `notes` gave (a summary covers them), "" for none."""
    latest: dict[str, InstructionFile] = {}
    for n in notes:
        for f in n.files:
            latest[directory_of(f.path)] = f
    given = [f for f in latest.values() if f.sha256 and f.skipped is None]
    if not given:
        return ""
    return history_text(ProjectInstructions(cause="directory", files=given))


def note_line(note: ProjectInstructions) -> str:
    """The note as a person reads it in the transcript."""
    parts = []
    for f in note.files:
        if not f.sha256:
            parts.append(f"{f.path} removed")
        elif f.skipped is not None:
            parts.append(f"{f.path} not given ({f.skipped})")
        else:
            cut = f", cut to {MAX_FILE_BYTES:,}" if f.truncated else ""
            parts.append(f"{f.path} ({f.size:,} bytes{cut})")
    what = {
        "start": "project instructions",
        "directory": "project instructions picked up",
        "changed": "project instructions changed",
    }[note.cause]
    return f"{what}: " + ", ".join(parts)


__all__ = [
    "KINDS",
    "MAX_FILE_BYTES",
    "NAMES",
    "InstructionsFold",
    "chain",
    "depth_order",
    "directory_of",
    "fold_instructions",
    "history_text",
    "note_line",
    "restated_text",
    "system_section",
    "with_instructions",
]
