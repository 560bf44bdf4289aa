"""Install hints for the optional extras name what works from where Bubu was installed: the
clone's extra (Bubu is not on the package index), the wheel file, the VCS URL, and only for an
install from an index the distribution's name; always with the Python that runs Bubu."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bubu.errors import ConfigError
from bubu.extras import Installed, from_direct_url, install_command, installed
from bubu.log import open_store

ROOT = Path(__file__).resolve().parents[2]
PIP = f"{shlex.quote(sys.executable)} -m pip install"


def test_bubu_run_from_a_clone_is_told_the_clones_extra() -> None:
    # These tests import Bubu from this clone's src/ (an editable install or PYTHONPATH=src).
    here = installed()
    assert here == Installed(origin="editable", source=str(ROOT))
    assert install_command("mcp") == f"{PIP} -e {shlex.quote(f'{ROOT}[mcp]')}"


def test_a_package_directory_outside_a_clone_is_judged_by_its_metadata(tmp_path: Path) -> None:
    fake = tmp_path / "site-packages" / "bubu"
    fake.mkdir(parents=True)
    assert installed(fake).origin in {"index", "clone", "editable", "wheel", "vcs"}
    clone = tmp_path / "work"
    (clone / "src" / "bubu").mkdir(parents=True)
    (clone / "pyproject.toml").write_text('[project]\nname = "bubu-agent"\n')
    assert installed(clone / "src" / "bubu") == Installed(origin="editable", source=str(clone))
    (clone / "pyproject.toml").write_text('[project]\nname = "something-else"\n')
    assert installed(clone / "src" / "bubu") == installed(fake)  # not bubu-agent: not a clone


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, "'bubu-agent[mcp]'"),
        ('{"url": "file:///home/me/bubu", "dir_info": {}}', "'/home/me/bubu[mcp]'"),
        (
            '{"url": "file:///home/me/bubu", "dir_info": {"editable": true}}',
            "-e '/home/me/bubu[mcp]'",
        ),
        (
            '{"url": "file:///tmp/w/bubu_agent-0.1.0-py3-none-any.whl", "archive_info": {}}',
            "'/tmp/w/bubu_agent-0.1.0-py3-none-any.whl[mcp]'",
        ),
        (
            '{"url": "https://github.com/o/bubu", "vcs_info": {"vcs": "git", "commit_id": "ab"}}',
            "'bubu-agent[mcp] @ git+https://github.com/o/bubu'",
        ),
        (
            '{"url": "https://files.example/bubu_agent-0.1.0.tar.gz", "archive_info": {}}',
            "'bubu-agent[mcp]'",
        ),
    ],
)
def test_each_way_of_installing_gets_its_own_command(raw: str | None, expected: str) -> None:
    assert install_command("mcp", from_direct_url(raw)) == f"{PIP} {expected}"


def test_the_postgres_hint_names_the_clones_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bubu.log.postgres", None)  # as if psycopg were missing
    with pytest.raises(ConfigError) as failed:
        open_store("postgresql://127.0.0.1/none")
    assert "bubu-agent[postgres]" not in str(failed.value)
    assert f"install it with `{PIP} -e {shlex.quote(f'{ROOT}[postgres]')}`" in str(failed.value)


def test_the_mcp_example_without_the_sdk_says_what_to_run_in_one_line() -> None:
    code = (
        "import runpy, sys; sys.modules['mcp'] = None; "  # as if the mcp extra were not installed
        f"runpy.run_path({str(ROOT / 'examples' / 'mcp_agent.py')!r}, run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("mcp_agent.py: ")
    assert f"install it with `{PIP} -e {shlex.quote(f'{ROOT}[mcp]')}`" in proc.stderr
