"""The examples of docs/extending.md and examples/ run as written, and print what they say.

Every ``python`` block of the page runs in order in one namespace (the page is one session);
where a line reads ``print(...)  # text``, `text` must appear in what the block printed. The
scripts of examples/ run as ``__main__``; the plugin of examples/plugin is installed the way pip
would register it (a dist-info with its entry points on sys.path).
"""

from __future__ import annotations

import re
import runpy
import sys
import tomllib
from pathlib import Path

import pytest

from bubu.api import Agent
from bubu.plugins import ALLOW_ENV
from bubu.tools import registered_tools

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "extending.md"
EXAMPLES = ROOT / "examples"

BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
EXPECT = re.compile(r"^[ \t]*print\(.*\)[ \t]+# (.+)$", re.M)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from the repository root, with a scratch BUBU_HOME and no model from the environment."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("BUBU_HOME", str(tmp_path))
    monkeypatch.delenv("BUBU_DB", raising=False)
    monkeypatch.delenv("BUBU_MODEL", raising=False)


@pytest.mark.heavy
def test_every_python_block_of_the_page_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = BLOCK.findall(DOC.read_text())
    assert len(blocks) >= 6
    namespace: dict[str, object] = {"__name__": "extending_md"}
    for n, code in enumerate(blocks, start=1):
        exec(compile(code, f"{DOC.name}, python block {n}", "exec"), namespace)
        out = capsys.readouterr().out
        for expected in EXPECT.findall(code):
            assert expected in out, f"block {n} did not print {expected!r}; it printed:\n{out}"


def _main(name: str, capsys: pytest.CaptureFixture[str]) -> str:
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    return capsys.readouterr().out


def test_quickstart(capsys: pytest.CaptureFixture[str]) -> None:
    out = _main("quickstart.py", capsys)
    assert "completed: poem.txt has 5 words." in out
    assert "follow-up in the same session: True: It has 18 letters." in out


def test_notes_tools_recovers_a_provable_write(capsys: pytest.CaptureFixture[str]) -> None:
    out = _main("notes_tools.py", capsys)
    assert "recovery: save_note -> applied" in out
    assert out.rstrip().endswith("# plan\n\nShip on Friday.")


@pytest.mark.heavy
def test_mcp_agent(capsys: pytest.CaptureFixture[str]) -> None:
    out = _main("mcp_agent.py", capsys)
    assert "notes__read_note     read_only" in out
    assert "notes__add_note      side_effecting" in out
    assert out.rstrip().endswith("eggs, flour, milk")


def test_the_example_plugin_installs_through_its_entry_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db: Path, ws: Path
) -> None:
    project = tomllib.loads((EXAMPLES / "plugin" / "pyproject.toml").read_text())["project"]
    info = tmp_path / "bubu_hello-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: 0.1.0\n"
    )
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in names.items())
            for group, names in project["entry-points"].items()
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLES / "plugin"))
    monkeypatch.setenv(ALLOW_ENV, project["name"])  # the suite lets no other installed plugin in
    try:
        assert registered_tools()["greet"].effect == "read_only"
        with Agent(model="hello:world", plugins=True, store=db, workspace=ws) as agent:
            result = agent.run("say hello")
    finally:
        sys.modules.pop("bubu_hello", None)
    assert result.text == "The tool says: Hello, world!"
