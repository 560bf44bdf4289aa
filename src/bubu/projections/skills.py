"""The skills the model is told of, as the log records them (a `SkillsListed` note).

The session's first list is part of the stable prefix: it follows the project instructions in
the system prompt, in name order, and is never rewritten, so the provider's prefix cache keeps
hitting. Only names, descriptions and places are given; the model reads a skill's body and files
on demand with the `skill` tool, whose results are in the log like any other.
"""

from __future__ import annotations

from collections.abc import Iterable

from bubu.events import SkillEntry, SkillsListed


def system_section(skills: Iterable[SkillEntry]) -> str:
    """The part of the system prompt that lists the skills ("" for none)."""
    given = sorted(skills, key=lambda s: s.name)
    if not given:
        return ""
    out = [
        "\n# Skills\n",
        "These skills hold instructions and files for particular kinds of task. When a task "
        "matches a skill's description, read the skill first with skill{name} (and its other "
        "files with skill{name, file}), then follow it.\n",
    ]
    out += [f"- {s.name}: {s.description}" for s in given]
    return "\n".join(out) + "\n"


def note_line(note: SkillsListed) -> str:
    """The note as a person reads it in the transcript."""
    names = ", ".join(s.name for s in note.skills) or "none"
    return f"skills offered: {names}"


__all__ = ["note_line", "system_section"]
