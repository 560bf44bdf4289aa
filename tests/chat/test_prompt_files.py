"""Prompt files (`/NAME ARGS`), skills and `@path` mentions, on real files and a real log: what
the user's message becomes, what the model is told of in the prefix and reads on demand, what a
workspace that is not trusted may not choose."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from bubu import frontmatter, trust
from bubu.cli.mentions import MentionCompleter, mentioned
from bubu.cli.prompts import find, workspace_trusted
from bubu.engine.extensions import allow_patterns, expand, prompt_files, skills
from bubu.errors import ConfigError
from bubu.events import FunctionCall, FunctionResponse, SkillsListed, SystemNote, Text
from bubu.log.sqlite import SQLiteStore
from bubu.settings import chooser_files, workspace_layer
from bubu.tools import ToolContext
from bubu.tools.skill import skill
from engine.cli import bubu, only_session
from engine.helpers import write_script

REVIEW = """---
description: Review a file for bugs
argument-hint: FILE
model: scripted:/nowhere.jsonl
allowed-tools: Bash(git diff:*), Bash(pytest), Read
---
Review $ARGUMENTS for bugs; start with $1.
"""

SKILL = """---
name: release
description: >
  How to cut a release of this project.
---
1. Bump the version in pyproject.toml.
2. Run scripts/release.sh.
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("BUBU_HOME", str(h))
    return h


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    (w / ".bubu" / "commands").mkdir(parents=True)
    (w / ".bubu" / "commands" / "review.md").write_text(REVIEW)
    (w / ".claude" / "commands").mkdir(parents=True)
    (w / ".claude" / "commands" / "hello.md").write_text("Say hello to $ARGUMENTS.\n")
    (w / ".agents" / "skills" / "release").mkdir(parents=True)
    (w / ".agents" / "skills" / "release" / "SKILL.md").write_text(SKILL)
    (w / ".agents" / "skills" / "release" / "checklist.md").write_text("- tag it\n")
    (w / "main.py").write_text("print('hi')\n")
    return w.resolve()


def test_front_matter_gives_keys_lists_and_the_body() -> None:
    doc = frontmatter.parse(REVIEW)
    assert doc.meta["description"] == "Review a file for bugs"
    assert frontmatter.words(doc.meta["allowed_tools"]) == [
        "Bash(git diff:*)",
        "Bash(pytest)",
        "Read",
    ]
    assert doc.body == "Review $ARGUMENTS for bugs; start with $1.\n"
    assert frontmatter.parse("no front matter\n").body == "no front matter\n"
    assert frontmatter.parse("---\nkey: v\nno end\n").meta == {}


def test_prompt_files_are_found_in_each_place_and_the_users_own_wins(ws: Path, home: Path) -> None:
    (home / "commands").mkdir()
    (home / "commands" / "hello.md").write_text("Mine: hello $ARGUMENTS.\n")
    files = prompt_files(str(ws))
    assert sorted(files) == ["hello", "review"]
    assert files["hello"].origin == "user"
    assert files["hello"].body == "Mine: hello $ARGUMENTS.\n"
    r = files["review"]
    assert (r.origin, r.model, r.argument_hint) == ("workspace", "scripted:/nowhere.jsonl", "FILE")
    assert expand(r, "a.py b.py") == "Review a.py b.py for bugs; start with a.py."
    assert allow_patterns(r.allowed_tools) == ["git diff", "git diff *", "pytest"]


def test_a_workspace_prompt_file_chooses_nothing_until_the_workspace_is_trusted(
    ws: Path, home: Path
) -> None:
    prepared = find("/review main.py", str(ws))
    assert prepared is not None
    assert prepared.prompt == "Review main.py for bugs; start with main.py."
    assert (prepared.model, prepared.allow) == ("", ())
    assert prepared.ignored is not None
    assert "model, allowed-tools, ignored: the workspace is not trusted" in prepared.ignored
    (ws / ".bubu" / "config.toml").write_text("max_steps = 5\n")
    layer = workspace_layer(ws)
    assert layer is not None
    assert ws / ".bubu" / "commands" / "review.md" in chooser_files(layer)
    trust.record(str(ws), trust.digest(chooser_files(layer)), trusted=True)
    assert workspace_trusted(str(ws))
    prepared = find("/review main.py", str(ws))
    assert prepared is not None
    assert prepared.model == "scripted:/nowhere.jsonl"
    assert prepared.allow == ("git diff", "git diff *", "pytest")
    (ws / ".bubu" / "commands" / "review.md").write_text(REVIEW.replace("pytest", "rm"))
    assert not workspace_trusted(str(ws))  # a changed prompt file asks again


def test_an_unknown_name_lists_the_prompt_files(ws: Path, home: Path) -> None:
    with pytest.raises(ConfigError, match=r"no prompt file for /nope .* here: /hello, /review"):
        find("/nope now", str(ws))
    assert find("/usr/bin/python is slow", str(ws)) is None
    assert find("fix it", str(ws)) is None


def test_skills_are_found_with_their_digest_and_read_on_demand(ws: Path, home: Path) -> None:
    (found,) = skills(str(ws))
    assert (found.name, found.where) == ("release", ".agents/skills/release")
    assert found.description == "How to cut a release of this project."
    assert found.sha256 == hashlib.sha256(SKILL.encode()).hexdigest()
    ctx = ToolContext(workspace=ws)
    body = skill.run({"name": "release"}, ctx, None)
    assert not body.is_error
    assert f"sha256 {found.sha256}" in body.output
    assert "Run scripts/release.sh." in body.output
    assert "its other files: checklist.md" in body.output
    other = skill.run({"name": "release", "file": "checklist.md"}, ctx, None)
    assert "- tag it" in other.output
    out = skill.run({"name": "release", "file": "../../../main.py"}, ctx, None)
    assert out.is_error
    assert "not a file of the skill's directory" in out.output
    missing = skill.run({"name": "deploy"}, ctx, None)
    assert missing.is_error
    assert "the skills are: release" in missing.output


def test_a_skill_symlinked_out_of_the_workspace_is_not_followed(
    ws: Path, home: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "SKILL.md").write_text("---\nname: leak\ndescription: x\n---\nsecret\n")
    os.symlink(secret, ws / ".agents" / "skills" / "leak")
    assert [s.name for s in skills(str(ws))] == ["release"]


def test_mentions_name_workspace_files_only(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("no\n")
    text = "look at @main.py, and @../outside.txt and @nothing.py and mail@example.org"
    assert mentioned(text, str(ws)) == ["main.py"]


def test_at_completes_workspace_paths(ws: Path) -> None:
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    c = MentionCompleter(str(ws))
    got = [x.text for x in c.get_completions(Document("read @ma"), CompleteEvent())]
    assert got == ["@main.py"]
    got = [x.text for x in c.get_completions(Document("@.agents/sk"), CompleteEvent())]
    assert got == ["@.agents/skills/"]
    assert list(c.get_completions(Document("@../"), CompleteEvent())) == []


@pytest.mark.heavy
def test_bubu_run_sends_a_prompt_file_and_the_skills_reach_the_prefix_and_the_log(
    ws: Path, tmp_path: Path
) -> None:
    db = tmp_path / "home" / "bubu.db"
    db.parent.mkdir(exist_ok=True)
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [{"name": "skill", "arguments": {"name": "release"}}]},
            {"text": "released"},
        ],
    )
    done = bubu(db, "run", "/hello the team", "-w", str(ws), "-m", f"scripted:{script}")
    assert done.returncode == 0, done.stderr
    with SQLiteStore(db) as store:
        records = store.read(only_session(db))
    texts = [c.text for r in records if isinstance(c := r.event.content, Text)]
    assert texts[0] == "Say hello to the team."
    (listed,) = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, SkillsListed)
    ]
    assert [(s.name, s.where) for s in listed.skills] == [("release", ".agents/skills/release")]
    (resp,) = [c for r in records if isinstance(c := r.event.content, FunctionResponse)]
    assert "Run scripts/release.sh." in resp.result
    assert not resp.is_error
    done = bubu(db, "context", only_session(db), "--json")
    assert done.returncode == 0, done.stderr
    assert "- release: How to cut a release of this project." in done.stdout


def test_bubu_run_refuses_an_unknown_prompt_file_before_anything_is_written(
    ws: Path, tmp_path: Path
) -> None:
    db = tmp_path / "home" / "bubu.db"
    db.parent.mkdir(exist_ok=True)
    done = bubu(db, "run", "/nope", "-w", str(ws), "-m", "scripted:/x.jsonl")
    assert done.returncode != 0
    assert "no prompt file for /nope" in done.stderr
    assert not db.exists() or not SQLiteStore(db).sessions()


def test_a_mention_is_a_recorded_read_file_call_the_model_sees(ws: Path, tmp_path: Path) -> None:
    from bubu.engine.session import new_session, start_turn
    from engine.helpers import make_host, scripted

    model = scripted(write_script(tmp_path / "m.jsonl", [{"text": "seen"}]))
    with SQLiteStore(tmp_path / "bubu.db") as store:
        host = make_host(store, model)
        info = new_session(store, task="t", workspace=ws, model=model.spec)
        assert start_turn(host, info, "explain @main.py", reads=["main.py"]) == "completed"
        records = store.read(info.id)
    (fc,) = [(r, c) for r in records if isinstance(c := r.event.content, FunctionCall)]
    assert (fc[1].name, fc[1].arguments, fc[0].event.author) == (
        "read_file",
        {"path": "main.py"},
        "host",
    )
    (resp,) = [c for r in records if isinstance(c := r.event.content, FunctionResponse)]
    assert "print('hi')" in resp.result
    (request,) = model.requests
    assert "print('hi')" in str(request.messages)
    # A host without the skill tool lists no skills: the model is never told of what it
    # cannot read.
    notes = [r.event.content.note for r in records if isinstance(r.event.content, SystemNote)]
    assert not any(isinstance(n, SkillsListed) for n in notes)
    assert "# Skills" not in request.system


def test_the_skills_section_is_the_same_bytes_on_every_call(ws: Path, tmp_path: Path) -> None:
    """The list is fixed when the session's first turn starts: a skill added later changes no
    request of the session (the provider's prefix cache keeps hitting)."""
    from bubu.engine.session import new_session, start_turn
    from engine.helpers import make_host, scripted

    model = scripted(
        write_script(
            tmp_path / "m.jsonl",
            [
                {"tool_calls": [{"name": "skill", "arguments": {"name": "release"}}]},
                {"text": "one"},
                {"text": "two"},
            ],
        )
    )
    with SQLiteStore(tmp_path / "bubu.db") as store:
        host = make_host(store, model)
        host.tools = {**host.tools, "skill": skill}
        info = new_session(store, task="t", workspace=ws, model=model.spec)
        assert start_turn(host, info, "release it") == "completed"
        (ws / ".bubu" / "skills" / "later").mkdir(parents=True)
        (ws / ".bubu" / "skills" / "later" / "SKILL.md").write_text(
            "---\nname: later\ndescription: Added later.\n---\nx\n"
        )
        assert start_turn(host, info, "again") == "completed"
    systems = {r.system for r in model.requests}
    assert len(model.requests) == 3
    assert len(systems) == 1
    (system,) = systems
    assert "# Skills" in system
    assert "- release: How to cut a release of this project." in system
    assert "later" not in system
