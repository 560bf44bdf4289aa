"""Prompt files (custom slash commands) and skills, found in the workspace and in ``$BUBU_HOME``.

- A **prompt file** is ``NAME.md`` in ``.bubu/commands/`` or ``.claude/commands/`` of the
  workspace, or in ``$BUBU_HOME/commands/``; ``/NAME ARGS`` sends its body with ``$ARGUMENTS``
  (and ``$1`` … ``$9``) replaced. Its front matter may give a ``description``, an
  ``argument-hint``, a ``model`` and ``allowed-tools`` (command patterns approved while it runs,
  in Claude Code's ``Bash(git status:*)`` form or Bubu's ``git status *``). A workspace's prompt
  file comes with the repository: its model and tools count only in a trusted workspace; the
  user's own always do. Where two share a name, the user's own wins.
- A **skill** is a directory with a ``SKILL.md`` (front matter ``name`` and ``description``) in
  ``.bubu/skills/``, ``.claude/skills/`` or ``.agents/skills/`` of the workspace, or in
  ``$BUBU_HOME/skills/``. The model is given each skill's name and description; it reads the
  body and the skill's other files with the `skill` tool when a task calls for them.

Workspace files are read beneath the workspace's directory descriptor (`bubu.tools.guard`): a
symlink out of the workspace is not followed.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bubu import frontmatter
from bubu.engine.instructions import read_one
from bubu.tools import guard
from bubu.tools.places import bubu_home

Origin = Literal["workspace", "user"]

COMMAND_DIRS = (".bubu/commands", ".claude/commands")
SKILL_DIRS = (".bubu/skills", ".claude/skills", ".agents/skills")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
MAX_DESCRIPTION = 1024
MAX_SKILLS = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptFile:
    """One prompt file as found: where, its front matter and its body."""

    name: str
    path: str
    """Absolute."""
    origin: Origin
    sha256: str
    body: str
    description: str = ""
    argument_hint: str = ""
    model: str = ""
    allowed_tools: tuple[str, ...] = ()

    @property
    def chooses(self) -> list[str]:
        """What its front matter would choose for the turn (a model, tools)."""
        return [k for k, v in (("model", self.model), ("allowed-tools", self.allowed_tools)) if v]


@dataclass(frozen=True, slots=True, kw_only=True)
class Skill:
    """One skill as found: its name, what it is for, and its directory."""

    name: str
    description: str
    directory: str
    """Absolute."""
    origin: Origin
    sha256: str
    """Of its SKILL.md."""
    where: str
    """As the model is told: workspace-relative, or ``~/.bubu/skills/NAME`` for the user's."""


def _read(root: guard.Root | None, path: str) -> tuple[str, str] | None:
    """(text, sha256) of a file: workspace-relative beneath `root`, else an absolute path."""
    if root is not None:
        f = read_one(root, path)
        if f is None or f.skipped is not None or not f.sha256:
            return None
        return f.text, f.sha256
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    return data.decode("utf-8", "replace"), hashlib.sha256(data).hexdigest()


def _listdir(root: guard.Root | None, directory: str) -> list[str]:
    try:
        if root is None:
            return sorted(os.listdir(directory))
        rel = guard.resolve_beneath(root, directory)
        return sorted(os.listdir(root.absolute(rel)))
    except (OSError, guard.Escape):
        return []


def _places(workspace: str | None, dirs: tuple[str, ...], user: str) -> list[tuple[Origin, str]]:
    out: list[tuple[Origin, str]] = [("user", os.path.join(bubu_home(), user))]
    if workspace is not None:
        out += [("workspace", d) for d in dirs]
    return out


def _open(workspace: str | None) -> guard.Root | None:
    if workspace is None:
        return None
    try:
        return guard.Root.open(workspace)
    except OSError:
        return None


def prompt_files(workspace: str | None) -> dict[str, PromptFile]:
    """The prompt files that `/NAME` runs, by name; the user's own first."""
    found: dict[str, PromptFile] = {}
    root = _open(workspace)
    try:
        for origin, d in _places(workspace, COMMAND_DIRS, "commands"):
            base = None if origin == "user" else root
            if origin == "workspace" and root is None:
                continue
            for entry in _listdir(base, d):
                name = entry.removesuffix(".md")
                if not entry.endswith(".md") or not NAME.match(name) or name in found:
                    continue
                rel = f"{d}/{entry}"
                got = _read(base, rel)
                if got is None:
                    continue
                doc = frontmatter.parse(got[0])
                m = doc.meta
                found[name] = PromptFile(
                    name=name,
                    path=rel if base is None else root.absolute(rel),  # type: ignore[union-attr]
                    origin=origin,
                    sha256=got[1],
                    body=doc.body,
                    description=frontmatter.text(m.get("description")),
                    argument_hint=frontmatter.text(m.get("argument_hint")),
                    model=frontmatter.text(m.get("model")),
                    allowed_tools=tuple(frontmatter.words(m.get("allowed_tools"))),
                )
    finally:
        if root is not None:
            root.close()
    return dict(sorted(found.items()))


def expand(p: PromptFile, arguments: str) -> str:
    """The prompt `/NAME ARGUMENTS` sends: the body with ``$ARGUMENTS`` and ``$1``…``$9`` put in;
    arguments given to a body that uses neither follow it."""
    body = p.body.strip("\n")
    args = arguments.strip()
    if "$ARGUMENTS" not in body and not re.search(r"\$[1-9]", body):
        return f"{body}\n\n{args}" if args else body
    words = args.split()
    out = body.replace("$ARGUMENTS", args)
    return re.sub(
        r"\$([1-9])", lambda m: words[int(m[1]) - 1] if int(m[1]) <= len(words) else "", out
    )


_CLAUDE_BASH = re.compile(r"^Bash\((.*)\)$")


def allow_patterns(allowed_tools: tuple[str, ...]) -> list[str]:
    """The command patterns a prompt file's ``allowed-tools`` approve: ``Bash(git diff:*)`` is
    ``git diff *`` (and ``git diff``), a plain pattern stands for itself; other tools' names
    approve nothing (the file tools do not ask inside the workspace)."""
    out: list[str] = []
    for t in allowed_tools:
        m = _CLAUDE_BASH.match(t.strip())
        if m is None:
            if " " in t.strip() or "*" in t:
                out.append(t.strip())
            continue
        inner = m[1].strip()
        if inner.endswith(":*"):
            prog = inner[:-2].strip()
            out += [prog, f"{prog} *"]
        elif inner and inner != "*":
            out.append(inner)
    return list(dict.fromkeys(out))


def skills(workspace: str | None) -> list[Skill]:
    """The skills the model may read, by name (the user's own first where two share one)."""
    found: dict[str, Skill] = {}
    root = _open(workspace)
    try:
        for origin, d in _places(workspace, SKILL_DIRS, "skills"):
            base = None if origin == "user" else root
            if origin == "workspace" and root is None:
                continue
            for entry in _listdir(base, d):
                rel = f"{d}/{entry}"
                got = _read(base, f"{rel}/SKILL.md")
                if got is None:
                    continue
                meta = frontmatter.parse(got[0]).meta
                name = frontmatter.text(meta.get("name")) or entry
                desc = " ".join(frontmatter.text(meta.get("description")).split())
                if not NAME.match(name) or name in found or not desc:
                    continue
                directory = rel if base is None else root.absolute(rel)  # type: ignore[union-attr]
                where = f"~/.bubu/skills/{entry}" if base is None else rel
                found[name] = Skill(
                    name=name,
                    description=desc[:MAX_DESCRIPTION],
                    directory=directory,
                    origin=origin,
                    sha256=got[1],
                    where=where,
                )
                if len(found) >= MAX_SKILLS:
                    break
    finally:
        if root is not None:
            root.close()
    return sorted(found.values(), key=lambda s: s.name)


__all__ = ["PromptFile", "Skill", "allow_patterns", "expand", "prompt_files", "skills"]
