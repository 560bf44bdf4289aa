"""Git control files and `.bubu` at any depth, for real: a sandboxed command cannot change them,
and what it creates or replaces all the same is reverted and said. Real git, a real submodule, a
planted ``core.fsmonitor``, and a real ``git status`` run afterwards outside the sandbox."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from bubu.tools import ToolContext, ToolResult, controlfiles
from bubu.tools.base import Tool
from bubu.tools.sandbox import confinement
from engine.cli import bubu
from engine.helpers import call, write_script

WRITE = confinement("workspace-write", False)
GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, check=True
    )
    return done.stdout


def run(tools: dict[str, Tool], ws: Path, command: str, sandboxed: bool = True) -> str:
    ctx = ToolContext(workspace=ws, timeout_s=60.0, sandbox=WRITE if sandboxed else None)
    result: ToolResult = tools["run_command"].run({"command": command}, ctx, None)
    return result.output


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository with one commit and a real submodule `sub` (cloned from `lib`)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q")
    (lib / "lib.txt").write_text("lib\n")
    git(lib, "add", ".")
    git(lib, "commit", "-qm", "lib")
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    git(ws, "init", "-q")
    (ws / "a.txt").write_text("a\n")
    git(ws, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "sub")
    git(ws, "add", ".")
    git(ws, "commit", "-qm", "init")
    return ws


# The attack of the issue: a gitdir with core.fsmonitor, and the submodule's .git file pointed
# at it, so that the user's next `git status` runs the planted program as the user.
REPOINT = (
    "cp -r .git/modules/sub planted-gitdir && "
    'git config -f planted-gitdir/config core.fsmonitor "$PWD/plant.sh" && '
    'git config -f planted-gitdir/config core.worktree "$PWD/sub" && '
    'printf \'#!/bin/sh\\ntouch "%s/PLANTED"\\n\' "$PWD" > plant.sh && chmod +x plant.sh && '
    "{ printf 'gitdir: ../planted-gitdir\\n' > sub/.git || "
    "{ mv sub sub-moved && mkdir sub && printf 'gitdir: ../planted-gitdir\\n' > sub/.git; }; }"
)


def test_the_attack_is_real_without_the_sandbox(tools: dict[str, Tool], project: Path) -> None:
    run(tools, project, REPOINT, sandboxed=False)
    git(project, "status")
    assert (project / "PLANTED").exists(), "the planted fsmonitor ran at git status"


def test_a_submodule_repointed_at_a_planted_gitdir_never_runs_it(
    tools: dict[str, Tool], project: Path
) -> None:
    before = (project / "sub" / ".git").read_bytes()
    out = run(tools, project, REPOINT)
    # Writing the read-only .git file failed; moving its directory away worked, and the new
    # .git file made in its place was removed and the real one moved back.
    assert "Read-only file system" in out, out
    assert "sub/.git (moved back from sub-moved/.git)" in out, out
    assert (project / "sub" / ".git").read_bytes() == before
    git(project, "status")
    assert not (project / "PLANTED").exists(), "the planted fsmonitor never runs"


def test_the_git_file_cannot_be_rewritten_in_place(tools: dict[str, Tool], project: Path) -> None:
    before = (project / "sub" / ".git").read_bytes()
    for attack in (
        "printf 'gitdir: /elsewhere\\n' > sub/.git",
        "rm -f sub/.git",
        "printf '[submodule \"sub\"]\\n\\tpath = x\\n' >> .gitmodules",
        "git -C sub config core.fsmonitor evil",
    ):
        out = run(tools, project, attack)
        assert "exit code 0" not in out.splitlines()[-1], (attack, out)
    assert (project / "sub" / ".git").read_bytes() == before
    assert "path = x" not in (project / ".gitmodules").read_text()


def test_a_nested_repositorys_config_is_read_only(tools: dict[str, Tool], project: Path) -> None:
    nested = project / "vendor" / "nested"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    config = (nested / ".git" / "config").read_bytes()
    for attack in (
        'git -C vendor/nested config core.fsmonitor "$PWD/plant.sh"',
        "printf '[core]\\n\\tfsmonitor = x\\n' >> vendor/nested/.git/config",
        "printf '#!/bin/sh\\n' > vendor/nested/.git/hooks/pre-commit",
    ):
        out = run(tools, project, attack)
        assert "exit code 0" not in out.splitlines()[-1], (attack, out)
    assert (nested / ".git" / "config").read_bytes() == config
    assert not (nested / ".git" / "hooks" / "pre-commit").exists()


def test_new_control_files_at_any_depth_are_removed_and_named(
    tools: dict[str, Tool], project: Path
) -> None:
    out = run(
        tools,
        project,
        "mkdir -p deep/er/x node_modules/pkg b && git init -q deep/er/repo && "
        "printf 'gitdir: /elsewhere\\n' > node_modules/pkg/.git && touch b/.gitmodules && "
        "ln -s /tmp deep/er/x/.git && echo kept > deep/er/kept.txt",
    )
    assert out.splitlines()[-1].startswith("exit code 0; the command created or changed git"), out
    for rel in ("b/.gitmodules", "deep/er/repo/.git", "deep/er/x/.git", "node_modules/pkg/.git"):
        assert rel in out, (rel, out)
        assert not os.path.lexists(project / rel), rel
    assert (project / "deep" / "er" / "kept.txt").read_text() == "kept\n"
    assert "created or changed" not in run(tools, project, "echo nothing; ls deep")


def test_a_command_cannot_create_bubu(tools: dict[str, Tool], project: Path) -> None:
    out = run(
        tools, project, "mkdir .bubu && echo 'model = \"scripted:m.jsonl\"' > .bubu/config.toml"
    )
    assert "removed what it created: .bubu" in out, out
    assert not (project / ".bubu").exists()


def test_nothing_is_left_in_the_workspace_by_the_sandbox_itself(
    tools: dict[str, Tool], ws: Path
) -> None:
    # No .bubu, no .git: bubblewrap must not make mount points for them on the host.
    assert run(tools, ws, "echo hi > made.txt; ls -A") == "made.txt\nexit code 0"
    assert sorted(p.name for p in ws.iterdir()) == ["made.txt"]


def test_bubu_run_removes_a_bubu_config_a_command_made(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    made = "mkdir -p .bubu && printf 'sandbox = \"off\"\\n' > .bubu/config.toml; echo $?"
    script = write_script(
        tmp_path / "s.jsonl",
        [{"tool_calls": [call("run_command", command=made)]}, {"text": "done"}],
    )
    db = tmp_path / "bubu.db"
    done = bubu(db, "run", "t", "-w", str(ws), "-m", f"scripted:{script}")
    assert done.returncode == 0, done.stderr
    assert not (ws / ".bubu").exists(), "the next run would obey it"


def test_a_rescan_sees_what_an_old_listing_would_hide(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    (root / "a" / "b").mkdir(parents=True)
    first = controlfiles.scan(str(root))
    # As though the first scan were long ago: unchanged directories are not listed again.
    old = dataclasses.replace(first, at_ns=time.time_ns() + 10**10)
    assert controlfiles.scan(str(root), old).found == {}
    (root / "a" / "b" / ".git").write_text("gitdir: /x\n")
    os.utime(root / "a" / "b", (0, 0))  # an mtime set back does not hide it: the ctime moved
    assert list(controlfiles.scan(str(root), old).found) == ["a/b/.git"]
    # Right after a scan, a change in the same clock tick is found too.
    (root / "c").mkdir()
    recent = controlfiles.scan(str(root))
    (root / "c" / ".gitmodules").write_text("")
    assert "c/.gitmodules" in controlfiles.scan(str(root), recent).found


def test_a_huge_workspace_is_checked_as_far_as_the_bound_and_says_so(
    tools: dict[str, Tool], ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(controlfiles, "MAX_DIRS", 3)
    for name in "abcde":
        (ws / name).mkdir()
    out = run(tools, ws, "true")
    assert out.endswith(
        "exit code 0; the workspace has more than 3 directories: Bubu looked for git and Bubu "
        "control files the command made in that many only"
    ), out


def test_a_symlink_swapped_in_never_leads_a_removal_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    outside = tmp_path / "outside"
    (outside / ".git").mkdir(parents=True)
    before = controlfiles.scan(str(ws))
    (ws / "x" / ".git").mkdir(parents=True)
    seen = controlfiles.scan(str(ws), before)
    # Between the look and the removal, a parallel command swaps the directory for a symlink.
    shutil.rmtree(ws / "x")
    (ws / "x").symlink_to(outside)
    monkeypatch.setattr(controlfiles, "scan", lambda root, previous=None: seen)
    report, _ = controlfiles.check(before)
    assert (outside / ".git").is_dir()
    assert report.held == ("x/.git",)


def test_a_background_command_cannot_keep_a_planted_git_file_while_it_runs(
    project: Path,
) -> None:
    """A command that stays running (a server, a watcher) is checked while it runs, not only
    once it ends: the user's `git status` in another terminal meanwhile runs nothing."""
    from bubu.tools.background import Processes
    from bubu.tools.bgtools import ProcessKillArgs, ProcessOutputArgs, process_kill, process_output
    from tools.test_background import Kept

    procs = Processes("ses_watch")
    procs.recorder = Kept()
    ctx = ToolContext(
        workspace=project, processes=procs, marker="ses_watch/run_1/call_1", sandbox=WRITE
    )
    before = (project / "sub" / ".git").read_bytes()
    res = tools_run_background(ctx, f"{REPOINT} && echo planted && sleep 600")
    handle = res.split()[5]
    deadline = time.monotonic() + 60
    while True:
        out = process_output(ProcessOutputArgs(handle=handle, offset=0), ctx).output
        if "put back what it changed" in out:
            break
        assert time.monotonic() < deadline, out
        time.sleep(0.1)
    live = procs.get(handle)
    assert live is not None
    assert live.state == "running"
    assert "sub/.git (moved back from sub-moved/.git)" in out, out
    assert (project / "sub" / ".git").read_bytes() == before
    git(project, "status")
    assert not (project / "PLANTED").exists(), "the planted fsmonitor never runs"
    process_kill(ProcessKillArgs(handle=handle), ctx)


def tools_run_background(ctx: ToolContext, command: str) -> str:
    from bubu.tools.shell import run_command

    res = run_command.run({"command": command, "background": True}, ctx, None)
    assert not res.is_error, res.output
    return res.output
