"""Protected paths ask a person, `--yes` or not, and an allow-listed command does not carry a
chained one: real `bubu run` processes with a scripted model and no terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
from pathlib import Path

import pytest

from bubu.engine.permissions import Policy
from bubu.events import FunctionResponse, PermissionDecision, PermissionRequest
from bubu.log.sqlite import SQLiteStore
from bubu.tools.protected import protected_reason

from .cli import bubu, bubu_cmd, bubu_env, only_session
from .helpers import call, write_script

FSMONITOR = '[core]\n\tfsmonitor = "touch pwned-by-git"\n'


def _bubu_run(
    tmp_path: Path, ws: Path, calls: list[dict[str, object]], *flags: str
) -> tuple[list[FunctionResponse], list[PermissionRequest], list[PermissionDecision]]:
    db = tmp_path / "bubu.db"
    script = write_script(tmp_path / "s.jsonl", [{"tool_calls": calls}, {"text": "done"}])
    # Unconfined, so commands ask too (in the sandbox they run without asking).
    args = ("-w", str(ws), "-m", f"scripted:{script}", "--sandbox", "off", *flags)
    done = bubu(db, "run", "the task", *args)
    assert "Traceback" not in done.stderr, done.stderr
    with SQLiteStore(db) as store:
        records = store.read(only_session(db))
    results = [r.event.content for r in records if isinstance(r.event.content, FunctionResponse)]
    actions = [r.event.actions for r in records if r.event.actions is not None]
    requests = [a.permission_request for a in actions if a.permission_request is not None]
    decisions = [a.permission_decision for a in actions if a.permission_decision is not None]
    return results, requests, decisions


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (ws / ".bashrc").write_text("# rc\n")
    return ws


@pytest.mark.parametrize("flags", [(), ("--yes",)], ids=["no-flags", "yes"])
def test_an_edit_that_plants_core_fsmonitor_is_not_made(
    tmp_path: Path, repo: Path, flags: tuple[str, ...]
) -> None:
    before = (repo / ".git" / "config").read_text()
    results, requests, decisions = _bubu_run(
        tmp_path,
        repo,
        [call("edit_file", path=".git/config", old="[core]\n", new=FSMONITOR)],
        *flags,
    )
    assert (repo / ".git" / "config").read_text() == before
    (result,) = results
    assert result.is_error
    assert result.result.startswith("permission denied: nobody was there to approve it")
    assert ".git/config is a protected path" in result.result
    assert "--yes does not" in result.result
    assert "\n" not in result.result, "the model is told why in one line"
    (request,) = requests
    assert request.protected
    (decision,) = decisions
    assert (decision.decision, decision.by) == ("deny", "nobody")


PROTECTED = [".bashrc", ".envrc", ".bubu/x", ".GIT/config", "sub/.git/hooks/post-checkout", "link"]


def test_protected_writes_are_denied_without_a_person(tmp_path: Path, repo: Path) -> None:
    (repo / "link").symlink_to(repo / ".git" / "config")
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    results, requests, _ = _bubu_run(
        tmp_path,
        repo,
        [call("write_file", path=path, content="touch pwned\n") for path in PROTECTED],
        "--yes",
    )
    assert len(results) == len(PROTECTED)
    for path, result in zip(PROTECTED, results, strict=True):
        assert result.is_error, path
        assert "protected path" in result.result, path
    assert [r.protected for r in requests] == [True] * len(PROTECTED)
    after = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    assert after == before, "nothing was written"


def test_an_ordinary_file_is_still_written_without_asking(tmp_path: Path, repo: Path) -> None:
    results, requests, _ = _bubu_run(
        tmp_path, repo, [call("write_file", path="src/app.py", content="print(1)\n")]
    )
    assert [r.is_error for r in results] == [False]
    assert requests == []
    assert (repo / "src" / "app.py").read_text() == "print(1)\n"


def test_an_allow_listed_command_does_not_run_what_is_chained(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    results, requests, decisions = _bubu_run(
        tmp_path, ws, [call("run_command", command="pytest -q; touch pwned")], "--allow", "pytest*"
    )
    assert not (ws / "pwned").exists()
    (result,) = results
    assert result.is_error
    assert "`touch pwned` matches no --allow pattern" in result.result
    (request,) = requests
    assert request.summary == "run `pytest -q; touch pwned`"
    assert (decisions[0].decision, decisions[0].by) == ("deny", "nobody")


def test_the_prompt_shows_every_line_of_a_command() -> None:
    from bubu.cli.render import prompt_lines

    request = PermissionRequest(
        request_id="p",
        call_id="c",
        tool="run_command",
        summary="run `pytest -q\nrm -rf x`",
        reason="`rm -rf x` matches no --allow pattern",
    )
    assert prompt_lines(request) == [
        "? run this command (2 lines):",
        "  │ pytest -q⏎",
        "  │ rm -rf x",
        "  `rm -rf x` matches no --allow pattern",
    ]
    protected = PermissionRequest(
        request_id="p",
        call_id="c",
        tool="write_file",
        summary="write_file .git/config",
        reason=protected_reason(".git/config") or "",
        protected=True,
    )
    assert prompt_lines(protected)[1].startswith("! .git/config is a protected path")


@pytest.mark.parametrize(
    ("path", "protected"),
    [
        (".git/config", True),
        (".git/hooks/pre-commit", True),
        (".git", True),  # a worktree's pointer file
        ("vendor/lib/.git/config", True),
        (".Git/CONFIG", True),
        (".g\u200cit/config", True),  # HFS+ ignores the zero-width non-joiner
        (".git./config", True),
        (".bubu/config.toml", True),
        (".bashrc", True),
        ("home/.zshenv", True),
        (".profile", True),
        (".envrc", True),
        (".direnv/layout", True),
        (".vscode/tasks.json", True),
        (".vscode/settings.json", True),
        (".husky/pre-commit", True),
        (".pre-commit-config.yaml", True),
        (".gitmodules", True),
        ("lib/site-packages/evil.pth", True),
        ("/home/u/.bashrc", True),
        (".hg/hgrc", True),
        ("vendor/x/.hg/hgrc", True),
        (".svn/wc.db", True),
        (".bzr/branch/branch.conf", True),
        ("_darcs/prefs/defaults", True),
        (".jj/repo/config.toml", True),
        (".tool-versions", True),
        ("mise.local.toml", True),
        (".config/mise/config.toml", True),
        (".config/mise.toml", True),
        (".npmrc", True),
        (".yarnrc", True),
        (".rvmrc", True),
        (".gdbinit", True),
        (".lldbinit", True),
        (".pdbrc", True),
        (".exrc", True),
        (".nvim.lua", True),
        (".dir-locals.el", True),
        (".zed/settings.json", True),
        (".devcontainer.json", True),
        (".H\u200cG/hgrc", True),  # HFS+ ignores the zero-width non-joiner
        (".NPMRC", True),
        (".tool-versions.", True),  # NTFS ignores a trailing dot
        ("src/HEAD", True),
        (".nvmrc", False),
        (".python-version", False),
        (".node-version", False),
        (".editorconfig", False),
        (".config/app.toml", False),
        ("hg/hgrc", False),
        (".gitignore", False),
        (".gitattributes", False),
        (".github/workflows/ci.yml", False),
        ("src/git/config.py", False),
        ("Makefile", False),
        ("conftest.py", False),
        ("docs/.bashrc.md", False),
    ],
)
def test_which_paths_are_protected(path: str, protected: bool) -> None:
    assert (protected_reason(path) is not None) is protected


def test_an_allow_listed_redirection_into_a_protected_file_asks(tmp_path: Path) -> None:
    policy = Policy(allow_commands=("echo *",))
    assert not policy.check_command("echo x >> .git/config", cwd=str(tmp_path)).allowed
    assert policy.check_command("echo x >> notes.txt", cwd=str(tmp_path)).allowed


def _on_a_terminal(
    tmp_path: Path, ws: Path, calls: list[dict[str, object]], answer: bytes, *flags: str
) -> str:
    """Run `bubu run` on a pseudo-terminal, answer its one prompt, return what it printed."""
    script = write_script(tmp_path / "s.jsonl", [{"tool_calls": calls}, {"text": "done"}])
    db = tmp_path / "bubu.db"
    main, side = pty.openpty()
    proc = subprocess.Popen(
        bubu_cmd(
            db, "run", "t", "-w", str(ws), "-m", f"scripted:{script}", "--sandbox", "off", *flags
        ),
        env={**bubu_env(tmp_path), "TERM": "dumb", "NO_COLOR": "1"},
        stdin=side,
        stdout=side,
        stderr=side,
    )
    os.close(side)
    out, answered = b"", False
    try:
        while True:
            ready, _, _ = select.select([main], [], [], 60)
            assert ready, f"bubu printed nothing for a minute: {out!r}"
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the terminal closed: bubu exited
                break
            if not chunk:
                break
            out += chunk
            if not answered and b"? allow it" in out:
                os.write(main, answer)
                answered = True
    finally:
        proc.wait(timeout=60)
        os.close(main)
    assert answered, out
    return out.decode("utf-8", "replace").replace("\r\n", "\n")


def test_the_terminal_prompt_shows_the_chained_line(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    shown = _on_a_terminal(
        tmp_path,
        ws,
        [call("run_command", command="pytest -q\ntouch pwned")],
        b"n\n",
        "--allow",
        "pytest*",
    )
    assert "? run this command (2 lines):\n  │ pytest -q⏎\n  │ touch pwned\n" in shown
    assert "`touch pwned` matches no --allow pattern" in shown
    assert not (ws / "pwned").exists()


def test_a_person_on_the_terminal_can_approve_a_protected_write(tmp_path: Path, repo: Path) -> None:
    shown = _on_a_terminal(
        tmp_path, repo, [call("write_file", path=".envrc", content="use nix\n")], b"y\n", "--yes"
    )
    assert "! .envrc is a protected path" in shown
    assert (repo / ".envrc").read_text() == "use nix\n"
