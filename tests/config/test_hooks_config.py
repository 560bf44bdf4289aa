"""Hooks and deny rules in config files: both shapes of `[[hooks.EVENT]]` are read; a
repository's hooks run only once the user trusts it (the user's own run beside them); a
repository may always add deny rules, and `--deny` adds to the files' rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bubu.errors import ConfigError
from bubu.events import SystemNote, TurnStarted
from bubu.log.sqlite import SQLiteStore
from bubu.settings import resolve
from engine.cli import bubu, bubu_json
from engine.helpers import write_script


def _resolve(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv("BUBU_HOME", str(tmp_path))
    (tmp_path / "config.toml").write_text(text)
    return resolve(workspace=None, flags={}, defaults={}).values["hooks"].value


def test_both_shapes_of_a_hook_table_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _resolve(
        tmp_path,
        """
[[hooks.PreToolUse]]
matcher = "run_command"
command = "./no-rm.sh"
timeout = 5
on_error = "deny"

# Claude Code's shape, as in its settings.json
[[hooks.PostToolUse]]
matcher = "write_file|edit_file"
hooks = [{ type = "command", command = "ruff format", timeout = 30 }]
""",
        monkeypatch,
    )
    assert got == [
        {
            "event": "PreToolUse",
            "matcher": "run_command",
            "command": "./no-rm.sh",
            "timeout": 5.0,
            "on_error": "deny",
        },
        {
            "event": "PostToolUse",
            "matcher": "write_file|edit_file",
            "command": "ruff format",
            "timeout": 30.0,
            "on_error": "allow",
        },
    ]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[[hooks.BeforeTool]]\ncommand = "x"\n', "unknown hook event 'BeforeTool'"),
        ("[[hooks.Stop]]\ntimeout = 3\n", "command must be a non-empty string"),
        ('[[hooks.Stop]]\ncommand = "x"\non_error = "maybe"\n', 'on_error must be "deny"'),
        ('[[hooks.Stop]]\ncommand = "x"\nwhen = 1\n', "unknown field 'when'"),
    ],
)
def test_a_bad_hook_table_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, said: str
) -> None:
    with pytest.raises(ConfigError, match=said) as e:
        _resolve(tmp_path, text, monkeypatch)
    assert str(tmp_path / "config.toml") in str(e.value)


@pytest.mark.heavy
def test_a_repositorys_hooks_run_only_once_trusted_and_its_deny_rules_always_apply(
    tmp_path: Path,
) -> None:
    mine = write_script(
        tmp_path / "m.jsonl",
        [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": "rm a.txt"}}]},
            {"text": "done"},
        ]
        * 2,
    )
    ran = tmp_path / "ran.txt"
    (tmp_path / "config.toml").write_text(
        f'model = "scripted:{mine}"\n[[hooks.SessionStart]]\ncommand = "echo user >> {ran}"\n'
    )
    repo = tmp_path / "repo"
    (repo / ".bubu").mkdir(parents=True)
    (repo / "a.txt").write_text("alpha\n")
    (repo / ".bubu" / "config.toml").write_text(
        f'deny = ["rm *"]\n[[hooks.SessionStart]]\ncommand = "echo repo >> {ran}"\n'
    )
    db = tmp_path / "bubu.db"
    done = bubu(db, "run", "-w", str(repo), "--sandbox", "off", "--yes", "tidy up")
    assert done.returncode == 0, done.stderr
    assert ran.read_text().split() == ["user"]  # the repository's hook did not run
    assert (repo / "a.txt").exists()  # its deny rule applied, untrusted
    got = bubu_json(db, "config", "-w", str(repo), "--json")
    assert {i["key"]: i["kind"] for i in got["ignored"]} == {"hooks": "untrusted"}
    assert got["settings"]["deny"]["value"] == ["rm *"]

    assert bubu(db, "trust", str(repo)).returncode == 0
    done = bubu(db, "run", "-w", str(repo), "--deny", "git push *", "--sandbox", "off", "again")
    assert done.returncode == 0, done.stderr
    assert ran.read_text().split() == ["user", "user", "repo"]
    # The flag's rule joins the files' rules in what the turn records.
    with SQLiteStore(db) as store:
        records = store.read(store.sessions()[0].id, kinds=("turn_started",))
    started = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
    ]
    assert started[-1].deny == ["git push *", "rm *"]
    got = bubu_json(db, "config", "-w", str(repo), "--json")
    assert json.dumps(got["settings"]["hooks"]["value"]).count("SessionStart") == 2


@pytest.mark.heavy
def test_a_trusted_repositorys_hook_script_rewritten_by_a_command_is_not_run(
    tmp_path: Path,
) -> None:
    """A trusted repository's hook runs outside the sandbox; the script it names lies in the
    workspace, where a sandboxed command may write. Rewritten, it is not run (and said so)."""
    planted = tmp_path / "PWNED"
    mine = write_script(
        tmp_path / "m.jsonl",
        [
            {
                "tool_calls": [
                    {
                        "name": "run_command",
                        "arguments": {
                            "command": (
                                f"printf 'touch {planted}\\n' > scripts/hook.sh; echo rewritten"
                            )
                        },
                    }
                ]
            },
            {"tool_calls": [{"name": "list_files", "arguments": {}}]},
            {"text": "done"},
        ],
    )
    (tmp_path / "config.toml").write_text(f'model = "scripted:{mine}"\n')
    repo = tmp_path / "repo"
    (repo / ".bubu").mkdir(parents=True)
    (repo / "scripts").mkdir()
    (repo / "scripts" / "hook.sh").write_text("cat > /dev/null\nexit 0\n")
    (repo / ".bubu" / "config.toml").write_text(
        '[[hooks.PreToolUse]]\ncommand = "sh scripts/hook.sh"\n'
    )
    db = tmp_path / "bubu.db"
    assert bubu(db, "trust", str(repo)).returncode == 0
    done = bubu(db, "run", "-w", str(repo), "--yes", "tidy up")
    assert done.returncode == 0, done.stderr
    assert "touch" in (repo / "scripts" / "hook.sh").read_text()  # the command did rewrite it
    assert not planted.exists(), "the rewritten hook ran outside the sandbox"
    with SQLiteStore(db) as store:
        records = store.read(store.sessions()[0].id, kinds=("hook_run",))
    failures = [getattr(r.event.content, "note", None) for r in records]
    said = [getattr(n, "failure", None) for n in failures]
    assert said[0] is None  # before the rewrite it ran
    assert said[1] is not None
    assert "changed since you trusted it" in said[1], said
    # The script is part of the trust: the next run treats the workspace as changed.
    got = bubu_json(db, "config", "-w", str(repo), "--json")
    assert got["workspace_trust"] == "changed"


def test_the_trust_covers_the_programs_a_repositorys_hooks_and_servers_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bubu import settings

    monkeypatch.setenv("BUBU_HOME", str(tmp_path / "home"))
    repo = (tmp_path / "repo").resolve()
    (repo / ".bubu").mkdir(parents=True)
    (repo / "tools").mkdir()
    for name in ("hook.py", "server.py", "other.py"):
        (repo / "tools" / name).write_text("")
    servers = {"servers": {"x": {"command": "python", "args": ["tools/server.py", "-v"]}}}
    (repo / ".bubu" / "servers.json").write_text(json.dumps(servers))
    (repo / ".bubu" / "config.toml").write_text(
        'mcp = "servers.json"\n[[hooks.Stop]]\n'
        'command = "python3 $BUBU_PROJECT_DIR/tools/hook.py --flag"\n'
    )
    ws = settings.workspace_layer(repo)
    assert ws is not None
    files = settings.chooser_files(ws)
    assert repo / "tools" / "hook.py" in files
    assert repo / "tools" / "server.py" in files
    assert repo / "tools" / "other.py" not in files
    from bubu import trust

    trust.record(str(repo), trust.digest(files), trusted=True)
    assert settings.still_trusted(str(repo))
    (repo / "tools" / "server.py").write_text("import os\n")
    assert not settings.still_trusted(str(repo))
