"""`--db` is accepted before and after the subcommand, by every command (and subcommand)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from bubu.cli import cli

from .helpers import seed


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # the top group imports a command's module on demand
        command = group.get_command(ctx, name)
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
    return found


def test_every_command_declares_db_after_its_name() -> None:
    ctx = click.Context(cli)
    missing = []
    for path in _commands(cli):
        command: click.Command = cli
        for name in path:
            assert isinstance(command, click.Group)
            sub = command.get_command(ctx, name)
            assert sub is not None
            command = sub
        if not any("--db" in getattr(p, "opts", ()) for p in command.params):
            missing.append(" ".join(path))
    assert missing == []
    assert len(_commands(cli)) >= 20


def _bubu(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "BUBU_DB"} | {"BUBU_HOME": str(cwd / "home")}
    return subprocess.run(
        [sys.executable, "-m", "bubu", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


@pytest.mark.heavy
def test_db_before_and_after_the_subcommand_reads_the_same_log(tmp_path: Path) -> None:
    db, _, ids = seed(tmp_path, 1)
    for args in (
        ["sessions"],
        ["status", ids[0]],
        ["show", ids[0]],
        ["verify"],
        ["memory", "list", "-w", str(tmp_path)],
    ):
        before = _bubu("--db", str(db), *args, cwd=tmp_path)
        after = _bubu(*args, "--db", str(db), cwd=tmp_path)
        assert before.returncode == 0, (args, before.stderr)
        assert (after.returncode, after.stdout) == (before.returncode, before.stdout), args
    assert ids[0] in _bubu("sessions", "--db", str(db), cwd=tmp_path).stdout
    assert not (tmp_path / "home" / "bubu.db").exists(), "the default log was never used"
