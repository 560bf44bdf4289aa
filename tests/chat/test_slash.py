"""The slash commands in-process, on a session `bubu run` made, and the "always" pattern."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu.cli.app import Ctx
from bubu.cli.chat import Chat
from bubu.cli.chatview import always_pattern
from bubu.cli.slash import COMMANDS, SlashCompleter, run_slash
from bubu.engine.permissions import Policy
from bubu.log.sqlite import SQLiteStore
from engine.cli import bubu
from engine.helpers import call, write_script


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """One session `bubu run` made (a plan, then a text): the database, workspace and model."""
    root = tmp_path_factory.mktemp("slash")
    db, ws = root / "bubu.db", root / "ws"
    ws.mkdir()
    script = write_script(
        root / "s.jsonl",
        [
            {
                "tool_calls": [
                    call(
                        "update_plan",
                        items=[
                            {"text": "look", "status": "completed"},
                            {"text": "fix", "status": "pending"},
                        ],
                    )
                ]
            },
            {"text": "done"},
        ],
    )
    assert bubu(db, "run", "plan it", "-w", str(ws), "-m", f"scripted:{script}").returncode == 0
    return db, ws, f"scripted:{script}"


@pytest.fixture
def chat(made: tuple[Path, Path, str]) -> Iterator[Chat]:
    db, ws, model = made
    ctx = Ctx(str(db))
    c = Chat(ctx, str(ws), {})
    c.model = model
    c.info = c.store.sessions()[-1]  # the oldest: the one `bubu run` made, not a fork
    yield c
    ctx.close()


def test_unknown_commands_get_the_list(chat: Chat, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_slash(chat, "/frobnicate now") is None
    (line,) = capsys.readouterr().out.splitlines()
    assert line == "unknown command /frobnicate; the commands are " + " ".join(COMMANDS)


def test_exit_and_quit_end_the_chat(chat: Chat) -> None:
    assert run_slash(chat, "/exit") == "exit"
    assert run_slash(chat, "/quit") == "exit"


def test_plan_and_cost_read_the_session(chat: Chat, capsys: pytest.CaptureFixture[str]) -> None:
    run_slash(chat, "/plan show")
    run_slash(chat, "/cost")
    out = capsys.readouterr().out
    assert "plan 1/2" in out
    assert "[x] look" in out
    assert "  cost: " in out
    assert "2 calls" in out


def test_status_is_bubu_status_in_process(chat: Chat, capsys: pytest.CaptureFixture[str]) -> None:
    assert chat.info is not None
    run_slash(chat, "/status")
    assert f"{chat.info.id}  completed  (1 turn," in capsys.readouterr().out


def test_fork_goes_on_in_the_fork(chat: Chat, capsys: pytest.CaptureFixture[str]) -> None:
    assert chat.info is not None
    source = chat.info.id
    run_slash(chat, "/fork 3")
    assert chat.info.id != source
    with SQLiteStore(Path(str(chat.ctx.db))) as store:
        assert chat.info.id in {s.id for s in store.sessions()}
    assert f"forked {source} at seq 3: this chat goes on in {chat.info.id}" in (
        capsys.readouterr().out
    )


def test_a_bad_seq_or_model_is_one_line_and_changes_nothing(
    chat: Chat, capsys: pytest.CaptureFixture[str]
) -> None:
    before, model = chat.info, chat.model
    run_slash(chat, "/fork soon")
    run_slash(chat, "/model nope")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert all(line.startswith("bubu: error: ") for line in err)
    assert (chat.info, chat.model) == (before, model)


def test_rewind_restores_the_files_and_the_chat_follows_the_fork(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ws = tmp_path / "bubu.db", tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("before\n")
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [call("write_file", path="a.txt", content="after\n")]},
            {"text": "done"},
        ],
    )
    assert bubu(db, "run", "change it", "-w", str(ws), "-m", f"scripted:{script}").returncode == 0
    assert (ws / "a.txt").read_text() == "after\n"
    ctx = Ctx(str(db))
    try:
        c = Chat(ctx, str(ws), {})
        c.info = c.store.sessions()[-1]
        source = c.info.id
        # the person answers yes at the terminal the chat runs in
        monkeypatch.setattr("bubu.cli.rewindcmd._interactive", lambda: True)
        monkeypatch.setattr("click.confirm", lambda *a, **k: True)
        run_slash(c, "/rewind 0")
        assert (ws / "a.txt").read_text() == "before\n"
        assert c.info.id != source
        assert f"this chat goes on in {c.info.id}" in capsys.readouterr().out
    finally:
        ctx.close()
    assert bubu(db, "verify").returncode == 0


def test_undo_reverts_what_the_last_turns_command_did_and_the_chat_follows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ws = tmp_path / "bubu.db", tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("before\n")
    script = write_script(
        tmp_path / "s.jsonl",
        [{"tool_calls": [call("run_command", command="rm a.txt")]}, {"text": "done"}],
    )
    ran = bubu(
        db, "run", "go", "-w", str(ws), "-m", f"scripted:{script}", "--sandbox", "off", "--yes"
    )
    assert ran.returncode == 0
    assert not (ws / "a.txt").exists()
    ctx = Ctx(str(db))
    try:
        c = Chat(ctx, str(ws), {})
        c.info = c.store.sessions()[-1]
        source = c.info.id
        monkeypatch.setattr("bubu.cli.rewindcmd._interactive", lambda: True)
        monkeypatch.setattr("click.confirm", lambda *a, **k: True)
        run_slash(c, "/undo")
        assert (ws / "a.txt").read_text() == "before\n"
        assert c.info.id != source
        assert f"this chat goes on in {c.info.id}" in capsys.readouterr().out
    finally:
        ctx.close()


def test_tab_completes_slash_commands() -> None:
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    def names(text: str) -> list[str]:
        got = SlashCompleter().get_completions(Document(text), CompleteEvent())
        return [c.text for c in got]

    assert names("/st") == ["/status", "/stop"]
    assert names("/re") == ["/rewind", "/resume"]
    assert names("/zz") == []
    assert names("fix /st") == []


@pytest.mark.parametrize(
    ("command", "pattern"),
    [
        ("pytest -q tests", "pytest *"),
        ("echo hi", "echo *"),
        ("bash -c 'rm -rf /'", "bash -c 'rm -rf /'"),
        ("env X=1 make", "env X=1 make"),
        ("FOO=1 make", "FOO=1 make"),
        ("make && rm -rf ~", "make && rm -rf ~"),
        ("cat x > y", "cat x > y"),
        ("echo $(id)", "echo $(id)"),
        ("ls *.py", "ls *.py"),
        ("git status\nrm -rf /", "git status\nrm -rf /"),
        ("rm -rf build", "rm -rf build"),
        ("git push --force", "git push --force"),
        ("curl http://example.com", "curl http://example.com"),
        # A program that runs code gets the exact line: interpreters, shells, package runners.
        ("python3 a.py", "python3 a.py"),
        ("python a.py", "python a.py"),
        ("/usr/bin/python3.12 -m pytest", "/usr/bin/python3.12 -m pytest"),
        ("node index.js", "node index.js"),
        ("npx jest", "npx jest"),
        ("uv run pytest", "uv run pytest"),
        ("make test", "make test"),
        ("prlimit pytest", "prlimit pytest"),
        ("sed -n 1p x", "sed -n 1p x"),
        # An option that writes or runs, or a builtin that evaluates a word, is the exact line.
        ("sort -o out.txt in.txt", "sort -o out.txt in.txt"),
        ("printf -v 'a[1]' x", "printf -v 'a[1]' x"),
        ("ls ~", "ls ~"),
        ("pytest -k 'a and b'", "pytest *"),
    ],
)
def test_always_never_approves_more_than_was_shown(command: str, pattern: str) -> None:
    assert always_pattern(command) == pattern


def test_always_on_a_script_does_not_approve_inline_code(tmp_path: Path) -> None:
    """The pattern "always" records is judged by the allow-list: after `a` on `python3 a.py`,
    `python3 -c 'print(42)'` still asks, and the call that was shown does not."""
    pattern = always_pattern("python3 a.py")
    added = (pattern.removesuffix(" *"), pattern) if pattern.endswith(" *") else (pattern,)
    policy = Policy(allow_commands=added)
    assert policy.check_command("python3 a.py", cwd=str(tmp_path)).allowed
    assert not policy.check_command("python3 -c 'print(42)'", cwd=str(tmp_path)).allowed
    assert not policy.check_command("python3 b.py", cwd=str(tmp_path)).allowed


DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_docs_show_the_pattern_always_really_offers() -> None:
    """Each prompt the docs show offers, for `a`, the pattern the chat would offer for the command
    shown above it (a sample that shows `python3 *` teaches a wider "always" than there is)."""
    shown = 0
    for page in sorted(DOCS.glob("*.md")):
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            m = re.search(r"a = always allow `(.*)`$", line)
            if m is None:
                continue
            command = lines[i - 1].strip().removeprefix("│ ")
            assert m.group(1) == always_pattern(command), f"{page.name}:{i + 1}"
            shown += 1
    assert shown, "no prompt with `a` shown in docs/"


def test_plan_mode_in_the_chat_refuses_a_write_until_approve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bubu.cli.agentcmds import make_host

    ws = tmp_path / "ws"
    ws.mkdir()
    write = call("write_file", path="a.txt", content="planned\n")
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [write]},
            {"text": "Plan: write a.txt"},
            {"tool_calls": [write]},
            {"text": "done"},
        ],
    )
    ctx = Ctx(str(tmp_path / "bubu.db"))
    try:
        c = Chat(ctx, str(ws), {"sandbox": "off"})
        c.model = f"scripted:{script}"
        c.host = make_host(c.store, c.model, c.opts, c.view)
        run_slash(c, "/plan")
        c.turn("write a.txt")
        assert not (ws / "a.txt").exists()
        assert "plan mode" in capsys.readouterr().out
        run_slash(c, "/approve")
        assert (ws / "a.txt").read_text() == "planned\n"
    finally:
        ctx.close()
