"""Terminal escapes in a model's text, a command's output, tool names and titles reach no terminal:
`bubu run`, `context`, `show`, `status`, `log` and `sessions` print them as visible escapes,
while `--jsonl` keeps the exact text as JSON."""

from __future__ import annotations

import io
import json
import re
import subprocess
from pathlib import Path

import pytest

from bubu.cli.render import TerminalObserver
from bubu.cli.term import one_line, printable
from bubu.providers.base import Delta

from .cli import bubu, on_a_terminal, only_session

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # writes "rm -rf ~" to the clipboard
OSC0 = "\x1b]0;all tests passed\x07"  # retitles the window
OSC8 = "\x1b]8;;http://evil.example/\x1b\\docs\x1b]8;;\x1b\\"  # a link hidden behind "docs"
CLEAR = "\x1b[2J\x1b[H"  # clears the screen, cursor home
C1_CSI = "\x9b31m"  # CSI as one C1 character
HOSTILE = f"{OSC52}{OSC0} see {OSC8} {CLEAR}then {C1_CSI}red bell\x07 back\x08\x08 over\rwrote"
"""Every kind of escape, some split by spaces so the scripted model streams them in pieces."""

FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""What must never reach a pipe: ESC, BEL, backspace, lone CR, C1 (tab and newline may)."""

PRINTF = r"printf 'out \033]52;c;ZXZpbA==\007 \033]0;owned\007 \033[2J \302\23331m done\n'"


def clean(text: str, where: str) -> None:
    """No control character in `text` but tab and newline; something visible stands in for them."""
    bad = FORBIDDEN.search(text)
    assert bad is None, (where, bad, text)


@pytest.fixture(scope="module")
def hostile(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, str, subprocess.CompletedProcess[str]]:
    """A `bubu run` whose task, model text, thinking, tool name, tool argument and command
    output are full of escapes; (db, session, the run's output)."""
    tmp_path = tmp_path_factory.mktemp("hostile")
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "hostile.jsonl"
    lines = [
        {"text": HOSTILE, "thinking": f"thinking {OSC0} hard",
         "tool_calls": [{"name": "run_command", "arguments": {"command": PRINTF}},
                        {"name": "read_file", "arguments": {"path": f"no{CLEAR}such.txt"}},
                        {"name": f"evil{OSC52}tool", "arguments": {}}]},
        {"text": f"finished {OSC8} tab\there\r\nnext line"},
    ]  # fmt: skip
    script.write_text("".join(json.dumps(x) + "\n" for x in lines))
    db = tmp_path / "bubu.db"
    done = bubu(db, "run", f"fix {OSC0}it", "-w", str(ws), "-m", f"scripted:{script}", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    return db, only_session(db), done


def test_bubu_run_prints_no_escape_from_the_model_or_a_command(
    hostile: tuple[Path, str, subprocess.CompletedProcess[str]],
) -> None:
    _, _, done = hostile
    clean(done.stdout, "run stdout")
    clean(done.stderr, "run stderr")
    out = done.stdout
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in out  # shown, visibly, where it was
    assert "\\x9b31m" in out
    assert "over\\x0dwrote" in out  # a lone CR would have overwritten the line
    assert "out \\x1b]52;c;ZXZpbA==\\x07" in out  # the command's output
    assert "evil\\x1b]52;" in out  # the tool's name
    assert "tab\there\nnext line" in out  # tabs and line ends stay; CR-LF is a line end


@pytest.mark.parametrize(
    ("command", "quotes"),
    [(["context"], True), (["show"], True), (["sessions"], True),
     (["status"], False), (["log"], False)],  # the last two list counts and kinds, not text
)  # fmt: skip
def test_inspecting_commands_print_no_escape(
    hostile: tuple[Path, str, subprocess.CompletedProcess[str]], command: list[str], quotes: bool
) -> None:
    db, sid, _ = hostile
    args = command if command == ["sessions"] else [*command, sid]
    done = bubu(db, *args)
    assert done.returncode == 0, done.stderr
    clean(done.stdout, " ".join(command))
    assert ("\\x1b" in done.stdout) is quotes


def test_a_failed_turn_quoting_a_server_prints_no_escape(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"error": {"status": 400, "message": f"bad {OSC52}{CLEAR}"}}))
    db = tmp_path / "bubu.db"
    run = bubu(db, "run", "go", "-w", str(ws), "-m", f"scripted:{script}")
    assert run.returncode != 0
    status = bubu(db, "status", only_session(db))
    for where, text in (("run", run.stdout + run.stderr), ("status", status.stdout)):
        clean(text, where)
        assert "bad \\x1b]52;" in text, where


def test_jsonl_keeps_the_exact_text_as_json(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"text": HOSTILE}) + "\n")
    db = tmp_path / "bubu.db"
    done = bubu(db, "run", "say it", "-w", str(ws), "-m", f"scripted:{script}", "--jsonl")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout  # JSON escapes it as \u001b by itself
    events = [json.loads(line)["event"] for line in done.stdout.splitlines()]
    texts = [e["content"]["text"] for e in events if e.get("content", {}).get("kind") == "text"]
    assert HOSTILE in texts  # not altered


def test_a_real_terminal_gets_colours_but_no_other_escape(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"text": HOSTILE, "tool_calls": [
        {"name": "list_files", "arguments": {"pattern": CLEAR}}]}) + "\n" + '{"text": "ok"}\n')  # fmt: skip
    db = tmp_path / "bubu.db"
    out = on_a_terminal(db, "run", "go", "-w", str(ws), "-m", f"scripted:{script}").decode()
    assert "\x1b[" in out  # the terminal does get our colours
    # Ours: colours, the live status line's erase / cursor-up / cursor-hide moves, line ends.
    ours = re.sub(r"\x1b\[[0-9;]*m|\r?\x1b\[(?:2K|1A|\?25[lh])|\r\n", "", out)
    clean(ours, "a terminal")


# ---- the function itself ---------------------------------------------------------------------


def test_printable_shows_each_control_visibly_and_keeps_tabs_and_newlines() -> None:
    assert printable(OSC0) == "\\x1b]0;all tests passed\\x07"
    assert printable("a\tb\nc\r\nd\re\x08\x7f\x9b\u202e\x00") == (
        "a\tb\nc\nd\\x0de\\x08\\x7f\\x9b\\u202e\\x00"
    )
    assert printable("bad bytes \udcff") == "bad bytes \\udcff"
    assert printable("plain — ünïcode ✓") == "plain — ünïcode ✓"
    assert one_line("a\x1b]0;t\x07\n  b", 10) == "a\\x1b]0;t…"


def test_an_escape_split_across_streamed_deltas_is_still_neutralised() -> None:
    out = io.StringIO()
    view = TerminalObserver(out, color=False)
    for piece in ["ok \x1b", "]52;c;eA==", "\x07 \x1b[", "2J a line\r", "\nnext\r", "gone"]:
        view.on_delta(Delta(kind="text", text=piece))
    view.close()
    assert out.getvalue() == "ok \\x1b]52;c;eA==\\x07 \\x1b[2J a line\nnext\\x0dgone\n"
