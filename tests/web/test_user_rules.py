"""Turns the web UI starts run under the deny rules and hooks of the user's own config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.log.sqlite import SQLiteStore
from bubu.web.runs import default_host


def test_a_page_host_has_the_users_deny_rules_and_hooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUBU_HOME", str(tmp_path))
    (tmp_path / "config.toml").write_text(
        'deny = ["rm *"]\n[[hooks.PreToolUse]]\nmatcher = "run_command"\ncommand = "./check"\n'
    )
    script = tmp_path / "s.jsonl"
    script.write_text('{"text": "ok"}\n')
    with SQLiteStore(tmp_path / "bubu.db") as store:
        host = default_host(store, f"scripted:{script}")
    assert host.policy.deny == ("rm *",)
    assert [(h.event, h.command) for h in host.config.hooks] == [("PreToolUse", "./check")]
