"""list_files and grep on a real directory tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.tools import ToolContext
from bubu.tools.base import JSON, Tool
from bubu.tools.search import GREP_MAX_MATCHES, LIST_MAX, glob_regex


@pytest.fixture
def tree(ws: Path) -> Path:
    """A small project with junk directories that must be skipped."""
    files = {
        "README.md": "# demo\nTODO: docs\n",
        "setup.cfg": "[metadata]\n",
        "src/pkg/__init__.py": "",
        "src/pkg/core.py": "def add(a, b):\n    return a - b  # TODO fix\n",
        "src/pkg/util.py": "import os\n",
        "tests/test_core.py": (
            "from pkg.core import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"
        ),
        ".git/config": "TODO in git\n",
        "node_modules/x/index.js": "TODO in node_modules\n",
        "src/pkg/__pycache__/core.cpython-311.pyc": "TODO cached\n",
        ".venv/lib/site.py": "TODO in venv\n",
    }
    for rel, text in files.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return ws


def run(tools: dict[str, Tool], ctx: ToolContext, name: str, **args: JSON) -> str:
    result = tools[name].run(args, ctx, None)
    assert not result.is_error, result.output
    return result.output


def test_list_files_is_sorted_and_skips_junk(
    tools: dict[str, Tool], tree: Path, ctx: ToolContext
) -> None:
    assert run(tools, ctx, "list_files").splitlines() == [
        "README.md",
        "setup.cfg",
        "src/pkg/__init__.py",
        "src/pkg/core.py",
        "src/pkg/util.py",
        "tests/test_core.py",
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            {"pattern": "*.py"},
            ["src/pkg/__init__.py", "src/pkg/core.py", "src/pkg/util.py", "tests/test_core.py"],
        ),
        ({"pattern": "src/**/*.py"}, ["src/pkg/__init__.py", "src/pkg/core.py", "src/pkg/util.py"]),
        ({"pattern": "**/test_*.py"}, ["tests/test_core.py"]),
        ({"pattern": "*.{md,cfg}"}, ["README.md", "setup.cfg"]),
        (
            {"pattern": "[!R]*.*", "path": "."},
            [
                "setup.cfg",
                "src/pkg/__init__.py",
                "src/pkg/core.py",
                "src/pkg/util.py",
                "tests/test_core.py",
            ],
        ),
        (
            {"pattern": "*.py", "path": "src/pkg"},
            ["src/pkg/__init__.py", "src/pkg/core.py", "src/pkg/util.py"],
        ),
        ({"pattern": "c?re.py", "path": "src"}, ["src/pkg/core.py"]),
        ({"path": ".git"}, [".git/config"]),
    ],
)
def test_list_files_globs(
    tools: dict[str, Tool], tree: Path, ctx: ToolContext, args: dict[str, JSON], expected: list[str]
) -> None:
    assert run(tools, ctx, "list_files", **args).splitlines() == expected


def test_glob_regex() -> None:
    assert glob_regex("a/**/b").match("a/b")
    assert glob_regex("a/**/b").match("a/x/y/b")
    assert not glob_regex("a/*/b").match("a/x/y/b")
    assert glob_regex("[[]x].txt").match("[x].txt")
    assert glob_regex("[^a].md").match("^.md")
    assert not glob_regex("[^a].md").match("b.md")


def test_list_files_caps_and_says_how_many_more(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    for n in range(LIST_MAX + 7):
        (ws / f"f{n:05}.txt").write_text("")
    out = run(tools, ctx, "list_files", pattern="*.txt").splitlines()
    assert len(out) == LIST_MAX + 1
    assert out[0] == "f00000.txt"
    assert out[LIST_MAX - 1] == f"f{LIST_MAX - 1:05}.txt"
    assert out[-1] == "… 7 more (narrow the pattern or the path)"


def test_list_files_no_match_and_missing_path(
    tools: dict[str, Tool], tree: Path, ctx: ToolContext
) -> None:
    assert run(tools, ctx, "list_files", pattern="*.rs") == "no files match *.rs"
    missing = tools["list_files"].run({"path": "nope"}, ctx, None)
    assert missing.is_error
    assert "nope does not exist" in missing.output


def test_list_files_does_not_descend_a_symlinked_directory(
    tools: dict[str, Tool], ws: Path, outside: Path, ctx: ToolContext
) -> None:
    (ws / "a.txt").write_text("")
    (ws / "data").symlink_to(outside, target_is_directory=True)
    assert run(tools, ctx, "list_files") == "a.txt"


def test_grep_reports_path_line_text(tools: dict[str, Tool], tree: Path, ctx: ToolContext) -> None:
    assert run(tools, ctx, "grep", pattern="TODO").splitlines() == [
        "README.md:2:TODO: docs",
        "src/pkg/core.py:2:    return a - b  # TODO fix",
        "(2 matches in 2 files)",
    ]
    assert run(tools, ctx, "grep", pattern=r"(?i)def \w+", glob="test_*.py").splitlines() == [
        "tests/test_core.py:3:def test_add():",
        "(1 match in 1 file)",
    ]
    assert run(tools, ctx, "grep", pattern="import", path="src/pkg/util.py") == (
        "src/pkg/util.py:1:import os\n(1 match in 1 file)"
    )
    assert run(tools, ctx, "grep", pattern="nowhere") == "no matches for nowhere"


def test_grep_skips_binary_files_and_links_leading_out(
    tools: dict[str, Tool], ws: Path, outside: Path, ctx: ToolContext
) -> None:
    (ws / "blob.bin").write_bytes(b"secret\x00\x01secret")
    (ws / "text.txt").write_bytes(b"a secret \xff here\n")
    (ws / "link.txt").symlink_to(outside / "secret.txt")
    out = run(tools, ctx, "grep", pattern="secret")
    assert out == "text.txt:1:a secret \ufffd here\n(1 match in 1 file)"


def test_grep_caps_matches_and_windows_long_lines(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "many.txt").write_text("hit\n" * (GREP_MAX_MATCHES + 50))
    out = run(tools, ctx, "grep", pattern="hit").splitlines()
    assert len(out) == GREP_MAX_MATCHES + 1
    assert (
        out[-1] == f"… stopped after {GREP_MAX_MATCHES} matches; narrow the pattern, path or glob"
    )
    (ws / "many.txt").unlink()
    (ws / "long.js").write_text("x" * 10_000 + "NEEDLE" + "y" * 10_000 + "\n")
    line = run(tools, ctx, "grep", pattern="NEEDLE").splitlines()[0]
    assert line.startswith("long.js:1:…x")
    assert "NEEDLE" in line
    assert line.endswith("y…")
    assert len(line) < 400


def test_grep_rejects_an_invalid_regex(tools: dict[str, Tool], ws: Path, ctx: ToolContext) -> None:
    result = tools["grep"].run({"pattern": "foo("}, ctx, None)
    assert result.is_error
    assert result.output.startswith("the pattern is not a valid Python regex (missing ), ")


def test_a_stopped_search_is_an_error_result(
    tools: dict[str, Tool], tree: Path, ctx: ToolContext
) -> None:
    ctx.cancel.set()
    result = tools["grep"].run({"pattern": "TODO"}, ctx, None)
    assert result.is_error
    assert "stopped by the user" in result.output
    ctx.stopped_by = lambda: "stopped because another runner took this session over"
    result = tools["grep"].run({"pattern": "TODO"}, ctx, None)
    assert "stopped because another runner took this session over" in result.output


@pytest.fixture
def ignoring(ws: Path) -> Path:
    """A project whose `.gitignore` files (at the root and deeper) leave build output out."""
    files = {
        ".gitignore": "build/\n*.log\n!keep.log\n",
        "src/app.py": "needle = 1\n",
        "build/lib/app.py": "needle = 1  # a built copy\n",
        "run.log": "needle in a log\n",
        "keep.log": "needle kept\n",
        "src/gen/.gitignore": "*.py\n!hand.py\n",
        "src/gen/made.py": "needle generated\n",
        "src/gen/hand.py": "needle by hand\n",
    }
    for rel, text in files.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return ws


def test_grep_finds_nothing_in_a_gitignored_directory(
    tools: dict[str, Tool], ignoring: Path, ctx: ToolContext
) -> None:
    """The ignore files decide at every depth, negations included, as git reads them."""
    lines = run(tools, ctx, "grep", pattern="needle").splitlines()
    assert lines[:-1] == [
        "keep.log:1:needle kept",
        "src/app.py:1:needle = 1",
        "src/gen/hand.py:1:needle by hand",
    ]
    listed = run(tools, ctx, "list_files").splitlines()
    assert listed == [
        ".gitignore",
        "keep.log",
        "src/app.py",
        "src/gen/.gitignore",
        "src/gen/hand.py",
    ]


def test_a_walk_below_the_root_keeps_the_rules_above_it(
    tools: dict[str, Tool], ignoring: Path, ctx: ToolContext
) -> None:
    """Searching `src` still applies the root's and `src/gen`'s ignore files."""
    assert (
        run(tools, ctx, "list_files", path="src")
        == "src/app.py\nsrc/gen/.gitignore\nsrc/gen/hand.py"
    )


def test_a_path_the_model_names_is_searched_though_ignored(
    tools: dict[str, Tool], ignoring: Path, ctx: ToolContext
) -> None:
    """Asking for the ignored `build` directory by name searches it, as `rg PATTERN build` does."""
    assert run(tools, ctx, "grep", pattern="needle", path="build").splitlines()[0] == (
        "build/lib/app.py:1:needle = 1  # a built copy"
    )
