"""Named agents: the user's and a trusted workspace's, in Bubu's and Claude Code's shape; an
untrusted workspace's agents are ignored and said so."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu import Agent, trust
from bubu.agents import front_matter, load_agents, parse_agent
from bubu.engine.permissions import Policy
from bubu.errors import ConfigError
from bubu.events import Record, TurnStarted
from bubu.settings import chooser_files, workspace_layer

from .helpers import delegate, finished, notes, results, script


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A BUBU_HOME and HOME of the test's own."""
    h = tmp_path / "home"
    (h / ".bubu").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("BUBU_HOME", str(h / ".bubu"))
    return h


def _agent_file(path: Path, model: str, tools: str = "Read, Bash") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"---\nname: rev\ndescription: reviews\ntools: {tools}\nmodel: {model}\n---\n"
        "You review. Report what you found.\n"
    )


def _kid(tmp_path: Path) -> str:
    return script(
        tmp_path / "kid.jsonl",
        [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "x", "content": "y"}}]},
            {"text": "reviewed"},
        ],
    )


def _run(tmp_path: Path, ws: Path) -> tuple[Agent, list[Record]]:
    parent = script(tmp_path / "p.jsonl", [{"tool_calls": [delegate("review", agent="rev")]}])
    agent = Agent(parent, store=tmp_path / "bubu.db", workspace=ws, policy=Policy(yes=True))
    res = agent.run("go")
    return agent, agent.session(res.session).records()


def test_a_user_agent_chooses_the_childs_model_tools_and_instructions(
    tmp_path: Path, home: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _agent_file(home / ".bubu" / "agents" / "rev.md", _kid(tmp_path))
    agent, recs = _run(tmp_path, ws)
    with agent:
        (got,) = results(recs)
        assert not got.is_error, got.result
        assert got.result.endswith("reviewed")
        (done,) = finished(recs)
        child = agent.store.read(done.child)
        (start,) = notes(child, TurnStarted)
        assert start.system_prompt == "You review. Report what you found.\n"
        (refused,) = results(child, "write_file")
        assert "the tools are: read_file, run_command" in refused.result  # Read, Bash
        assert not (ws / "x").exists()


def test_an_untrusted_workspaces_agents_are_ignored_and_reported(
    tmp_path: Path, home: Path
) -> None:
    ws = tmp_path / "ws"
    _agent_file(ws / ".claude" / "agents" / "rev.md", _kid(tmp_path))
    agent, recs = _run(tmp_path, ws)
    with agent:
        (got,) = results(recs)
        assert got.is_error
        assert "there is no agent 'rev'" in got.result
        assert (
            "the workspace's agents (rev.md) are ignored: the workspace is not trusted"
            in got.result
        )
        assert not finished(recs)


def test_a_trusted_workspaces_agents_count_until_one_changes(tmp_path: Path, home: Path) -> None:
    ws = tmp_path / "ws"
    _agent_file(ws / ".bubu" / "agents" / "rev.md", _kid(tmp_path))
    (ws / ".bubu" / "config.toml").write_text("")
    layer = workspace_layer(ws)
    assert layer is not None
    trust.record(str(ws.resolve()), trust.digest(chooser_files(layer)), trusted=True)
    assert "rev" in load_agents(ws.resolve()).found
    agent, recs = _run(tmp_path, ws.resolve())
    with agent:
        (got,) = results(recs)
        assert got.result.endswith("reviewed")
    (ws / ".bubu" / "agents" / "rev.md").write_text("---\nname: rev\nmodel: openai:gpt-9\n---\n")
    assert load_agents(ws.resolve()).found == {}  # any change revokes the trust


def test_front_matter_lists_and_errors(tmp_path: Path) -> None:
    keys, body = front_matter("---\nname: a\ntools:\n  - Grep\n  - 'Glob'\n---\nbody\n", "f.md")
    assert keys == {"name": "a", "tools": ["Grep", "Glob"]}
    assert body == "body\n"
    bad = tmp_path / "bad.md"
    bad.write_text("no front matter\n")
    with pytest.raises(ConfigError, match=r"bad\.md: an agent file starts with a '---'"):
        parse_agent(bad, "user")
    (tmp_path / "x.md").write_text("---\nname: x\ntools: [Grep, LS]\nmodel: inherit\n---\n")
    a = parse_agent(tmp_path / "x.md", "user")
    assert (a.tools, a.model) == (("grep", "list_files"), None)


def test_bubu_agents_lists_the_users_and_reports_an_untrusted_workspaces(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    import hermetic

    home = tmp_path / "home"
    _agent_file(home / ".bubu" / "agents" / "rev.md", "inherit")
    ws = tmp_path / "ws"
    _agent_file(ws / ".claude" / "agents" / "evil.md", "openai:gpt-9")
    env = {**hermetic.environ("BUBU_"), "HOME": str(home), "BUBU_HOME": str(home / ".bubu")}
    done = subprocess.run(
        [sys.executable, "-m", "bubu", "agents", "-w", str(ws), "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert [(a["name"], a["scope"], a["model"]) for a in got["agents"]] == [("rev", "user", None)]
    (ignored,) = got["ignored"]
    assert "evil.md" in ignored
    assert "not trusted" in ignored
