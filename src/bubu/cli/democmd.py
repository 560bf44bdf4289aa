"""`bubu demo`: a scripted agent fixes a failing test; by default it is killed with SIGKILL midway
and recovers by itself."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from bubu.cli.app import Ctx, cli, pass_ctx
from bubu.demo import TASK, commands, make_workspace, write_script
from bubu.log import default_db

CRASH_POINT = "mid_tool@5"
"""The fifth tool batch: the fix is written and the slow style check is running."""


def _bubu(db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "bubu", "--db", db, *args]


def _say(text: str, **style: object) -> None:
    click.echo(click.style(text, **style) if sys.stdout.isatty() else text)  # type: ignore[arg-type]


@cli.command("demo")
@click.option(
    "--no-crash", is_flag=True, help="Run the plain fix, without the crash and the recovery."
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Where to create the demo project.",
)
@pass_ctx
def demo_cmd(ctx: Ctx, no_crash: bool, directory: str | None) -> None:
    """Watch Bubu fix a failing test offline, survive a real SIGKILL, and finish by itself."""
    db = ctx.db or default_db()
    ws = make_workspace(
        Path(directory) if directory else Path(tempfile.mkdtemp(prefix="bubu-demo-"))
    )
    script = write_script(ws.parent / f"{ws.name}.script.jsonl", crash=not no_crash)
    tests, style = commands()
    run_args = [
        "run",
        TASK,
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--allow",
        tests,
        "--allow",
        style,
        "--allow",
        f"{style} && {tests}",
    ]
    _say(f"Demo project: {ws}  (a stats module whose test fails)", bold=True)
    _say(f"Log: {db}\n", dim=True)
    env = dict(os.environ)
    started = time.monotonic()
    if no_crash:
        code = subprocess.call(_bubu(db, *run_args), env=env)
    else:
        env["BUBU_FAILPOINT"] = CRASH_POINT
        code = subprocess.call(_bubu(db, *run_args), env=env)
        if code != -signal.SIGKILL:
            _say(f"\nthe run ended with status {code} before the planned crash", fg="red")
            sys.exit(1)
        _say(
            "\n💥 Bubu was killed with SIGKILL while the fix was written and a command was "
            "running.",
            fg="red",
            bold=True,
        )
        _say("   Starting Bubu again, as you would. No new input:\n", fg="red")
        env.pop("BUBU_FAILPOINT")
        code = subprocess.call(_bubu(db, "recover"), env=env)
    session = _last_session(ctx, ws)
    verify = subprocess.run(
        _bubu(db, "verify", session), env=env, capture_output=True, text=True, check=False
    )
    passed = subprocess.run(
        [sys.executable, "-m", "unittest", "-q"],
        cwd=ws,
        capture_output=True,
        text=True,
        check=False,
    )
    _say("")
    _say(
        f"{'✓' if passed.returncode == 0 else '✗'} tests in {ws}: "
        f"{'pass' if passed.returncode == 0 else 'FAIL'}",
        fg="green" if passed.returncode == 0 else "red",
        bold=True,
    )
    _say(
        f"{'✓' if verify.returncode == 0 else '✗'} log verified: {verify.stdout.strip()}",
        fg="green" if verify.returncode == 0 else "red",
    )
    _say(f"  ({time.monotonic() - started:.1f}s)\n", dim=True)
    _say("Try next:", bold=True)
    dbopt = "" if ctx.db is None and "BUBU_DB" not in os.environ else f" --db {db}"
    bubu = bubu_command()
    hints = [
        (
            f"{bubu}{dbopt} show {session}",
            "the transcript" if no_crash else "the transcript, with the recovery",
        ),
        (f"{bubu}{dbopt} log {session}", "every event, its seq and hash"),
        (f"{bubu}{dbopt} ui", "the web view"),
    ]
    width = max(len(c) for c, _ in hints)
    for command, what in hints:
        _say(f"  {command.ljust(width)}   {what}")
    sys.exit(0 if code == 0 and passed.returncode == 0 and verify.returncode == 0 else 1)


def bubu_command() -> str:
    """How to run this Bubu from the user's shell: `bubu` when that is it on the PATH, else the
    `bubu` script beside this interpreter (a virtualenv that is not activated), else
    `python -m bubu`."""
    here = Path(sys.executable).parent / "bubu"
    found = shutil.which("bubu")
    if found is not None and (not here.exists() or Path(found).resolve() == here.resolve()):
        return "bubu"
    if here.exists():
        try:
            return str(here.relative_to(Path.cwd()))
        except ValueError:
            return str(here)
    return f"{shlex.quote(sys.executable)} -m bubu"


def _last_session(ctx: Ctx, ws: Path) -> str:
    for info in ctx.store.sessions():
        if Path(info.workspace) == ws.resolve():
            return info.id
    return "?"
