"""Protected paths: files that make other programs run code later, so a write to them asks a
person even when writes are otherwise allowed, and `--yes` does not approve it.

The line is drawn at files that run code on an *ordinary action that is not running the
project*: ``git status`` (``.git/config``'s ``core.fsmonitor``, hooks), opening a shell (rc and
profile files), entering the directory (``.envrc``, ``mise.toml``), opening the editor
(``.vscode/``, ``.idea/``, ``.devcontainer/``), starting any Python (``*.pth``,
``sitecustomize.py``), or Bubu's own settings (``.bubu/``). Source files, build files and test
files run code too, but only when the user runs the project, which is what the agent is for.

`protected_reason` is a pure function of a path relative to the workspace (or an absolute path
outside it); `protected_target` resolves a tool's path argument and applies it to both the path
as written and the path it resolves to, so a symlink or ``..`` cannot hide a protected file.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import PurePosixPath

from bubu.errors import ToolError
from bubu.tools.base import JSON, Tool, ToolContext
from bubu.tools.workspace import is_inside, resolve, workspace_root

_GIT = "Git runs the commands its config and hooks name (core.fsmonitor, core.pager, hooks)"
_SHELL = "a shell runs it when it starts"

DIRECTORIES: dict[str, str] = {
    ".git": _GIT,
    ".bubu": "it holds Bubu's own settings for this workspace",
    ".husky": "it holds Git hooks",
    ".githooks": "it holds Git hooks",
    ".git-hooks": "it holds Git hooks",
    ".lefthook": "it holds Git hooks",
    ".direnv": "direnv runs it when a shell enters the directory",
    ".vscode": "the editor runs its tasks and settings when the folder is opened",
    ".idea": "the IDE runs its run configurations and settings when the project is opened",
    ".devcontainer": "the editor runs its commands when the container is opened",
    ".ssh": "ssh runs its ProxyCommand and trusts its authorized_keys",
}
"""Directories protected at any depth: everything below them is protected."""

FILES: dict[str, str] = {
    ".gitmodules": "Git fetches and checks out what it names",
    ".gitconfig": _GIT,
    ".envrc": "direnv runs it when a shell enters the directory",
    "mise.toml": "mise runs its hooks when a shell enters the directory",
    ".mise.toml": "mise runs its hooks when a shell enters the directory",
    ".pre-commit-config.yaml": "pre-commit runs its hooks on every commit",
    "lefthook.yml": "lefthook runs its hooks on Git commands",
    ".lefthook.yml": "lefthook runs its hooks on Git commands",
    ".yarnrc.yml": "yarn runs the program its yarnPath names on every call",
    "sitecustomize.py": "Python runs it when it starts",
    "usercustomize.py": "Python runs it when it starts",
    **dict.fromkeys(
        (
            ".bashrc",
            ".bash_profile",
            ".bash_login",
            ".bash_logout",
            ".profile",
            ".zshrc",
            ".zshenv",
            ".zprofile",
            ".zlogin",
            ".zlogout",
            ".kshrc",
            ".mkshrc",
            ".cshrc",
            ".tcshrc",
            ".login",
            ".logout",
            ".xprofile",
            ".xinitrc",
            ".xsession",
            "config.fish",
        ),
        _SHELL,
    ),
}
"""File names protected at any depth."""

SUFFIXES: dict[str, str] = {".pth": "Python runs the import lines of a .pth file when it starts"}


def protected_reason(path: str) -> str | None:
    """Why writing `path` must be approved by a person, or None.

    `path` is relative to the workspace (or absolute, for a path outside it); names are compared
    case-insensitively, because macOS and Windows file systems ignore case.
    """
    parts = [_fold(p) for p in PurePosixPath(path.replace(os.sep, "/")).parts if p != "/"]
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == ".git" and last:
            # A `.git` *file* (a worktree's or submodule's pointer) moves the repository away.
            why: str | None = "it tells Git where the repository is, whose config and hooks it runs"
        else:
            why = None if last else DIRECTORIES.get(part)
        if why is not None:
            return f"{path} is a protected path: {why}"
    if parts:
        name = parts[-1]
        why = FILES.get(name) or next((w for s, w in SUFFIXES.items() if name.endswith(s)), None)
        if why is not None:
            return f"{path} is a protected path: {why}"
    return None


def _fold(name: str) -> str:
    """A name as a case-insensitive file system compares it: HFS+ also ignores invisible format
    characters (``.g\u200cit`` is ``.git``) and NTFS trailing dots and spaces."""
    kept = "".join(ch for ch in name if unicodedata.category(ch) != "Cf")
    return unicodedata.normalize("NFC", kept).casefold().rstrip(". ") or kept


def protected_target(ctx: ToolContext, raw: str) -> str | None:
    """Why a write to the path argument `raw` must be approved by a person, or None.

    Both the path as written (normalised) and the file it resolves to through symlinks are
    checked, relative to the workspace when inside it and absolute when outside.
    """
    try:
        resolved = resolve(ctx, raw)
    except ToolError:  # a bad path: the tool refuses it on its own, so there is nothing to ask
        return None
    written = os.path.normpath(os.path.join(workspace_root(ctx), raw))
    return protected_reason(relative(ctx, written)) or protected_reason(relative(ctx, resolved))


def relative(ctx: ToolContext, resolved: str) -> str:
    """A resolved path as `protected_reason` takes it: relative inside the workspace."""
    if is_inside(ctx, resolved):
        return os.path.relpath(resolved, workspace_root(ctx))
    return resolved


def protected_write(tool: Tool, args: dict[str, JSON], ctx: ToolContext) -> str | None:
    """Why a provable write call must be approved by a person (its target is protected), or None.

    The target is the path argument of a built-in write tool, or the declared `target` of a
    `@tool` provable write.
    """
    if tool.effect != "provable_write":
        return None
    raw: object = None
    path_arg = getattr(tool, "path_arg", None)
    if isinstance(path_arg, str):
        raw = args.get(path_arg)
    elif callable(getter := getattr(tool, "write_target", None)):
        raw = getter(args)
    return protected_target(ctx, raw) if isinstance(raw, str) and raw else None
