"""An allow-list pattern approves one simple command, never what is chained, substituted or
redirected around it: tables of attack strings, and real bash as the judge of what runs."""

from __future__ import annotations

import os
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
    "pytest $HOME ${HOME}",
    "pytest *.py",
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
    "pytest", " ", " -q", ";", "\n", "&&", "||", "&", "|", "'", '"', "\\", "$", "$'", '$"', "`",
    "#", "(", ")", "{", "}", "<<", "<<-", "'EOF'", "EOF", "\nEOF\n", "touch pwned", "echo", "x",
    "\t", "${x}", "=", "!", "*", ">", "2>&1", "<", "$(", "\\\n", "\r", "coproc ", "time ",
    "then ", "do ", "done", "if ", "fi", "{ ", " }", "[[ ", " ]]", "case ", " in ", "esac",
]  # fmt: skip


def _bash_runs(command: str, where: Path) -> list[str]:
    """The simple commands bash actually runs for `command`, from a DEBUG trap, with nothing but
    a recording `pytest` on PATH (builtins still run, so each is named by the trap)."""
    stubs = where / "bin"
    stubs.mkdir(exist_ok=True)
    if not (stubs / "pytest").exists():
        (stubs / "pytest").write_text("#!/bin/sh\nexit 0\n")
        (stubs / "pytest").chmod(0o755)
    trace = where / "trace"
    trace.unlink(missing_ok=True)
    script = f'set -T; trap \'printf "%s\\0" "$BASH_COMMAND" >> {trace}\' DEBUG\neval "$BUBU_CMD"'
    subprocess.run(
        ["/bin/bash", "--norc", "--noprofile", "-c", script],
        cwd=where, env={"PATH": str(stubs), "BUBU_CMD": command, "HOME": str(where)},
        stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False,
    )  # fmt: skip
    seen = trace.read_bytes().split(b"\0") if trace.exists() else []
    ran = [s.decode("utf-8", "replace") for s in seen if s][1:]  # [0] is the eval itself
    # A line of nothing but redirections (`2>&1`, `> out`) runs no program; after a lone `!`
    # bash names the trap's own command.
    return [
        r
        for r in ran
        if not r.lstrip("0123456789").startswith((">", "<", "&>")) and not r.startswith("printf ")
    ]


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
    `*`, only the commands the parse showed."""
    where = tmp_path / "run"
    where.mkdir(exist_ok=True)
    if PYTEST.check_command(command, cwd=str(where)).allowed:
        ran = _bash_runs(command, where)
        assert all(r.startswith("pytest") for r in ran), (command, ran)
        assert not (where / "pwned").exists(), command
    if ANY.check_command(command, cwd=str(where)).allowed:
        # Under `*` bash may run no more commands than the parse showed for judging.
        ran = _bash_runs(command, where)
        assert len(ran) <= len(parse(command).commands), (command, ran)


def test_the_bash_judge_sees_what_is_chained(tmp_path: Path) -> None:
    """The judge itself works: it reports the second command of a chained line."""
    ran = _bash_runs("pytest -q; echo chained", tmp_path)
    assert ran == ["pytest -q", "echo chained"]


def test_parse_is_total() -> None:
    """Any text, however broken, parses to commands or a refusal, never an exception."""
    for text in ["", ";", "\0", "\udcff", "'" * 1000, "$(" * 500, "<<" * 300, os.urandom(64).hex()]:
        parse(text)
