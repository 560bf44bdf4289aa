"""Directories protected by what they hold, not by their name: a virtualenv and a Git directory.

A directory holding ``pyvenv.cfg`` is a virtualenv's root, wherever it lies and whatever it is
called. Inside one, what runs at a person's next ordinary step is: ``pyvenv.cfg`` and ``pip.conf``
(read when its Python or pip starts), ``bin/`` and ``Scripts/`` (``activate`` is sourced, and the
rest runs when its name is typed in the activated shell), and, in ``site-packages``, the ``.pth``
files, ``sitecustomize``/``usercustomize`` and the modules a ``.pth`` file's ``import`` lines
import, which every start of that Python runs.

A directory holding a ``HEAD`` file and ``objects/`` and ``refs/`` (or a ``commondir`` file, as a
linked worktree's has) is a Git directory whatever its name (``git clone --separate-git-dir``, a
bare repository): Git runs the commands its config and hooks name.

`kind_reason` looks only at the directories above a path, one or two ``stat`` calls each; what a
virtualenv's ``.pth`` files import is read once and kept until a ``.pth`` file changes.
"""

from __future__ import annotations

import ast
import os
import stat
import threading
import unicodedata

VENV_MARK = "pyvenv.cfg"
_VENV_SCRIPTS = frozenset({"bin", "scripts"})
_VENV_CONFIG = {
    "pyvenv.cfg": "the virtualenv's Python reads it as configuration whenever it starts",
    "pip.conf": "pip reads it on every call in the virtualenv (its index decides what installs)",
    "pip.ini": "pip reads it on every call in the virtualenv (its index decides what installs)",
}
_STARTUP = frozenset({"sitecustomize", "usercustomize"})


def fold(name: str) -> str:
    """A name as a case-insensitive file system compares it: HFS+ also ignores invisible format
    characters (``.g\u200cit`` is ``.git``) and NTFS trailing dots and spaces."""
    kept = "".join(ch for ch in name if unicodedata.category(ch) != "Cf")
    return unicodedata.normalize("NFC", kept).casefold().rstrip(". ") or kept


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


def is_git_dir(path: str) -> bool:
    """Whether `path` is a directory Git would take for a repository: a ``HEAD`` file with
    ``objects/`` and ``refs/``, or with a ``commondir`` file (a linked worktree's)."""
    if not _is_file(os.path.join(path, "HEAD")):
        return False
    if _is_file(os.path.join(path, "commondir")):
        return True
    return _is_dir(os.path.join(path, "objects")) and _is_dir(os.path.join(path, "refs"))


def kind_reason(path: str, *, stop: str) -> str | None:
    """Why `path` (absolute, normalised) is protected because a directory above it is a
    virtualenv or a Git directory, or None; directories above `stop` are not looked at (a
    workspace that lies inside a virtualenv is the user's choice to work there)."""
    parts = path.split(os.sep)
    stop_depth = len(stop.rstrip(os.sep).split(os.sep)) if stop != os.sep else 1
    for depth in range(len(parts) - 1, max(stop_depth, 1) - 1, -1):
        directory = os.sep.join(parts[:depth]) or os.sep
        below = parts[depth:]
        if _is_file(os.path.join(directory, VENV_MARK)):
            why = _in_venv(directory, below)
            if why is not None:
                return f"{path} is in the virtualenv {directory}: {why}"
            return None  # the nearest virtualenv decides; one inside another is its own
        if is_git_dir(directory):
            return (
                f"{path} is in {directory}, a Git directory (it holds HEAD and objects/): Git "
                "runs the commands its config and hooks name"
            )
    return None


def _in_venv(root: str, below: list[str]) -> str | None:
    """Why a path `below` a virtualenv's `root` runs code at the next ordinary step, or None."""
    folded = [fold(p) for p in below]
    if len(folded) == 1 and folded[0] in _VENV_CONFIG:
        return _VENV_CONFIG[folded[0]]
    if len(folded) > 1 and folded[0] in _VENV_SCRIPTS:
        return "a shell sources its activate scripts, and runs the others by name once activated"
    if "site-packages" not in folded:
        return None
    at = folded.index("site-packages")
    if at + 1 >= len(folded):
        return None
    name = folded[at + 1]
    module = name.split(".", 1)[0]
    if name.endswith(".pth") or module in _STARTUP:
        return "Python runs it whenever the virtualenv's interpreter starts"
    site = os.path.join(root, *below[: at + 1])
    if module in pth_imports(site):
        return f"a .pth file imports {module} whenever the virtualenv's interpreter starts"
    return None


_Stamp = tuple[int, tuple[tuple[str, int], ...]]
_cache: dict[str, tuple[_Stamp, frozenset[str]]] = {}
_cache_lock = threading.Lock()


def pth_imports(site: str) -> frozenset[str]:
    """The top-level modules the ``import`` lines of the ``.pth`` files in `site` import
    (case-folded), read again only when the directory or one of its ``.pth`` files changes."""
    try:
        dir_stamp = os.stat(site).st_mtime_ns
    except OSError:
        return frozenset()
    with _cache_lock:
        kept = _cache.get(site)
    if kept is not None and kept[0][0] == dir_stamp and _unchanged(site, kept[0][1]):
        return kept[1]
    stamps: list[tuple[str, int]] = []
    names: set[str] = set()
    try:
        with os.scandir(site) as entries:
            pths = sorted(e.name for e in entries if e.name.endswith(".pth") and e.is_file())
    except OSError:
        return frozenset()
    for pth in pths:
        full = os.path.join(site, pth)
        try:
            stamps.append((pth, os.stat(full).st_mtime_ns))
            with open(full, encoding="utf-8", errors="replace") as f:
                text = f.read(1 << 20)
        except OSError:
            continue
        names.update(_imported(text))
    found = frozenset(names)
    with _cache_lock:
        _cache[site] = ((dir_stamp, tuple(stamps)), found)
    return found


def _unchanged(site: str, stamps: tuple[tuple[str, int], ...]) -> bool:
    for name, mtime in stamps:
        try:
            if os.stat(os.path.join(site, name)).st_mtime_ns != mtime:
                return False
        except OSError:
            return False
    return True


def _imported(text: str) -> set[str]:
    """The modules the lines of a ``.pth`` file that Python executes (those starting with
    ``import``, as `site` runs them) import by name, including ``__import__("x")`` and
    ``importlib.import_module("x")``."""
    out: set[str] = set()
    for line in text.splitlines():
        if not line.startswith(("import ", "import\t")):
            continue
        try:
            tree = ast.parse(line)
        except SyntaxError:
            continue  # site.py cannot run it either
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out.update(fold(a.name.split(".", 1)[0]) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.add(fold(node.module.split(".", 1)[0]))
            elif (
                isinstance(node, ast.Call)
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and _called(node.func) in ("__import__", "import_module")
            ):
                out.add(fold(node.args[0].value.split(".", 1)[0]))
    return out


def _called(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None
