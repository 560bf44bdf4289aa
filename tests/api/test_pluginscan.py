"""`bubu.pluginscan.may_register`: told without `importlib.metadata`, the same answer as
`importlib.metadata` gives (through `bubu.plugins.registry`) where it can read the path as that
does, and "yes" where it cannot.

Each case lays out what pip leaves on `sys.path` (a ``.dist-info`` or ``.egg-info`` with an
``entry_points.txt``, a zip, an egg) and asks both."""

from __future__ import annotations

import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from bubu.plugins import BUILTINS, registry
from bubu.pluginscan import ALLOW_ENV, may_register
from bubu.toolspecs import BUILTIN_REGISTRATION, GROUP


def _dist(site: Path, folder: str, entry_points: str | None) -> None:
    info = site / folder
    info.mkdir(parents=True)
    name = folder.partition("-")[0]
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)


def _zip(site: Path) -> None:
    with zipfile.ZipFile(site / "bundle.zip", "w") as z:
        z.writestr("bubu_zipped-1.0.dist-info/METADATA", "Name: bubu-zipped\nVersion: 1.0\n")
        z.writestr(
            "bubu_zipped-1.0.dist-info/entry_points.txt", "[bubu.tools]\nz = bubu_zipped:tools\n"
        )


CASES: dict[str, tuple[Callable[[Path], None], bool]] = {
    "nothing else": (lambda s: None, False),
    "a tool plugin": (
        lambda s: _dist(s, "bubu_extra-1.0.dist-info", "[bubu.tools]\nextra = m:tools\n"),
        True,
    ),
    "a provider plugin only": (
        lambda s: _dist(s, "bubu_extra-1.0.dist-info", "[bubu.providers]\necho = m:provider\n"),
        False,
    ),
    "other groups, the name in a comment": (
        lambda s: _dist(
            s, "tool_x-2.0.dist-info", "# bubu.tools\n[console_scripts]\nx = tool_x:main\n"
        ),
        False,
    ),
    "no entry points": (lambda s: _dist(s, "plain-1.0.dist-info", None), False),
    "an empty group": (lambda s: _dist(s, "empty-1.0.dist-info", "[bubu.tools]\n\n"), False),
    "bubu's own lines again": (
        lambda s: _dist(
            s, "bubu_agent-9.9.dist-info", "[bubu.tools]\nbuiltin = bubu.tools:builtin_tool_list\n"
        ),
        False,
    ),
    "bubu's own distribution with one more tool": (
        lambda s: _dist(
            s,
            "bubu_agent-9.9.dist-info",
            "[bubu.tools]\nbuiltin = bubu.tools:builtin_tool_list\nmore = m:tools\n",
        ),
        True,
    ),
    "another distribution claiming the built-in name": (
        lambda s: _dist(
            s, "bubu_fork-1.0.dist-info", "[bubu.tools]\nbuiltin = bubu.tools:builtin_tool_list\n"
        ),
        True,
    ),
    "an egg-info directory": (
        lambda s: _dist(s, "old_style-1.0.egg-info", "[bubu.tools]\nold = m:tools\n"),
        True,
    ),
    "a zip on the path": (_zip, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_scan_answers_as_importlib_metadata_would_or_more_cautiously(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    make, expected = CASES[case]
    site = tmp_path / "site"
    site.mkdir()
    make(site)
    entries = [str(site / "bundle.zip")] if (site / "bundle.zip").exists() else []
    monkeypatch.setattr(sys, "path", [*entries, str(site), *sys.path])
    monkeypatch.delenv(ALLOW_ENV)
    reg = registry("bubu.tools")
    found = set(reg.plugins) != set(BUILTINS["bubu.tools"]) or bool(reg.conflicts)
    answer = may_register(GROUP, BUILTIN_REGISTRATION)
    assert answer is expected
    assert found is expected  # the same answer as importlib.metadata's, in every case here
    monkeypatch.setenv(ALLOW_ENV, "none")
    assert may_register(GROUP, BUILTIN_REGISTRATION) is False


def test_what_it_cannot_read_counts_as_a_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ALLOW_ENV)
    site = tmp_path / "site"
    (site / "odd-1.0.dist-info" / "entry_points.txt").mkdir(parents=True)  # not a file
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    assert may_register(GROUP, BUILTIN_REGISTRATION) is True

    monkeypatch.setattr(sys, "path", [str(tmp_path / "tool.egg"), *sys.path[1:]])
    assert may_register(GROUP, BUILTIN_REGISTRATION) is True  # an egg: not read here

    class Finder:
        @staticmethod
        def find_distributions(context: object = None) -> list[object]:
            return []

    monkeypatch.setattr(sys, "path", sys.path[1:])
    assert may_register(GROUP, BUILTIN_REGISTRATION) is False
    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    assert may_register(GROUP, BUILTIN_REGISTRATION) is True  # another finder of distributions


def test_a_path_entry_that_does_not_exist_holds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ALLOW_ENV)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "gone"), "", *sys.path])
    monkeypatch.chdir(tmp_path)
    assert may_register(GROUP, BUILTIN_REGISTRATION) is False
    _dist(tmp_path, "here-1.0.dist-info", "[bubu.tools]\nhere = m:tools\n")  # '' is the cwd
    assert may_register(GROUP, BUILTIN_REGISTRATION) is True
