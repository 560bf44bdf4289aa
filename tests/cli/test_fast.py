"""The read-only commands' fast path (`bubu.cli.fast`): its table is the click commands'
parameters, it runs only what it fully understands, and what it runs prints and exits exactly as
click does, bad input included."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import click
import pytest

from bubu.cli import fast
from bubu.cli.app import cli
from bubu.errors import BubuError
from bubu.log.sqlite import SQLiteStore
from faults.helpers import seed

TYPES = {int: click.INT, str: click.STRING}

WRAPPER = """
import json, os, sys
sys.argv = ["bubu", *sys.argv[1:]]
def done():
    with open(os.environ["PATH_OUT"], "w") as f:
        json.dump("click" in sys.modules, f)
import atexit
atexit.register(done)
from bubu.cli import main, click_main
(click_main if os.environ.get("CLICK_ONLY") else main)()
"""


def _command(name: str) -> click.Command:
    command = cli.get_command(click.Context(cli), name)  # prepared: with its own --db
    assert command is not None
    return command


@pytest.mark.parametrize("name", sorted(fast.TABLE))
def test_the_table_is_the_click_commands_parameters(name: str) -> None:
    spec = fast.TABLE[name]
    arguments, flags, options = [], {}, {}
    command = _command(name)
    ctx = click.Context(command)
    for p in command.params:
        if isinstance(p, click.Argument):
            assert p.nargs == 1
            assert p.type is click.STRING
            assert p.callback is None
            assert not p.multiple
            assert p.envvar is None  # its default: the test below
            arguments.append((p.name, p.required))
            continue
        assert isinstance(p, click.Option)
        assert len(p.opts) == 1
        assert not p.multiple
        assert p.nargs == 1
        assert p.envvar is None
        assert not p.prompt
        (opt,) = p.opts
        if opt == "--db":  # the global store option: it sets the group's, no value of its own
            assert not p.expose_value
            assert p.type is click.STRING
            continue
        if p.is_flag:
            assert not p.count
            assert p.callback is None  # the value given: the test below
            flags[opt] = (p.name, True)
            for off in p.secondary_opts:
                flags[off] = (p.name, False)
            continue
        assert p.secondary_opts == []
        param, convert, _ = spec.options[opt]
        # its default: the test below, which compares whole parses with click's
        if isinstance(p.type, click.IntRange):
            assert (p.type.min, p.type.max, p.type.min_open) == (1, None, False)
            assert convert is fast._at_least_one
        elif p.callback is None:
            assert TYPES[convert] is p.type  # type: ignore[index]
        elif p.type is click.INT:  # a number checked: the same answers, the same refusals
            for value in ("4096", " 8192", "200000", "1_000_000"):
                assert convert(value) == p.process_value(ctx, value)
            for value in ("4095", "0", "-1", "x", "1.5"):
                with pytest.raises(ValueError, match=re.escape(value)):
                    convert(value)
                with pytest.raises((click.BadParameter, BubuError)):
                    p.process_value(ctx, value)
        else:  # a check of the value: the same answers as click's for accepted values
            assert p.type is click.STRING
            for value in ("completed", " Running ", "OPEN TURN", "failed"):
                assert convert(value) == p.process_value(ctx, value)
        options[opt] = param
    assert arguments == list(spec.arguments)
    assert flags == spec.flags
    assert options == {opt: row[0] for opt, row in spec.options.items()}


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions"],
        ["sessions", "--json", "--status", " Open Turn ", "--search", "a b"],
        ["log", "ses_x"],
        ["log", "ses_x", "--jsonl", "--after", " 7"],
        ["log", "--after=-2", "ses_x"],
        ["verify"],
        ["verify", "ses_x", "--json", "--db", "x.db"],
        ["status", "ses_x"],
        ["status", "--json", "ses_x"],
        ["show", "ses_x"],
        ["show", "ses_x", "--thinking", "--tail", "3", "--json"],
        ["show", "--no-thinking", "--tail=1", "ses_x"],
        ["context", "ses_x"],
        ["context", "--json", "ses_x", "--context-window", "8192"],
        ["context", "ses_x", "--context-window=4096"],
    ],
    ids=" ".join,
)
def test_the_fast_path_reads_a_command_line_as_click_does(argv: list[str]) -> None:
    plan = fast.parse(argv)
    assert plan is not None
    name, params, db = plan
    with _command(name).make_context(name, argv[1:]) as ctx:
        assert params == ctx.params
    assert db == ("x.db" if "--db" in argv else None)


def test_the_group_option_the_fast_path_reads_is_the_groups_only_one() -> None:
    opts = {o for p in cli.params for o in p.opts}
    assert opts == {"--db", "--version"}
    (db,) = [p for p in cli.params if p.name == "db"]
    assert db.envvar == "BUBU_DB"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db, _, ids = seed(tmp_path_factory.mktemp("fast"), 2)
    return db, ids[0]


TAKEN = [
    ["sessions"],
    ["sessions", "--json"],
    ["sessions", "--status", "Completed"],
    ["sessions", "--status=running"],
    ["sessions", "--search", "task"],
    ["log", "{id}"],
    ["log", "{id}", "--jsonl"],
    ["log", "--after", "3", "{id}"],
    ["log", "{id}", "--after=5"],
    ["verify"],
    ["verify", "{id}", "--json"],
    ["verify", "--json"],
    ["log", "ses_nosuchsession"],  # a one-line error from the store
    ["verify", "nope"],
    ["--db={db}", "log", "{id}"],  # no --db before the command: the one given after it
    ["log", "{id}", "--db", "{db}"],
    ["status", "{id}"],
    ["status", "{id}", "--json"],
    ["status", "nope"],
    ["show", "{id}"],
    ["show", "{id}", "--json", "--tail", "2"],
    ["show", "--thinking", "{id}", "--tail=1"],
    ["show", "{id}", "--no-thinking"],
    ["context", "{id}"],
    ["context", "{id}", "--json"],
    ["context", "--context-window", "8192", "{id}"],
    ["context", "{id}", "--json", "--context-window=100000"],
    ["context", "nope"],
]
DECLINED = [
    ["sessions", "--help"],
    ["log", "-h"],
    ["log"],  # a missing argument
    ["log", "{id}", "extra"],  # an extra one
    ["log", "{id}", "--after", "x"],  # a bad value
    ["log", "{id}", "--after"],
    ["log", "{id}", "--jsonl", "--jsonl"],
    ["log", "{id}", "--jsonl=1"],
    ["sessions", "--status", "bogus"],
    ["sessions", "--stat", "completed"],  # no prefixes
    ["sessions", "--search", ""],
    ["log", "--", "{id}"],
    ["log", "-"],
    ["--db", "{db}", "log", "{id}", "--db", "{db}"],
    ["--version"],
    ["--help"],
    ["show", "{id}", "--tail", "0"],
    ["show", "{id}", "--tail", "-1"],
    ["show", "{id}", "--thinking", "--no-thinking"],
    ["status", "{id}", "--thinking"],
    ["status", "{id}", "{id}"],
    ["context", "{id}", "--context-window", "100"],  # refused in words: click's
    ["context", "{id}", "--context-window", "many"],
    ["context"],
    ["export", "{id}"],  # not a command of the table
    ["logs", "{id}"],
]


def _run(tmp_path: Path, argv: list[str], *, click_only: bool) -> tuple[int, str, str, bool]:
    out = tmp_path / "click.json"
    env = {**os.environ, "PATH_OUT": str(out), "BUBU_HOME": str(tmp_path / "home")}
    env.pop("BUBU_DB", None)
    if click_only:
        env["CLICK_ONLY"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr, json.loads(out.read_text())


@pytest.mark.parametrize(
    ("argv", "taken"),
    [(a, True) for a in TAKEN] + [(a, False) for a in DECLINED],
    ids=lambda a: " ".join(a) if isinstance(a, list) else str(a),
)
def test_both_paths_print_and_exit_alike(
    tmp_path: Path, store: tuple[Path, str], argv: list[str], taken: bool
) -> None:
    db, session = store
    words = [w.format(id=session, db=db) for w in argv]
    if not any(w.startswith("--db") for w in words):
        words = ["--db", str(db), *words]
    assert (fast.parse(words) is not None) == taken
    code, stdout, stderr, clicked = _run(tmp_path, words, click_only=False)
    assert clicked is not taken  # the fast path ran it without click, or left it to click
    assert (code, stdout, stderr) == _run(tmp_path, words, click_only=True)[:3]
    assert stdout or stderr


def test_bubu_db_from_the_environment_and_an_empty_one(
    tmp_path: Path, store: tuple[Path, str]
) -> None:
    db, _ = store
    for value in (str(db), ""):
        os.environ["BUBU_DB"] = value
        try:
            fast_out = subprocess.run(
                [sys.executable, "-m", "bubu", "sessions"],
                env={**os.environ, "BUBU_HOME": str(tmp_path)},
                capture_output=True,
                text=True,
                check=False,
            )
            click_out = subprocess.run(
                [sys.executable, "-c", "from bubu.cli import click_main; click_main()", "sessions"],
                env={**os.environ, "BUBU_HOME": str(tmp_path)},
                capture_output=True,
                text=True,
                check=False,
            )
        finally:
            del os.environ["BUBU_DB"]
        assert (fast_out.returncode, fast_out.stdout, fast_out.stderr) == (
            click_out.returncode,
            click_out.stdout,
            click_out.stderr,
        )
    assert "ses_" in fast_out.stdout or "no sessions" in fast_out.stdout


def test_an_ansi_escape_is_stripped_off_a_terminal_as_click_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bubu.cli.core import echo

    echo("\x1b[31mred\x1b[0m and plain")
    click.echo("\x1b[31mred\x1b[0m and plain")
    out = capsys.readouterr().out
    assert out == "red and plain\n" * 2


def _ended(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_leave_runs_the_exit_handlers_flushes_and_keeps_the_status(tmp_path: Path) -> None:
    marker = tmp_path / "handled"
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write('yes'))\n"
        "sys.stdout.write('x' * 100000)\n"  # more than any buffer: all of it must come out
        "sys.stderr.write('partial line')\n"
        "from bubu.cli import fast\n"
        "fast.leave(3)\n"
    )
    proc = _ended(code)
    assert (proc.returncode, len(proc.stdout), proc.stderr) == (3, 100000, "partial line")
    assert marker.read_text() == "yes"


def test_leave_skips_the_teardown_but_not_when_a_thread_still_runs() -> None:
    # An object whose finalizer speaks at teardown: leave ends before it, unless another thread
    # still runs, which the interpreter's own exit waits for.
    code = (
        "import sys, threading, time\n"
        "class Loud:\n"
        "    def __del__(self): sys.stdout.write('torn down')\n"
        "keep = Loud()\n"
        "if len(sys.argv) > 1:\n"
        "    threading.Thread(target=time.sleep, args=(0.2,)).start()\n"
        "from bubu.cli import fast\n"
        "fast.leave(None)\n"
    )
    quick = _ended(code)
    assert (quick.returncode, quick.stdout) == (0, "")
    waited = _ended(code, "thread")
    assert (waited.returncode, waited.stdout) == (0, "torn down")


def test_leave_with_a_message_or_into_a_closed_pipe() -> None:
    said = _ended("from bubu.cli import fast\nfast.leave('bubu: stopped')\n")
    assert (said.returncode, said.stderr) == (1, "bubu: stopped\n")
    code = (
        "import os, sys\n"
        "r, w = os.pipe()\n"
        "os.close(r)\n"
        "sys.stdout = open(w, 'w')\n"
        "sys.stdout.write('lost')\n"
        "from bubu.cli import fast\n"
        "fast.leave(0)\n"
    )
    closed = _ended(code)
    assert (closed.returncode, closed.stderr) == (1, "")  # quiet, as the fast path's own pipes


UNREACHABLE = """
import atexit, gc, sys
out = sys.argv[1]
def done():
    with open(out, "w") as f:
        f.write(f"{gc.isenabled()} {gc.collect()}")
atexit.register(done)
sys.argv = ["bubu", *sys.argv[2:]]
from bubu.cli import main
main()
"""


def _steps(tmp_path: Path, store: SQLiteStore, steps: int) -> str:
    from bubu.engine.permissions import Policy
    from bubu.engine.session import new_session, start_turn
    from engine.helpers import FAST, call, make_host, scripted, write_script

    lines: list[dict[str, object]] = [
        {"tool_calls": [call("read_file", path="a.txt"), call("run_command", command=f"echo {i}")]}
        for i in range(steps)
    ]
    lines.append({"text": "done"})
    provider = scripted(write_script(tmp_path / f"s{steps}.jsonl", lines))
    info = new_session(store, task="t", workspace=tmp_path, model=provider.spec)
    config = replace(FAST, max_steps=steps + 5)
    host = make_host(store, provider, policy=Policy(sandbox="off", yes=True), config=config)
    assert start_turn(host, info, "go") == "completed"
    return info.id


def test_a_reader_makes_no_cycles_for_the_collector_it_runs_without(tmp_path: Path) -> None:
    # The fast path runs without the cycle collector: what a command leaves for it at the end
    # must not grow with the session it read.
    (tmp_path / "a.txt").write_text("alpha\n")
    with SQLiteStore(tmp_path / "bubu.db") as store:
        short, long = _steps(tmp_path, store, 5), _steps(tmp_path, store, 400)
    out = tmp_path / "unreachable"
    for command in ("show", "status", "verify", "context", "log"):
        left = {}
        for session in (short, long):
            argv = ["--db", str(tmp_path / "bubu.db"), command, session]
            subprocess.run(
                [sys.executable, "-c", UNREACHABLE, str(out), *argv],
                env={**os.environ, "BUBU_HOME": str(tmp_path / "home")},
                capture_output=True,
                timeout=120,
                check=True,
            )
            enabled, unreachable = out.read_text().split()
            assert enabled == "False"  # the fast path ran it, without the collector
            left[session] = int(unreachable)
        assert left[long] <= left[short] + 100, (command, left)
