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
    got = _resolve(tmp_path, """
[[hooks.PreToolUse]]
matcher = "run_command"
command = "./no-rm.sh"
timeout = 5
on_error = "deny"

# Claude Code's shape, as in its settings.json
[[hooks.PostToolUse]]
matcher = "write_file|edit_file"
hooks = [{ type = "command", command = "ruff format", timeout = 30 }]
""", monkeypatch)  # fmt: skip
    assert got == [
        {"event": "PreToolUse", "matcher": "run_command", "command": "./no-rm.sh",
         "timeout": 5.0, "on_error": "deny"},
        {"event": "PostToolUse", "matcher": "write_file|edit_file", "command": "ruff format",
         "timeout": 30.0, "on_error": "allow"},
    ]  # fmt: skip


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
    mine = write_script(tmp_path / "m.jsonl", [
        {"tool_calls": [{"name": "run_command", "arguments": {"command": "rm a.txt"}}]},
        {"text": "done"},
    ] * 2)  # fmt: skip
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
    started = [c.note for r in records if isinstance(c := r.event.content, SystemNote)
               and isinstance(c.note, TurnStarted)]  # fmt: skip
    assert started[-1].deny == ["git push *", "rm *"]
    got = bubu_json(db, "config", "-w", str(repo), "--json")
    assert json.dumps(got["settings"]["hooks"]["value"]).count("SessionStart") == 2
