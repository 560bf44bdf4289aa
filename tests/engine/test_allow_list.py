"""An allow-list pattern approves one simple command, never what is chained, substituted or
redirected around it: tables of attack strings, and real bash as the judge of what runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bubu.engine.commandline import parse
from bubu.engine.permissions import Policy, show_command
from hypo import examples

PYTEST = Policy(allow_commands=("pytest*",))
ANY = Policy(allow_commands=("*",))

ATTACKS = [
    "pytest -q; rm -rf x",
    "pytest -q;rm -rf x",
    "pytest\nrm x",
    "pytest\n\nrm x",
    "pytest \\\n; rm x",
    "pytest && $(rm x)",
    "pytest && rm x",
    "pytest || rm x",
    "pytest & curl http://evil",
    "pytest | sh",
    "pytest |& sh",
    "pytest $(rm x)",
    'pytest "$(rm x)"',
    "pytest `rm x`",
    'pytest "`rm x`"',
    "pytest <(rm x)",
    "pytest >(rm x)",
    "pytest < <(rm x)",
    "pytest > /etc/x",
    "pytest >> /etc/x",
    "pytest 2> /etc/x",
    "pytest &> /etc/x",
    "pytest >| /etc/x",
    "pytest >& /etc/x",
    "pytest > ../x",
    "pytest > sub/../../x",
    "pytest > ~/x",
    "pytest > $HOME/x",
    "pytest > *.txt",
    "pytest > .git/config",
    "pytest >> .GIT/hooks/pre-commit",
    "pytest > .bashrc",
    "pytest > .envrc",
    "cd /etc && pytest > passwd",
    "(pytest; rm x)",
    "{ pytest; rm x; }",
    "pytest; (rm x)",
    "! rm x",
    "pytest $((1+2))",
    "pytest $[1+2]",
    "((x=1)); pytest",
    "pytest ${x@P}",
    "pytest ${x:-$(rm y)}",
    "pytest ${a[$(rm y)]}",
    "if pytest; then rm x; fi",
    "for f in a; do pytest; done",
    "while pytest; do :; done",
    "case x in x) pytest;; esac",
    "pytest() { rm -rf x; }; pytest",
    "function pytest { rm x; }; pytest",
    "[[ $x -eq 1 ]] && pytest",
    "export PATH=/tmp && pytest",
    "FOO=1 pytest",
    "PATH=/tmp/evil pytest",
    "LD_PRELOAD=./x.so pytest",
    "X=$(rm y) pytest",
    "bash -c 'pytest; rm x'",
    "sh -c pytest",
    "eval pytest",
    "env pytest",
    "exec pytest",
    "xargs pytest",
    "command pytest",
    "nohup pytest",
    "timeout 5 pytest",
    "sudo pytest",
    "$X",
    "$X pytest",
    "p*test",
    "pytest\r#; rm x",
    "pytest\x0b#; rm x",
    "pytest\x0c; rm x",
    "pytest\u00a0#; rm x",
    "pytest\u2028rm x",
    "pytest \u202e; rm x",
    "cat <<EOF\n$(rm x)\nEOF",
    "pytest <<EOF\n`rm x`\nEOF",
    "pytest <<EOF\n\\$(rm x)\nEOF",
    "pytest <<'EOF' | sh\nrm x\nEOF",
    "pytest <<'EOF' && rm x\nhi\nEOF",
    "pytest <<A <<B\na\nA\nrm x\nB",
    'pytest <<E"O"F\nrm\nEOF\nrm x',
    'pytest $"a"; rm x',
    "pytest > x -q; rm y",
    "pytest 'unterminated",
    'pytest "unterminated',
    "pytest )",
    "pytest; coproc rm x",
    "pytest; time rm x",
    "pytest\\\n; rm x",
    "pytest; rm x #",
    "pytest; # ok\nrm x",
    # An approved line's words are plain: the shell expands none of them.
    "pytest $HOME ${HOME}",
    "pytest *.py",
    "pytest ~/x",
    "pytest {a,b}",
    "pytest a[12]",
    "pytest x=~/y",
    "pytest <<< $HOME",
    "X=~/y pytest",
]


@pytest.mark.parametrize("command", ATTACKS)
def test_a_pattern_does_not_approve_what_is_chained_to_it(command: str, tmp_path: Path) -> None:
    verdict = PYTEST.check_command(command, cwd=str(tmp_path))
    assert not verdict.allowed, command
    assert verdict.why, "the person is told which part is not covered"


ALLOWED = [
    "pytest",
    "pytest -q",
    "  pytest -q  ",
    "pytest -q tests/test_a.py::test_b",
    "pytest -k 'a and not b'",
    'pytest -k "x; rm -rf y"',  # one argument, quoted
    "pytest 'a|b' \"c && d\"",
    "pytest \\; rm x",  # an escaped ; is an argument
    "pytest -q 2>&1",
    "pytest -q > out.txt",
    "pytest -q >> logs/out.txt 2> /dev/null",
    "pytest &> /dev/null",
    "pytest -q; pytest -x",
    "pytest && pytest --lf",
    "pytest | pytest",
    "(pytest)",
    "{ pytest; }",
    "! pytest",
    "pytest \\\n  -q",
    "pytest # a comment; rm x",
    "pytest <<'EOF'\n$(not run: quoted)\nEOF",
    "pytest <<EOF\nplain text\nEOF",
    "pytest < input.txt",
]


@pytest.mark.parametrize("command", ALLOWED)
def test_a_pattern_approves_each_of_its_own_commands(command: str, tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    verdict = PYTEST.check_command(command, cwd=str(tmp_path))
    assert verdict.allowed, verdict.why


def test_a_symlink_in_the_workspace_does_not_carry_a_redirection_out(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "out").symlink_to(tmp_path / "elsewhere")
    (ws / "cfg").symlink_to(ws / ".git" / "config")
    assert not PYTEST.check_command("pytest > out/x", cwd=str(ws)).allowed
    assert not PYTEST.check_command("pytest > cfg", cwd=str(ws)).allowed
    assert PYTEST.check_command("pytest > fine.txt", cwd=str(ws)).allowed


def test_without_a_workspace_only_dev_null_is_a_safe_output() -> None:
    assert PYTEST.check_command("pytest > /dev/null").allowed
    assert not PYTEST.check_command("pytest > out.txt").allowed


@pytest.mark.parametrize(
    ("patterns", "command", "allowed"),
    [
        (("pytest*", "rm x"), "pytest -q; rm x", True),
        (("pytest*", "rm x"), "pytest -q; rm -rf x", False),
        (("git status", "git diff*"), "git status && git diff --stat", True),
        (("*",), "anything at all | wc -l", True),
        (("*",), "bash -c 'rm -rf x'", False),  # a wildcard never approves a wrapper
        (("*",), "/bin/bash -c 'rm -rf x'", False),
        (("*",), "b\\ash -c 'rm -rf x'", False),
        (("*",), "'env' rm -rf x", False),
        (("*pytest*",), "bash -c 'pytest; rm -rf x'", False),
        (("*pytest*",), "PATH=/tmp/evil pytest", False),
        (("*",), "X=1", False),
        (("*",), "coproc rm -rf x", False),
        (("*",), "time rm -rf x", False),
        (("bash -c *",), "bash -c 'make test'", True),  # named on purpose
        (("env *",), "env FOO=1 make", True),
        (("FOO=1 pytest*",), "FOO=1 pytest -q", True),
        (("X=1",), "X=1", True),
        (("cd *", "pytest*"), "cd sub && pytest > out.txt", False),  # the cwd moved
        (("cd *", "pytest*"), "cd sub && pytest", True),
        # A pattern with no wildcard approves exactly the line the user wrote, compound or not.
        (("cd x && make",), "cd x && make", True),
        (("echo $(date)",), "echo $(date)", True),
        (("echo $(date)",), "echo $(date); rm x", False),
        ((), "pytest", False),
    ],
)
def test_patterns(patterns: tuple[str, ...], command: str, allowed: bool, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    verdict = Policy(allow_commands=patterns).check_command(command, cwd=str(tmp_path))
    assert verdict.allowed is allowed, verdict.why


def test_the_reason_names_the_part_that_is_not_covered(tmp_path: Path) -> None:
    verdict = PYTEST.check_command("pytest -q; touch pwned", cwd=str(tmp_path))
    assert verdict.why == "`touch pwned` matches no --allow pattern"
    verdict = PYTEST.check_command("pytest $(touch pwned)", cwd=str(tmp_path))
    assert "command substitution" in (verdict.why or "")
    verdict = PYTEST.check_command("pytest > /etc/passwd", cwd=str(tmp_path))
    assert "outside the workspace" in (verdict.why or "")


def test_a_command_is_shown_line_by_line_with_its_newlines_marked() -> None:
    assert show_command("pytest -q") == ["pytest -q"]
    assert show_command("pytest -q\nrm -rf x") == ["pytest -q⏎", "rm -rf x"]
    assert show_command("pytest\n") == ["pytest⏎", ""]
    # A carriage return would hide `rm -rf x` behind `pytest` on a terminal; bidi controls
    # reorder what is shown; an escape could clear the screen.
    assert show_command("rm -rf x\rpytest") == ["rm -rf x␍pytest"]
    assert show_command("echo \u202eabc") == ["echo ⟨U+202E⟩abc"]
    assert show_command("echo \x1b[2J") == ["echo ␛[2J"]


# ---- real bash is the judge ---------------------------------------------------------------------

_FRAGMENTS = [
    "pytest",
    " ",
    " -q",
    ";",
    "\n",
    "&&",
    "||",
    "&",
    "|",
    "'",
    '"',
    "\\",
    "$",
    "$'",
    '$"',
    "`",
    "#",
    "(",
    ")",
    "{",
    "}",
    "<<",
    "<<-",
    "'EOF'",
    "EOF",
    "\nEOF\n",
    "touch pwned",
    "echo",
    "x",
    "\t",
    "${x}",
    "=",
    "!",
    "*",
    ">",
    "2>&1",
    "<",
    "$(",
    "\\\n",
    "\r",
    "coproc ",
    "time ",
    "then ",
    "do ",
    "done",
    "if ",
    "fi",
    "{ ",
    " }",
    "[[ ",
    " ]]",
    "case ",
    " in ",
    "esac",
    # builtins that evaluate a word, and programs that run other programs
    "printf -v ",
    "'a[$(touch pwned)]' ",
    "read ",
    "unset ",
    "test -v ",
    "[ -v ",
    " ]",
    "let ",
    "mapfile -C ",
    "a=(1) ",
    "declare ",
    "set -k ",
    "env ",
    "prlimit ",
    "setarch x86_64 ",
    "timeout 5 ",
    "nice ",
    "bash -c ",
    "xargs ",
    "find . -exec ",
    " {} ';'",
    "sort -o pwned ",
]

_SHIMS = ("touch", "env", "prlimit", "setarch", "timeout", "nice", "bash", "xargs", "find", "sort")
"""Real programs put on the judge's PATH behind a shim that records each time one is run."""


def _bash_runs(command: str, where: Path) -> list[str]:
    """The simple commands bash actually runs for `command`, from a DEBUG trap, with nothing but
    a recording `pytest` and recording shims of `_SHIMS` on PATH (builtins still run, so each
    is named by the trap)."""
    return _judge(command, where)[0]


def _judge(command: str, where: Path) -> tuple[list[str], list[str]]:
    """What bash runs for `command`: its simple commands (from a DEBUG trap) and the programs
    executed from PATH (from the shims, which also see a program started by another)."""
    stubs = where / "bin"
    stubs.mkdir(exist_ok=True)
    execs = where / "execs"
    if not (stubs / "pytest").exists():
        (stubs / "pytest").write_text(f"#!/bin/sh\nprintf 'pytest\\0' >> {execs}\nexit 0\n")
        (stubs / "pytest").chmod(0o755)
        for name in _SHIMS:
            real = shutil.which(name)
            if real is None:
                continue
            shim = stubs / name
            shim.write_text(f'#!/bin/sh\nprintf "{name}\\0" >> {execs}\nexec {real} "$@"\n')
            shim.chmod(0o755)
    trace = where / "trace"
    trace.unlink(missing_ok=True)
    execs.unlink(missing_ok=True)
    script = f'set -T; trap \'printf "%s\\0" "$BASH_COMMAND" >> {trace}\' DEBUG\neval "$BUBU_CMD"'
    subprocess.run(
        ["/bin/bash", "--norc", "--noprofile", "-c", script],
        cwd=where,
        env={"PATH": str(stubs), "BUBU_CMD": command, "HOME": str(where)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=10,
        check=False,
    )
    seen = trace.read_bytes().split(b"\0") if trace.exists() else []
    ran = [s.decode("utf-8", "replace") for s in seen if s][1:]  # [0] is the eval itself
    ran_programs = execs.read_bytes().split(b"\0") if execs.exists() else []
    # A line of nothing but redirections (`2>&1`, `> out`) runs no program; after a lone `!`
    # bash names the trap's own command.
    commands = [
        r
        for r in ran
        if not r.lstrip("0123456789").startswith((">", "<", "&>")) and not r.startswith("printf ")
    ]
    return commands, [p.decode() for p in ran_programs if p]


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.tuples(st.sampled_from(["pytest", ""]), st.lists(st.sampled_from(_FRAGMENTS), max_size=12))
    .map(lambda t: t[0] + "".join(t[1]))
    .filter(bool)
)
def test_what_a_pattern_approves_is_all_that_bash_runs(tmp_path: Path, command: str) -> None:
    """For every line the allow-list approves under `pytest*`, real bash runs only pytest; under
    `*`, only the commands the parse showed, and no program that none of them names."""
    _assert_bash_agrees(command, tmp_path)


_HEADS = [
    "printf -v",
    "printf",
    "read",
    "read -a",
    "unset",
    "test -v",
    "[ -v",
    "let",
    "mapfile -C",
    "readarray",
    "wait -p",
    "getopts a",
    "env",
    "prlimit",
    "setarch x86_64",
    "timeout 5",
    "nice",
    "bash -c",
    "xargs",
    "find . -exec",
    "sort -o",
    "a=(1);",
    "declare",
    "set -k;",
    "pytest",
    "command",
    "exec",
    "eval",
    "trap",
]
_ARGS = [
    "'a[$(touch pwned)]'",
    "a[0]",
    "x",
    "touch",
    "pwned",
    "pytest",
    "]",
    "';'",
    "{}",
    "-q",
    "a=b",
    "'touch pwned'",
    "%s",
    "1",
    "'$(touch pwned)'",
    "'`touch pwned`'",
    "<<< 'a[$(touch pwned)]'",
]


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.tuples(st.sampled_from(_HEADS), st.lists(st.sampled_from(_ARGS), max_size=5)).map(
        lambda t: " ".join([t[0], *t[1]])
    )
)
def test_builtins_and_wrappers_run_no_more_than_the_parse_shows(
    tmp_path: Path, command: str
) -> None:
    """Builtins that evaluate a word and programs that start others, judged by real bash."""
    _assert_bash_agrees(command, tmp_path)


def _assert_bash_agrees(command: str, tmp_path: Path) -> None:
    where = tmp_path / "run"
    where.mkdir(exist_ok=True)
    (where / "pwned").unlink(missing_ok=True)
    if PYTEST.check_command(command, cwd=str(where)).allowed:
        ran, programs = _judge(command, where)
        assert all(r.startswith("pytest") for r in ran), (command, ran)
        assert set(programs) <= {"pytest"}, (command, programs)
        assert not (where / "pwned").exists(), command
    if ANY.check_command(command, cwd=str(where)).allowed:
        # Under `*` bash may run no more commands than the parse showed for judging, and no
        # program other than those the parse named.
        ran, programs = _judge(command, where)
        line = parse(command)
        assert len(ran) <= len(line.commands), (command, ran)
        names = {os.path.basename(c.name or "") for c in line.commands}
        assert set(programs) <= names, (command, programs)


def test_the_bash_judge_sees_what_is_chained(tmp_path: Path) -> None:
    """The judge itself works: it reports the second command of a chained line."""
    ran = _bash_runs("pytest -q; echo chained", tmp_path)
    assert ran == ["pytest -q", "echo chained"]


def test_the_bash_judge_sees_a_program_started_by_another(tmp_path: Path) -> None:
    """The shims see what a wrapper starts, which the DEBUG trap does not."""
    ran, programs = _judge("prlimit touch x", tmp_path)
    assert ran == ["prlimit touch x"]
    assert programs == ["prlimit", "touch"]


def test_parse_is_total() -> None:
    """Any text, however broken, parses to commands or a refusal, never an exception."""
    for text in ["", ";", "\0", "\udcff", "'" * 1000, "$(" * 500, "<<" * 300, os.urandom(64).hex()]:
        parse(text)


_WORD_BITS = [
    "a",
    "1",
    "x",
    "-",
    "/",
    "~",
    "=",
    ":",
    "*",
    "?",
    "[",
    "]",
    "{",
    "}",
    ",",
    "..",
    "'",
    '"',
    "\\",
    "$",
    "@",
    "HEAD",
    "@{u}",
    "%",
    "!",
    "^",
    "+",
    " ",
    "\t",
    "#",
]


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.sampled_from(_WORD_BITS), min_size=1, max_size=8).map("".join))
def test_a_word_called_plain_is_what_bash_passes(tmp_path: Path, word: str) -> None:
    """Whenever the parse calls a word plain, bash passes exactly that value to the program,
    in a directory whose files a glob would match and with a HOME a tilde would expand to."""
    where = tmp_path / "w"
    where.mkdir(exist_ok=True)
    for name in ("a", "a1", "x", "ax", "1"):
        (where / name).touch()
    line = parse(f"printf '%s\\0' {word}")
    if line.refusal or line.expands or len(line.commands) != 1 or len(line.commands[0].argv) < 3:
        return  # asks; or no argument (printf then prints its format once)
    got = subprocess.run(
        ["/bin/bash", "--norc", "--noprofile", "-c", f"printf '%s\\0' {word}"],
        cwd=where,
        env={"PATH": "/usr/bin:/bin", "HOME": "/home/someone"},
        capture_output=True,
        timeout=10,
        check=False,
    )
    if got.returncode != 0:
        return  # bash could not read it either
    passed = got.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]
    assert passed == list(line.commands[0].argv[2:]), (word, passed)
