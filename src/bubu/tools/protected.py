"""Protected paths: files that make other programs run code later, so a write to them asks a
person even when writes are otherwise allowed, and `--yes` does not approve it.

The rule: a file is protected when a common tool *executes it, or loads it as configuration,
the next time the user runs that tool, without the user naming the file*. ``git status`` runs
what ``.git/config`` names (``core.fsmonitor``, hooks); opening a shell sources rc files; entering
the directory runs ``.envrc``; opening the editor loads ``.vscode/`` and ``.exrc``; starting any
Python runs ``*.pth`` and ``sitecustomize.py``; starting ``gdb`` or ``pdb`` runs ``.gdbinit`` or
``.pdbrc``; ``npm`` obeys ``.npmrc``'s ``script-shell`` and ``node-options``. A version
control system's own directory is protected whole: it runs what its config names and trusts
what it records without showing it. Source, build and test files run code too, but only when
the user runs the project, which is what the agent is for; so do a project's install hooks
(``.pnpmfile.cjs``, ``package.json`` scripts). Files that only name a version (``.nvmrc``,
``.python-version``, ``.node-version``) or a style (``.editorconfig``) run nothing and are not
protected.

Three kinds of protection apply to a path, both as written and where it resolves, so a symlink,
``..`` or another spelling of a name cannot hide a protected file:

- by *name*, at any depth (`DIRECTORIES`, `FILES`, `SUFFIXES`, `NESTED`): `protected_reason`, a
  pure function of the path, names compared as a case-insensitive file system compares them;
- by what a directory *holds*: a virtualenv (``pyvenv.cfg``) or a Git directory (``HEAD`` and
  ``objects/``), see `bubu.tools.kinds`;
- by what a place *is*: ``$BUBU_HOME``, the log database, the home directory's dot-entries,
  found by file identity, see `bubu.tools.places`.

And a write outside the workspace asks a person too (``--yes`` approves the workspace only),
unless the user named the path ahead of time (``--allow-write``). A path named *exactly* with
``--allow-write`` is approved ahead of time whatever it is; a directory named opens what is below
it, protected files excepted.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from bubu.errors import ToolError
from bubu.tools.base import JSON, Tool, ToolContext
from bubu.tools.kinds import fold, kind_reason
from bubu.tools.places import place_reason
from bubu.tools.workspace import is_inside, named_base, named_outside, resolve, workspace_root

_GIT = "Git runs the commands its config and hooks name (core.fsmonitor, core.pager, hooks)"
_SHELL = "a shell runs it when it starts"
_EDITOR = "the editor loads it as configuration when it opens the folder (exrc, local variables)"
_VCS = "{} runs the commands its config names and trusts what it records there"
_TOOL_VERSIONS = "asdf and mise run the programs it names (a path: version) in the directory"

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
    ".hg": _VCS.format("Mercurial (hgrc: hooks, extensions)"),
    ".svn": _VCS.format("Subversion"),
    ".bzr": _VCS.format("Breezy (branch.conf, hooks)"),
    "_darcs": _VCS.format("Darcs (prefs: posthooks)"),
    ".jj": _VCS.format("Jujutsu (repo config: pager, diff tools)"),
    ".mise": "mise runs its hooks and tasks when a shell enters the directory",
    ".zed": "the editor runs the language servers and tasks its settings name when opened",
    ".helix": "the editor runs the language servers its languages.toml names when opened",
}
"""Directories protected at any depth: everything below them is protected."""

FILES: dict[str, str] = {
    ".gitmodules": "Git fetches and checks out what it names",
    # Without a HEAD no directory is a Git directory; with one (and objects/, refs/), git run
    # there obeys that directory's config, so one cannot be made a file at a time.
    "head": "Git takes a directory holding HEAD, objects/ and refs/ for a repository",
    "commondir": "Git takes a directory holding HEAD and commondir for a worktree's repository",
    ".gitconfig": _GIT,
    ".envrc": "direnv runs it when a shell enters the directory",
    "mise.toml": "mise runs its hooks when a shell enters the directory",
    ".mise.toml": "mise runs its hooks when a shell enters the directory",
    "mise.local.toml": "mise runs its hooks when a shell enters the directory",
    ".mise.local.toml": "mise runs its hooks when a shell enters the directory",
    ".rtx.toml": "mise runs its hooks when a shell enters the directory",
    ".tool-versions": _TOOL_VERSIONS,
    ".rvmrc": "RVM runs it as a shell script when a shell enters the directory",
    ".npmrc": "npm loads it on every call (script-shell, node-options and git name programs)",
    ".yarnrc": "yarn runs the program its yarn-path names on every call",
    ".devcontainer.json": "the editor runs its commands when the container is opened",
    ".exrc": _EDITOR,
    ".vimrc": _EDITOR,
    ".nvimrc": _EDITOR,
    ".nvim.lua": _EDITOR,
    ".dir-locals.el": _EDITOR,
    ".dir-locals-2.el": _EDITOR,
    ".gdbinit": "gdb runs its commands when it starts in the directory",
    ".lldbinit": "lldb runs its commands when it starts in the directory",
    ".pdbrc": "pdb runs its commands when it starts in the directory",
    ".pdbrc.py": "pdb++ runs it when it starts in the directory",
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
            ".bash_aliases",
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

NESTED: dict[tuple[str, ...], str] = {
    (".config", "mise.toml"): "mise runs its hooks when a shell enters the directory",
    (".config", "mise"): "mise runs its hooks when a shell enters the directory",
}
"""Names that are protected only below a given directory: the path's parts end with the key (a
file), or pass through it (a directory)."""


def protected_reason(path: str) -> str | None:
    """Why writing `path` must be approved by a person, or None.

    `path` is relative to the workspace (or absolute, for a path outside it); names are compared
    case-insensitively, because macOS and Windows file systems ignore case.
    """
    parts = [fold(p) for p in PurePosixPath(path.replace(os.sep, "/")).parts if p != "/"]
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == ".git" and last:
            # A `.git` *file* (a worktree's or submodule's pointer) moves the repository away.
            why: str | None = "it tells Git where the repository is, whose config and hooks it runs"
        else:
            why = None if last else DIRECTORIES.get(part)
        if why is not None:
            return f"{path} is a protected path: {why}"
    for chain, why in NESTED.items():
        for i in range(len(parts) - len(chain) + 1):
            if tuple(parts[i : i + len(chain)]) == chain:
                return f"{path} is a protected path: {why}"
    if parts:
        name = parts[-1]
        why = FILES.get(name) or next((w for s, w in SUFFIXES.items() if name.endswith(s)), None)
        if why is not None:
            return f"{path} is a protected path: {why}"
    return None


def protected_target(ctx: ToolContext, raw: str) -> str | None:
    """Why a write to the path argument `raw` must be approved by a person, or None.

    Both the path as written (normalised) and the file it resolves to through symlinks are
    checked; a path the user named exactly with ``--allow-write`` needs no approval.
    """
    try:
        resolved = resolve(ctx, raw)
    except ToolError:  # a bad path: the tool refuses it on its own, so there is nothing to ask
        return None
    written = os.path.normpath(os.path.join(workspace_root(ctx), raw))
    if named_exactly(ctx, written) or named_exactly(ctx, resolved):
        return None
    return (
        _protected_at(ctx, written)
        or (None if resolved == written else _protected_at(ctx, resolved))
        or outside_write_reason(ctx, resolved, shown=raw)
    )


def write_reason(ctx: ToolContext, path: str) -> str | None:
    """Why writing the resolved absolute `path` must be approved by a person, or None (the same
    rules as `protected_target`, for a path already resolved); a target that is not a file path
    (``remember``'s note) has none."""
    if not os.path.isabs(path) or named_exactly(ctx, path):
        return None
    return _protected_at(ctx, path) or outside_write_reason(ctx, path)


def _protected_at(ctx: ToolContext, path: str) -> str | None:
    """Why the absolute `path` is protected by its name, the directory it is in or the place it
    is in, or None."""
    root = workspace_root(ctx)
    inside = is_inside(ctx, path)
    # A directory named with --allow-write is chosen like the workspace: the place around it
    # (a dot-directory of the home directory) does not protect what is below it.
    chosen = root if inside else named_base(ctx, path) or root
    return (
        protected_reason(relative(ctx, path))
        or kind_reason(path, stop=root if inside else os.sep)
        or place_reason(path, root=chosen, own=ctx.own_files)
    )


def outside_write_reason(ctx: ToolContext, resolved: str, *, shown: str = "") -> str | None:
    """Why a write to `resolved` asks a person because it is outside the workspace, or None
    (inside it, or named ahead of time with ``--allow-write``); `shown` is the path as given."""
    if is_inside(ctx, resolved) or named_outside(ctx, resolved):
        return None
    head = f"{shown or resolved} is outside the workspace {workspace_root(ctx)}"
    if shown and shown != resolved:
        head += f" (it leads to {resolved})"
    return f"{head}; --allow-write PATH allows a write there ahead of time"


def named_exactly(ctx: ToolContext, path: str) -> bool:
    """Whether the user named `path` itself with ``--allow-write`` (not a directory above it)."""
    return any(
        path in (os.path.normpath(entry), os.path.realpath(entry)) for entry in ctx.allow_write
    )


def relative(ctx: ToolContext, resolved: str) -> str:
    """A resolved path as `protected_reason` takes it: relative inside the workspace."""
    if is_inside(ctx, resolved):
        return os.path.relpath(resolved, workspace_root(ctx))
    return resolved


def protected_write(tool: Tool, args: dict[str, JSON], ctx: ToolContext) -> str | None:
    """Why a writing call must be approved by a person (its target is protected or outside the
    workspace), or None.

    The target is the path argument of a tool that is not read-only (a built-in write tool, a
    `@tool` with ``path_arg=``), or the declared `target` of a `@tool` provable write.
    """
    if tool.effect == "read_only":
        return None
    raw: object = None
    path_arg = getattr(tool, "path_arg", None)
    if isinstance(path_arg, str):
        raw = args.get(path_arg)
    elif callable(getter := getattr(tool, "write_target", None)):
        raw = getter(args)
    return protected_target(ctx, raw) if isinstance(raw, str) and raw else None
