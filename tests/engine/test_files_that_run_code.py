"""Inside the workspace, the file tools ask a person before writing a file that a common tool
runs or loads as configuration at the user's next ordinary step: by name, and by what a
directory holds (a virtualenv, a Git directory). Real turns with `--yes`, nobody to answer."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bubu.engine.permissions import Policy
from bubu.engine.session import new_session, start_turn
from bubu.events import FunctionResponse, PermissionRequest
from bubu.log.sqlite import SQLiteStore
from bubu.tools.base import ToolContext
from bubu.tools.decorator import tool
from bubu.tools.workspace import guard

from .helpers import call, calls, make_host, outcomes, scripted, write_script

PLANTED = "import os; os.system('touch pwned')\n"


def _turn(
    tmp_path: Path, store: SQLiteStore, ws: Path, tool_calls: list[dict[str, object]]
) -> tuple[list[FunctionResponse], list[PermissionRequest]]:
    """Run one turn of `tool_calls` under --yes with nobody to ask; the outcomes in call order."""
    script = write_script(tmp_path / "s.jsonl", [{"tool_calls": tool_calls}, {"text": "ok"}])
    provider = scripted(script)
    info = new_session(store, task="t", workspace=ws, model=provider.spec)
    host = make_host(store, provider, policy=replace(Policy(yes=True), sandbox="off"))
    assert start_turn(host, info, "t") == "completed"
    records = store.read(info.id)
    by_call = outcomes(records)
    results = [by_call[c.call_id][-1][1] for _, c in calls(records)]
    requests = [
        r.event.actions.permission_request
        for r in records
        if r.event.actions is not None and r.event.actions.permission_request is not None
    ]
    return results, requests


def _snapshot(ws: Path) -> dict[str, bytes]:
    return {str(p.relative_to(ws)): p.read_bytes() for p in ws.rglob("*") if p.is_file()}


def _venv(ws: Path, name: str) -> Path:
    """A real virtualenv (`python -m venv`, without pip) at `ws/name`, with a `.pth` file that
    imports a module, as coverage's and editable installs' do. Its interpreter is a copy, not a
    symlink to the one running the tests: a build without protection writes through a link."""
    root = ws / name
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--copies", str(root)], check=True
    )
    (site,) = root.glob("lib/python*/site-packages")
    (site / "startup_hook.pth").write_text("import _startup_hook; _startup_hook.go()\n")
    (site / "_startup_hook.py").write_text("def go():\n    pass\n")
    (site / "lazy.pth").write_text("import importlib; importlib.import_module('lazyhook')\n")
    (site / "paths.pth").write_text("/opt/extra\n")
    (site / "requests").mkdir()
    (site / "requests" / "__init__.py").write_text("")
    return root


def test_a_virtualenv_anywhere_is_found_by_its_pyvenv_cfg(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    root = _venv(ws, "tools/py-env")  # not named .venv or venv
    site = next(root.glob("lib/python*/site-packages")).relative_to(ws)
    protected = [
        "tools/py-env/bin/activate",
        "tools/py-env/bin/activate.fish",
        "tools/py-env/bin/python",
        "tools/py-env/bin/pytest",  # a new program, run by name once activated
        "tools/py-env/pyvenv.cfg",
        "tools/py-env/pip.conf",
        f"{site}/_startup_hook.py",  # imported by a .pth import line at every start
        f"{site}/lazyhook/__init__.py",  # imported by importlib.import_module in one
        f"{site}/new.pth",
        f"{site}/sitecustomize.py",
    ]
    ordinary = [f"{site}/requests/__init__.py", "tools/py-env/README.md", "tools/notes.txt"]
    before = _snapshot(ws)
    results, requests = _turn(
        tmp_path,
        sqlite_store,
        ws,
        [call("write_file", path=p, content=PLANTED) for p in [*protected, *ordinary]],
    )
    for path, result in zip([*protected, *ordinary], results, strict=True):
        assert result.is_error == (path in protected), (path, result.result)
    for path, result in zip(protected, results, strict=False):
        assert "virtualenv" in result.result or "protected path" in result.result, path
        assert "--yes does not" in result.result, path
    assert len(requests) == len(protected)
    assert all(r.protected for r in requests)
    after = _snapshot(ws)
    for path in protected:
        assert after.get(path) == before.get(path), f"{path} was written"
    for path in ordinary:
        assert after[path] == PLANTED.encode()


def test_a_virtualenv_file_reached_through_a_symlink_or_dotdot_is_protected(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    root = _venv(ws, ".venv")
    (ws / "activate-link").symlink_to(root / "bin" / "activate")
    before = (root / "bin" / "activate").read_bytes()
    results, _ = _turn(
        tmp_path,
        sqlite_store,
        ws,
        [
            call("write_file", path="activate-link", content=PLANTED),
            call("write_file", path="src/../.venv/bin/activate", content=PLANTED),
            call("edit_file", path=".venv/bin/activate", old="deactivate", new="touch pwned; x"),
        ],
    )
    assert [r.is_error for r in results] == [True, True, True]
    assert (root / "bin" / "activate").read_bytes() == before


def test_a_pth_import_changed_after_a_check_is_seen(tmp_path: Path, ws: Path) -> None:
    from bubu.tools.kinds import kind_reason

    root = _venv(ws, ".venv")
    site = next(root.glob("lib/python*/site-packages"))
    target = str(site / "later.py")
    assert kind_reason(target, stop=str(ws)) is None
    (site / "startup_hook.pth").write_text("import later\n")  # the same file, edited in place
    assert kind_reason(target, stop=str(ws)) is not None


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(
        ["git", "-c", "protocol.file.allow=always", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(cwd),
            "PATH": "/usr/bin:/bin",
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )


def test_git_control_files_at_any_depth_are_protected(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    _git("init", "-q", cwd=lib)
    (lib / "x").write_text("x\n")
    _git("add", "x", cwd=lib)
    _git("commit", "-qm", "x", cwd=lib)
    _git("init", "-q", cwd=ws)
    _git("submodule", "add", "-q", str(lib), "vendor/lib", cwd=ws)
    (ws / "store").mkdir()
    _git("init", "-q", "--separate-git-dir", str(ws / "store" / "nested-gitdir"), "nested", cwd=ws)
    _git("init", "-q", "--bare", "fixtures/remote.git", cwd=ws)
    protected = [
        "vendor/lib/.git",  # the submodule's pointer file
        ".git/modules/vendor/lib/config",
        ".gitmodules",
        "nested/.git",
        "store/nested-gitdir/config",  # a Git directory by what it holds, not by its name
        "store/nested-gitdir/hooks/post-checkout",
        "fixtures/remote.git/config",
        "fixtures/remote.git/hooks/pre-receive",
        "deep/er/.git/config",
    ]
    before = _snapshot(ws)
    results, requests = _turn(
        tmp_path,
        sqlite_store,
        ws,
        [
            call("write_file", path=p, content='[core]\n\tfsmonitor = "touch pwned"\n')
            for p in protected
        ]
        + [call("write_file", path="vendor/lib/x", content="ok\n")],
    )
    assert [r.is_error for r in results] == [True] * len(protected) + [False]
    assert len(requests) == len(protected)
    after = _snapshot(ws)
    for path in protected:
        assert after.get(path) == before.get(path), f"{path} was written"


NAMES = [
    ".hg/hgrc",
    ".svn/wc.db",
    ".bzr/branch/branch.conf",
    "_darcs/prefs/defaults",
    ".jj/repo/config.toml",
    ".tool-versions",
    "mise.local.toml",
    ".config/mise/config.toml",
    ".config/mise.toml",
    ".npmrc",
    ".yarnrc",
    ".rvmrc",
    ".gdbinit",
    ".lldbinit",
    ".pdbrc",
    ".exrc",
    ".nvim.lua",
    ".dir-locals.el",
    ".zed/settings.json",
    ".helix/languages.toml",
    ".devcontainer.json",
    "sub/dir/.HG/HGRC",
]


def test_files_that_run_code_are_protected_by_name(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    plain = [".nvmrc", ".python-version", ".editorconfig", ".env.example", "package.json"]
    results, requests = _turn(
        tmp_path,
        sqlite_store,
        ws,
        [call("write_file", path=p, content="x\n") for p in [*NAMES, *plain]],
    )
    for path, result in zip([*NAMES, *plain], results, strict=True):
        assert result.is_error == (path in NAMES), (path, result.result)
    assert len(requests) == len(NAMES)
    for path in NAMES:
        assert not (ws / path).exists(), path


@pytest.mark.parametrize("target", [".venv/bin/activate", "store/gd/config"])
def test_an_allow_listed_redirection_into_a_protected_directory_asks(
    tmp_path: Path, target: str
) -> None:
    _venv(tmp_path, ".venv")
    (tmp_path / "store").mkdir()
    _git("init", "-q", "--separate-git-dir", str(tmp_path / "store" / "gd"), "n", cwd=tmp_path)
    policy = Policy(allow_commands=("echo *",))
    verdict = policy.check_command(f"echo x >> {target}", cwd=str(tmp_path))
    assert not verdict.allowed
    assert verdict.why is not None
    assert "protected" in verdict.why


def test_a_writing_tool_of_ones_own_is_judged_by_its_path(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    @tool(effect="side_effecting", path_arg="path")
    def append_line(path: str, line: str, ctx: ToolContext) -> str:
        """Append a line to a file."""
        with open(guard(ctx, path), "a", encoding="utf-8") as f:
            f.write(line + "\n")
        return "appended"

    (ws / ".hg").mkdir()
    (ws / ".hg" / "hgrc").write_text("[ui]\n")
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {
                "tool_calls": [
                    call("append_line", path=".hg/hgrc", line="[hooks]\npre-status = touch pwned"),
                    call("append_line", path="notes.txt", line="ok"),
                ]
            },
            {"text": "ok"},
        ],
    )
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    host = make_host(sqlite_store, provider, policy=replace(Policy(yes=True), sandbox="off"))
    host.tools["append_line"] = append_line
    assert start_turn(host, info, "t") == "completed"
    assert (ws / ".hg" / "hgrc").read_text() == "[ui]\n"
    assert (ws / "notes.txt").read_text() == "ok\n"


def test_a_git_directory_cannot_be_made_one_file_at_a_time(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "config").mkdir()  # an ordinary project directory named config
    steps = [
        ("src/objects/info/packs", False),
        ("src/refs/heads/main", False),
        ("src/HEAD", True),  # the one file every Git directory needs
        ("src/config/app.toml", False),
        ("src/main.py", False),
    ]
    results, _ = _turn(
        tmp_path,
        sqlite_store,
        ws,
        [call("write_file", path=p, content="ref: refs/heads/main\n") for p, _ in steps],
    )
    assert [r.is_error for r in results] == [asks for _, asks in steps]
    done = subprocess.run(
        ["git", "-C", str(ws / "src"), "rev-parse", "--git-dir"],
        capture_output=True,
        text=True,
        check=False,
        env={
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(tmp_path),
            "PATH": "/usr/bin:/bin",
            "GIT_CEILING_DIRECTORIES": str(ws),
        },
    )
    assert done.returncode != 0, f"git found a repository: {done.stdout}"
