"""What a virtualenv's `.pth` files import, and which directories are Git directories by what
they hold: the pure parts of `bubu.tools.kinds`, on real files."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from bubu.tools.kinds import _imported, is_git_dir, kind_reason, pth_imports


def test_the_import_lines_of_a_pth_file_name_what_runs() -> None:
    text = "\n".join(
        [
            "# a comment",
            "/some/extra/path",
            "import _virtualenv",
            "import a.b, c; c.go()",
            "import\tt_ab",
            "import sys; from pkg.sub import x",
            "import importlib; importlib.import_module('lazy.mod')",
            "import os; __import__('dunder')",
            "import os; from . import relative",
            "importfoo",
            "  import indented",  # site.py only runs lines that start with "import"
            "import (broken",
        ]
    )
    assert _imported(text) == {
        "_virtualenv",
        "a",
        "c",
        "t_ab",
        "sys",
        "pkg",
        "importlib",
        "lazy",
        "os",
        "dunder",
    }


def test_pth_imports_are_read_again_when_a_pth_file_changes(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "a.pth").write_text("import first\n")
    assert pth_imports(str(site)) == {"first"}
    (site / "a.pth").write_text("import second\n")
    stamp = os.stat(site / "a.pth").st_mtime_ns + 1_000_000
    os.utime(site / "a.pth", ns=(stamp, stamp))  # an edit in place, the directory unchanged
    assert pth_imports(str(site)) == {"second"}
    (site / "b.pth").write_text("import third\n")
    assert pth_imports(str(site)) == {"second", "third"}


def test_a_directory_is_a_git_directory_by_what_it_holds(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "bare")], check=True)
    assert is_git_dir(str(tmp_path / "bare"))
    lookalike = tmp_path / "notes"
    (lookalike / "objects").mkdir(parents=True)
    (lookalike / "HEAD").write_text("a file named HEAD\n")
    assert not is_git_dir(str(lookalike)), "no refs/: not a repository"
    assert kind_reason(str(tmp_path / "bare" / "config"), stop=str(tmp_path)) is not None
    assert kind_reason(str(lookalike / "readme.md"), stop=str(tmp_path)) is None


def test_a_workspace_inside_a_virtualenv_is_not_protected_by_it(tmp_path: Path) -> None:
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    ws = tmp_path / "bin" / "project"
    ws.mkdir(parents=True)
    assert kind_reason(str(ws / "main.py"), stop=str(ws)) is None
    assert kind_reason(str(tmp_path / "bin" / "activate"), stop=str(tmp_path)) is not None
