"""A pattern approves only what it seems to: no program run through another, no word a bash
builtin evaluates, no option that writes a file or runs a program; the patterns the docs
recommend are run for real against hostile lines."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bubu.engine import runners
from bubu.engine.permissions import Policy

ANY = Policy(allow_commands=("*",))
PAYLOAD = "'a[$(touch pwned)]'"

BUILTIN_ATTACKS = [
    f"printf -v {PAYLOAD} x",
    f"printf -v{PAYLOAD} %s 1",
    f"read {PAYLOAD}",
    f"read -r -a {PAYLOAD}",
    f"unset {PAYLOAD}",
    f"unset -v {PAYLOAD}",
    f"test -v {PAYLOAD}",
    f"[ -v {PAYLOAD} ]",
    f"mapfile {PAYLOAD}",
    "mapfile -C 'touch pwned' -c 1 x",
    f"readarray {PAYLOAD}",
    f"wait -p {PAYLOAD}",
    f"getopts a {PAYLOAD}",
    "let x",
    "let 'x=1'",
    f"declare {PAYLOAD}=1",
    f"typeset {PAYLOAD}=1",
    f"export {PAYLOAD}=1",
    f"readonly {PAYLOAD}=1",
    "history -w pwned",
]


@pytest.mark.parametrize("command", BUILTIN_ATTACKS)
def test_a_builtin_that_evaluates_a_word_is_not_approved(command: str, tmp_path: Path) -> None:
    name = command.split(maxsplit=1)[0]
    for patterns in (("*",), (f"{name} *",)):
        verdict = Policy(allow_commands=patterns).check_command(command, cwd=str(tmp_path))
        assert not verdict.allowed, (patterns, command)
        assert verdict.why


RUNNING_BUILTINS = [
    "compgen -C 'touch pwned' x",
    "complete -C 'touch pwned' x",
    "fc -e 'touch pwned'",
    "trap 'touch pwned' EXIT",
    "set -k",
    "shopt -s extglob",
    "source ./evil.sh",
    ". ./evil.sh",
    "eval 'touch pwned'",
]


@pytest.mark.parametrize("command", RUNNING_BUILTINS)
def test_a_builtin_that_runs_code_is_approved_only_by_name(command: str, tmp_path: Path) -> None:
    verdict = ANY.check_command(command, cwd=str(tmp_path))
    assert not verdict.allowed, command
    assert "runs other programs" in (verdict.why or "")


@pytest.mark.parametrize("command", [c for c in BUILTIN_ATTACKS if "a[" in c])
def test_each_builtin_attack_really_runs_in_bash(command: str, tmp_path: Path) -> None:
    """The table is not guesswork: bash runs the command hidden in each quoted subscript."""
    subprocess.run(
        ["/bin/bash", "--norc", "--noprofile", "-c", f"a=(1); {command}"],
        cwd=tmp_path,
        input="x\n",
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    if command.startswith(("wait", "getopts", "mapfile", "readarray", "declare", "typeset")) or (
        "-a" in command
    ):
        return  # refused for what they take (a variable name), whether or not this one runs
    if command.startswith(("export", "readonly")):
        return
    assert (tmp_path / "pwned").exists(), command


PLAIN_BUILTINS = [
    "printf '%s\\n' hello",
    "printf '[%s]' x",
    "printf -v out %s 1",
    "read -r line",
    "test -f README.md",
    "[ -d src ]",
    "[ -v HOME ]",
]


@pytest.mark.parametrize("command", PLAIN_BUILTINS)
def test_plain_uses_of_those_builtins_are_approved(command: str, tmp_path: Path) -> None:
    assert ANY.check_command(command, cwd=str(tmp_path)).allowed, command


RUNNER_LINES = [
    "prlimit bash -c 'pytest; touch pwned'",
    "prlimit --nproc=10 pytest",
    "setarch x86_64 bash -c 'pytest; touch pwned'",
    "linux64 pytest",
    "i386 pytest",
    "chrt -f 1 pytest",
    "taskset -c 0 pytest",
    "stdbuf -oL pytest",
    "unbuffer pytest",
    "ionice -c3 pytest",
    "/usr/bin/env pytest",
    "python -c 'import os; os.system(\"touch pwned\")' pytest",
    "python3 -m pytest",
    "python3.12 -m pytest",
    "perl -e 'system q(touch pwned)' pytest",
    "node -e 'pytest'",
    "npx pytest",
    "uvx pytest",
    "pipx run pytest",
    "uv run pytest",
    "make pytest",
    "gdb -batch -ex 'shell touch pwned' pytest",
    "valgrind pytest",
    "busybox sh -c pytest",
    "awk 'BEGIN{system(\"touch pwned\")}' pytest",
    "sed -n 'e touch pwned' pytest",
    "ssh -o ProxyCommand='touch pwned' x pytest",
    "docker run pytest",
    "bubu run --sandbox off --yes pytest",
    "faketime 'last friday' bash -c 'pytest; touch pwned'",
    "torsocks bash -c 'pytest; touch pwned'",
    "proxychains4 -q bash -c 'pytest; touch pwned'",
    "cpulimit -l 50 -- bash -c 'pytest; touch pwned'",
    "gtimeout 5 pytest",
    "eatmydata pytest",
    "setpriv --reuid=0 pytest",
    "ssh-agent bash -c 'pytest; touch pwned'",
    "hyperfine 'touch pwned' pytest",
    "dbus-run-session -- pytest",
    "direnv exec . pytest",
    "pyenv exec pytest",
    "mise exec -- pytest",
    "nix-shell --run 'touch pwned' pytest",
]


@pytest.mark.parametrize("command", RUNNER_LINES)
def test_a_wildcard_does_not_approve_a_program_run_through_another(
    command: str, tmp_path: Path
) -> None:
    for patterns in (("*",), ("*pytest*",)):
        verdict = Policy(allow_commands=patterns).check_command(command, cwd=str(tmp_path))
        assert not verdict.allowed, (patterns, command)
        assert "runs other programs" in (verdict.why or ""), verdict.why


def test_naming_the_runner_approves_it(tmp_path: Path) -> None:
    assert Policy(allow_commands=("prlimit *",)).check_command("prlimit pytest").allowed
    assert Policy(allow_commands=("python3 *",)).check_command("python3 -m pytest").allowed


OPTION_LINES = [
    "git diff --output=/tmp/x",
    "git diff --output /tmp/x",
    "git diff --outp=/tmp/x",
    "git log --output=/tmp/x",
    "git show HEAD --output=x",
    "git format-patch -o /tmp/out HEAD~1",
    "git -c core.pager='touch pwned' log",
    "git -ccore.pager=x log",
    "git --exec-path=/tmp/evil status",
    "git --git-dir=evil status",
    "git grep -O'touch pwned' x",
    "git grep --open-files-in-pager=vim x",
    "git fetch --upload-pack='touch pwned' origin",
    "git ls-remote 'ext::sh -c touch% pwned'",
    "git clone -u 'touch pwned' x y",
    "git clone --template=evil x y",
    "git rebase -x 'touch pwned' HEAD~1",
    "git difftool HEAD",
    "git mergetool",
    "git config core.fsmonitor 'touch pwned'",
    "git bisect run touch pwned",
    "git archive -o /tmp/x.tar HEAD",
    "sort -o /tmp/x in",
    "sort -ro /tmp/x in",
    "sort --outp=/tmp/x in",
    "sort --compress-program=sh in",
    "sed -i s/a/b/ ~/.bashrc".replace("~/", "/root/"),
    "find . -exec touch pwned ;",
    "find . -execdir touch pwned ;",
    "find . -delete",
    "find . -fprint /tmp/x",
    "tar -cf x.tar --to-command='touch pwned' .",
    "tar --checkpoint=1 --checkpoint-action=exec='touch pwned' -cf x.tar .",
    "tar -I 'touch pwned' -cf x.tar .",
    "rsync -e 'touch pwned' a b:",
    "rsync --rsh=x a b:",
    "zip x.zip a -T -TT 'touch pwned'",
    "less -o /tmp/x a",
    "less '+!touch pwned' a",
    "man -P 'touch pwned' ls",
    "curl -o /tmp/x https://example.org",
    "curl -sSLo /tmp/x https://example.org",
    "curl -O https://example.org/x",
    "curl --output=/tmp/x https://example.org",
    "wget -O /tmp/x https://example.org",
    "wget --use-askpass='touch pwned' https://example.org",
    "pytest --basetemp=/tmp/home",
    "pytest --junitxml=/tmp/x.xml",
    "pytest -o cache_dir=/tmp/x",
    "pytest --rootdir=/tmp",
    "pytest --debug=/tmp/x",
    "py.test --report-log=/tmp/x",
]


@pytest.mark.parametrize("command", OPTION_LINES)
def test_an_option_that_writes_or_runs_asks_under_any_pattern(command: str, tmp_path: Path) -> None:
    program = command.split(maxsplit=1)[0]
    for patterns in (("*",), (f"{program} *",), (f"{program}*",)):
        verdict = Policy(allow_commands=patterns).check_command(command, cwd=str(tmp_path))
        assert not verdict.allowed, (patterns, command)
        assert verdict.why


def test_the_line_written_out_still_approves_itself(tmp_path: Path) -> None:
    line = "git diff --output=patch.diff"
    assert Policy(allow_commands=(line,)).check_command(line, cwd=str(tmp_path)).allowed


ORDINARY = [
    "git status",
    "git status -sb",
    "git diff",
    "git diff --stat HEAD~1",
    "git diff --output-indicator-new=+ HEAD",
    "git log --oneline -n 5",
    "git log -p -- src",
    "git push -u origin main",
    "git -C sub status",
    "git fetch -u origin",
    "git commit -m 'fix: -o and --output are words here'",
    "sort -r -k2 data.txt",
    "find . -name '*.py' -print",
    "curl -fsSL https://example.org",
    "pytest -q -p no:cacheprovider",
    "pytest --co -q",
    "pytest -k 'not slow' -x",
    "tar -tzf x.tar.gz",
    "rsync -av a/ b/",
    "less README.md",
    "cp a b",
]


@pytest.mark.parametrize("command", ORDINARY)
def test_ordinary_uses_of_those_programs_are_approved(command: str, tmp_path: Path) -> None:
    assert ANY.check_command(command, cwd=str(tmp_path)).allowed, command


def test_every_table_entry_has_a_reason() -> None:
    assert all(r.strip() for r in runners.RUNNERS.values())
    assert all(r.strip() for r in runners.EVALUATORS.values())
    assert all(
        o.reason.strip() and (o.long or o.short or o.exact or o.whole) for o in runners.OPTIONS
    )


def test_a_program_is_known_by_its_basename_and_without_its_version() -> None:
    assert runners.program("/usr/bin/python3.12") == "python"
    assert runners.program("pip3") == "pip"
    assert runners.program("linux32") == "linux32"
    assert runners.program("x86_64") == "x86_64"
    assert runners.runner("git") is None


# ---- the patterns the docs recommend, run for real -----------------------------------------------

RECOMMENDED = ["git status", "git diff", "git diff*", "git diff *", "pytest", "pytest *", "pytest*"]
"""Every `--allow` pattern docs/permissions.md, docs/configuration.md and the README recommend."""

_HOSTILE = [
    "--output=OUT/w",
    "--output OUT/w",
    "--outp=OUT/w",
    "-oOUT/w",
    "--output-directory=OUT",
    "--ext-diff",
    "--no-index a b",
    "-c core.pager='touch OUT/ran'",
    "--exec-path=OUT",
    "-O'touch OUT/ran'",
    "--basetemp=OUT/tmp",
    "--junitxml=OUT/j.xml",
    "--junit-xml=OUT/j.xml",
    "-o cache_dir=OUT/c",
    "--rootdir=OUT",
    "--debug=OUT/d.log",
    "--report-log=OUT/r",
    "--log-file=OUT/l",
    "-p no:cacheprovider",
    "-q",
    "--stat",
    "HEAD",
    "tool",
    "> OUT/w",
    "; touch OUT/ran",
    "&& touch OUT/ran",
    "| sh",
]


def _hostile_lines(pattern: str) -> list[str]:
    stem = pattern.rstrip("*").rstrip()
    lines = [stem] + [f"{stem} {h}" for h in _HOSTILE]
    lines += [f"{stem}{h}" for h in ("tool -x 'touch OUT/ran'", "tool --extcmd='touch OUT/ran'")]
    lines += [f"{stem} {a} {b}" for a in _HOSTILE[:12] for b in _HOSTILE[12:20]]
    return lines


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real git repository with a commit, a change and a passing test."""
    ws = tmp_path_factory.mktemp("ws") / "repo"
    ws.mkdir()
    (ws / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    (ws / "a").write_text("a\n")
    (ws / "b").write_text("b\n")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (
        ["init", "-q"],
        ["add", "."],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"],
    ):
        subprocess.run(["git", *args], cwd=ws, env=env, check=True, capture_output=True)
    (ws / "a").write_text("changed\n")
    return ws


@pytest.mark.heavy  # runs real pytest and git some hundred times; safe beside other tests
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("pattern", RECOMMENDED)
def test_a_recommended_pattern_cannot_write_outside_or_run_another_program(
    pattern: str, repo: Path, tmp_path: Path
) -> None:
    """Every hostile line the pattern approves is run by real bash, real git and real pytest:
    nothing appears outside the workspace and no other program runs."""
    out = tmp_path / "outside"
    out.mkdir()
    policy = Policy(allow_commands=(pattern,))
    bin_dir = Path(sys.executable).parent
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(out),
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_PAGER": "cat",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    approved = 0
    for line in _hostile_lines(pattern):
        command = line.replace("OUT", str(out))
        if not policy.check_command(command, cwd=str(repo)).allowed:
            continue
        approved += 1
        subprocess.run(
            ["/bin/bash", "--norc", "--noprofile", "-c", command],
            cwd=repo,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert list(out.iterdir()) == [], (pattern, command)
    assert approved, f"{pattern} approved none of its own lines"
