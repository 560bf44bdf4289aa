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
from bubu.events import Author, Content, Record, Role, make
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
        {
            "text": HOSTILE,
            "thinking": f"thinking {OSC0} hard",
            "tool_calls": [
                {"name": "run_command", "arguments": {"command": PRINTF}},
                {"name": "read_file", "arguments": {"path": f"no{CLEAR}such.txt"}},
                {"name": f"evil{OSC52}tool", "arguments": {}},
            ],
        },
        {"text": f"finished {OSC8} tab\there\r\nnext line"},
    ]
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
    [
        (["context"], True),
        (["show"], True),
        (["sessions"], True),
        (["status"], False),
        (["log"], False),
    ],  # the last two list counts and kinds, not text
)
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
    script.write_text(
        json.dumps(
            {
                "text": HOSTILE,
                "tool_calls": [{"name": "list_files", "arguments": {"pattern": CLEAR}}],
            }
        )
        + "\n"
        + '{"text": "ok"}\n'
    )
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


# ---- the renderer: `bubu run`'s view and the chat's, on a terminal and in a pipe -----------------

BIDI = "\u202egnp.exe\u202c \u2066iso\u2069 \u200fmark"  # right-to-left override, isolate, mark
MARKUP = "[bold red]not red[/bold red] [link=http://evil.example/]x[/link] :smile:"
"""Rich markup, a link and an emoji code: text to rich, which must print them as written."""
KEY = "ghp_" + "Zq81mW0pLx3vTe5uRk7y" * 2 + "Ab9Q"
PAYLOAD = f"{HOSTILE} {BIDI} {MARKUP} key {KEY}"

OURS = re.compile(r"\x1b\[[0-9;]*m|\r?\x1b\[(?:2K|1A|\?25[lh])")
"""What the view itself writes on a terminal: styles and the live status line's moves."""
BIDI_CHARS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _records(payload: str) -> list[Record]:
    from bubu.events import Error, FunctionCall, FunctionResponse, SystemNote, Thinking, TurnEnded
    from bubu.events import Text as TextEvent

    name = f"evil{OSC52}{MARKUP}"
    contents: list[tuple[Role, Author, Content]] = [
        ("model", "agent", Thinking(text=f"think {payload}")),
        ("model", "agent", TextEvent(text=f"answer {payload}")),
        ("model", "agent", FunctionCall(call_id="c1", name=name, arguments={"path": payload})),
        (
            "model",
            "agent",
            FunctionCall(call_id="c2", name="run_command", arguments={"command": payload}),
        ),
        ("tool", "tool", FunctionResponse(call_id="c1", name=name, result=payload, is_error=True)),
        (
            "tool",
            "tool",
            FunctionResponse(call_id="c2", name="run_command", result=f"out\n{payload}"),
        ),
        (
            "system",
            "system",
            Error(error_class=f"bad{CLEAR}[bold]", message=payload, retryable=False),
        ),
        ("system", "system", SystemNote(note=TurnEnded(reason="failed", message=payload))),
    ]
    return [
        Record(
            seq=n,
            hash=f"{n:064x}",
            event=make(session="s", role=role, author=author, ts=n, content=content),
        )
        for n, (role, author, content) in enumerate(contents, start=1)
    ]


def _drive(view: TerminalObserver, *, chat: bool) -> None:
    if chat:
        view.begin()  # type: ignore[attr-defined]
    for piece in (f"stream {PAYLOAD[:9]}", PAYLOAD[9:40], f"{PAYLOAD[40:]} end"):
        view.on_delta(Delta(kind="thinking", text=piece))
        view.on_delta(Delta(kind="text", text=piece))
    view.on_activity(f"running {PAYLOAD}")
    view.on_records(_records(PAYLOAD))
    view.close()


@pytest.mark.parametrize("chat", [False, True], ids=["run", "chat"])
@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_the_renderer_prints_escapes_bidi_and_markup_literally(
    monkeypatch: pytest.MonkeyPatch, terminal: bool, chat: bool
) -> None:
    """Model text, thinking, tool names, arguments and results, errors and the turn's end full
    of escapes, bidi controls, rich markup and a key: on a terminal (styles and the live status
    line are the only escapes) and in a pipe (no escape at all) each is shown, never obeyed."""
    from bubu.cli.chatview import ChatView

    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = _Tty() if terminal else io.StringIO()
    view = ChatView(out) if chat else TerminalObserver(out)
    _drive(view, chat=chat)
    written = out.getvalue()
    assert ("\x1b[" in written) is terminal  # colours on a terminal, none in a pipe
    text = OURS.sub("", written) if terminal else written
    clean(text, "the view")
    assert BIDI_CHARS.search(text) is None
    assert "\\u202egnp.exe\\u202c" in text  # shown where it was
    assert "[bold red]not red[/bold red]" in text  # markup printed as written
    assert "[link=http://evil.example/]x[/link] :smile:" in text
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in text
    assert "evil\\x1b]52;" in text  # the tool's name
    assert "bad\\x1b[2J\\x1b[H[bold]" in text  # an error's class
    assert KEY[:10] not in text
    assert "[redacted:github-token]" in text
    if not chat:  # the chat's answer is Markdown, which may fold a `\\` pair of the escapes
        assert "over\\x0dwrote" in text
        assert f"answer {printable(PAYLOAD)}\n" not in text  # streamed: not printed twice


def test_in_a_pipe_the_view_writes_plain_lines_exactly() -> None:
    """Long lines are not wrapped or cut at any width, tabs stay, nothing is padded."""
    from bubu.events import FunctionResponse

    out = io.StringIO()
    view = TerminalObserver(out)
    long = "x" * 300
    view.on_delta(Delta(kind="text", text=f"a\tb {long}  "))
    result = FunctionResponse(call_id="c", name="read_file", result="one line")
    record = make(session="s", role="tool", author="tool", ts=1, content=result)
    view.on_records([Record(seq=1, hash="0" * 64, event=record)])
    view.line(("dim and ", "dim"), MARKUP)
    view.close()
    assert out.getvalue() == (
        f"a\tb {long}  \n  ⎿ read_file: one line\n"
        "dim and [bold red]not red[/bold red] [link=http://evil.example/]x[/link] :smile:\n"
    )


def test_no_color_drops_the_colours_but_keeps_the_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("NO_COLOR", "1")
    out = _Tty()
    view = TerminalObserver(out)
    view.line(("● turn completed", "bold green"))
    view.close()
    assert "\x1b[1m● turn completed" in out.getvalue()
    assert re.search(r"\x1b\[[0-9;]*3[0-7]m", out.getvalue()) is None  # no foreground colour


def test_a_plan_the_model_wrote_is_shown_printable() -> None:
    """`bubu status` and the chat's /plan print the steps of the model's update_plan."""
    from bubu.cli.readviews import plan_text

    shown = plan_text([{"text": f"wipe {CLEAR}{OSC0} it", "status": "pending"}])
    clean(shown, "plan")
    assert shown.endswith("[ ] wipe \\x1b[2J\\x1b[H\\x1b]0;all tests passed\\x07 it")
