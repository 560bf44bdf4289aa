"""isolation: worktree — a child works in its own git worktree and branch under BUBU_HOME; its
result names the branch and diff; merge_child applies it to the parent's workspace."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from bubu import Agent
from bubu.engine.permissions import Policy
from bubu.providers.scripted import ScriptedProvider

from .helpers import delegate, finished, results, script


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one commit; BUBU_HOME beside it."""
    monkeypatch.setenv("BUBU_HOME", str(tmp_path / "home"))
    ws = tmp_path / "repo"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    _git(ws, "init", "-q", "-b", "main")
    _git(ws, "add", "-A")
    _git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    return ws.resolve()


def test_a_child_in_its_own_worktree_reports_its_branch_and_the_parent_merges_it(
    tmp_path: Path, repo: Path
) -> None:
    kid = script(
        tmp_path / "kid.jsonl",
        [
            {
                "tool_calls": [
                    {
                        "name": "edit_file",
                        "arguments": {"path": "a.txt", "old": "alpha", "new": "beta"},
                    }
                ]
            },
            {"text": "edited"},
        ],
    )
    parent = script(
        tmp_path / "p.jsonl",
        [
            {"tool_calls": [delegate("edit", model=kid, isolation="worktree")]},
            {"tool_calls": [{"name": "merge_child", "arguments": {"child": "CHILD"}}]},
            {"text": "merged"},
        ],
    )
    from bubu.engine.children import child_id

    with Agent(
        parent, store=tmp_path / "bubu.db", workspace=repo, policy=Policy(yes=True)
    ) as agent:
        # The child's id is known ahead: it is derived from the session and the call.
        info = agent.store.create_session(title="t", workspace=str(repo), model=agent.provider.spec)
        cid = child_id(info.id, "call_0_0")
        text = (tmp_path / "p.jsonl").read_text().replace("CHILD", cid)
        (tmp_path / "p.jsonl").write_text(text)
        agent.provider = ScriptedProvider(str(tmp_path / "p.jsonl"))  # re-read the script
        res = agent.run("go", session=info.id)
        assert res.ok, res
        recs = agent.session(res.session).records()
        (got,) = results(recs)
        assert f"branch bubu/{cid}" in got.result
        assert "-alpha\n+beta" in got.result
        (done,) = finished(recs)
        assert done.child == cid
        worktree = tmp_path / "home" / "worktrees" / cid
        assert (worktree / "a.txt").read_text() == "beta\n"
        # BUBU_HOME did not exist: the worktree made it, its owner's alone like any BUBU_HOME.
        assert stat.S_IMODE((tmp_path / "home").stat().st_mode) == 0o700
        assert _git(repo, "log", "-1", "--format=%s", f"bubu/{cid}").strip() == f"sub-agent {cid}"
        (merged,) = results(recs, "merge_child")
        assert not merged.is_error, merged.result
        assert (repo / "a.txt").read_text() == "beta\n"  # merged, uncommitted
        assert _git(repo, "status", "--porcelain").strip() == "M a.txt"


def test_worktree_isolation_outside_a_repository_is_a_clear_error(tmp_path: Path) -> None:
    ws = tmp_path / "plain"
    ws.mkdir()
    parent = script(tmp_path / "p.jsonl", [{"tool_calls": [delegate("x", isolation="worktree")]}])
    with Agent(parent, store=tmp_path / "bubu.db", workspace=ws, policy=Policy(yes=True)) as agent:
        res = agent.run("go")
        (got,) = results(agent.session(res.session).records())
        assert got.is_error
        assert got.result.startswith("the sub-agent did not run: isolation worktree needs a git")
