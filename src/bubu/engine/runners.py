"""What a wildcard must not approve: programs that run other programs, bash builtins that
evaluate a word as code, and the options of common programs that write a file or run a program.

Three tables, each entry with the reason a person is shown:

- `RUNNERS`: programs whose arguments name another program or code to run (``env``, ``prlimit``,
  ``bash -c``, ``python -c``, ``npx``, ``make``). A pattern approves one only when its first word
  is that same word, written out (``--allow 'make *'``): ``*`` or ``*pytest*`` never do.
- `EVALUATORS`: bash builtins that evaluate the subscript of a variable name (``printf -v
  'a[$(touch x)]' y`` runs ``touch``), found by running every builtin of bash 5.2 with such a
  word. Their words may not hold ``[``, ``$`` or a backtick; ``let`` is never approved.
- `OPTIONS`: options that make a program which otherwise reads write a file it names or run a
  program (``git diff --output=F``, ``sort -o F``, ``find -exec``). They ask under any pattern;
  only a pattern that is the whole line, written out, approves them.

A program whose purpose is to write the files it is given (``cp``, ``mv``, ``rm``, ``tee``,
``dd``, ``install``) is in none of them: a pattern naming it approves exactly what it seems to.
The module is pure data and lookups.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_SHELL = "a shell runs the commands its arguments hold (-c)"
_INTERPRETER = "an interpreter runs the code its arguments hold (-c, -e, a script)"
_PACKAGES = "a package tool runs scripts of the project or of packages it fetches"
_BUILD = "a build tool runs the commands its arguments and its build files name"
_RUNS = "runs the program named in its arguments"
_RESERVED = "a reserved word of bash the parser may read as a program's name"
_SETS = "changes how bash reads or runs the commands after it"


def _each(reason: str, *names: str) -> dict[str, str]:
    return dict.fromkeys(names, reason)


RUNNERS: Mapping[str, str] = {
    **_each(_SHELL, "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "rbash", "fish"),
    **_each(_SHELL, "csh", "tcsh", "busybox", "toybox", "pwsh", "powershell"),
    **_each(_INTERPRETER, "python", "pypy", "perl", "ruby", "irb", "node", "nodejs", "deno"),
    **_each(_INTERPRETER, "bun", "php", "lua", "luajit", "tclsh", "wish", "expect", "Rscript"),
    **_each(_INTERPRETER, "R", "julia", "osascript", "java", "jshell", "groovy", "scala"),
    **_each(_INTERPRETER, "erl", "escript", "elixir", "iex", "guile", "racket", "sbcl"),
    **_each(_INTERPRETER, "ghci", "runghc", "swift", "dotnet", "gnuplot", "m4", "dc", "ed"),
    **_each("its script can run commands (e, s///e) and write files (w)", "sed", "gsed"),
    **_each("its program can run commands (system(), pipes) and write files", "awk", "gawk"),
    **_each("its program can run commands (system(), pipes) and write files", "mawk", "nawk"),
    **_each("an editor runs the commands its arguments give (-c, +cmd)", "vi", "vim", "nvim"),
    **_each("an editor runs the commands its arguments give (-c, +cmd)", "ex", "emacs"),
    **_each(_PACKAGES, "npx", "bunx", "pnpx", "uvx", "pipx", "uv", "poetry", "pdm", "hatch"),
    **_each(_PACKAGES, "pipenv", "conda", "mamba", "micromamba", "npm", "yarn", "pnpm", "pip"),
    **_each(_PACKAGES, "cargo", "go", "gem", "bundle", "composer", "tox", "nox"),
    **_each(_BUILD, "make", "gmake", "ninja", "just", "task", "rake", "gradle", "gradlew"),
    **_each(_BUILD, "mvn", "mvnw", "ant", "bazel", "cmake", "scons"),
    **_each(_RUNS, "env", "xargs", "parallel", "nohup", "nice", "ionice", "timeout", "time"),
    **_each(_RUNS, "prlimit", "setarch", "linux32", "linux64", "i386", "x86_64", "uname26"),
    **_each(_RUNS, "chrt", "taskset", "numactl", "cgexec", "stdbuf", "unbuffer", "setsid"),
    **_each(_RUNS, "sudo", "doas", "su", "runuser", "pkexec", "sg", "newgrp", "chroot"),
    **_each(_RUNS, "unshare", "nsenter", "flock", "script", "watch", "entr", "chronic"),
    **_each(_RUNS, "strace", "ltrace", "gdb", "valgrind", "perf", "catchsegv", "rlwrap"),
    **_each(_RUNS, "fakeroot", "proot", "firejail", "bwrap", "systemd-run", "xvfb-run"),
    **_each(_RUNS, "dbus-launch", "mpirun", "mpiexec", "srun", "screen", "tmux", "at"),
    **_each(_RUNS, "batch", "crontab", "docker", "podman", "kubectl", "xdg-open", "open"),
    **_each(_RUNS, "ld.so", "ld-linux.so.2", "ld-linux-x86-64.so.2", "ssh", "scp", "sftp"),
    **_each(_RUNS, "faketime", "torsocks", "proxychains", "proxychains4", "cpulimit", "gtimeout"),
    **_each(_RUNS, "eatmydata", "fakechroot", "nocache", "trickle", "chpst", "setpriv", "runcon"),
    **_each(_RUNS, "setuidgid", "envdir", "envuidgid", "softlimit", "daemonize", "timelimit"),
    **_each(_RUNS, "start-stop-daemon", "dtach", "abduco", "pee", "ifne", "lckdo", "sem"),
    **_each(_RUNS, "hyperfine", "watchexec", "nodemon", "dbus-run-session", "systemd-inhibit"),
    **_each(_RUNS, "systemd-nspawn", "capsh", "sshpass", "ssh-agent", "xterm", "arch", "rr"),
    **_each(_RUNS, "x-terminal-emulator", "caffeinate", "sandbox-exec", "wine", "flatpak-spawn"),
    **_each(_RUNS, "direnv", "pyenv", "rbenv", "nodenv", "asdf", "mise", "nix-shell", "nix"),
    **_each(_BUILD, "meson", "ctest", "sbt", "lein", "mix", "stack", "cabal", "dune", "bazelisk"),
    "bubu": "starts an agent that runs commands under the policy its arguments give",
    **_each("a builtin that runs the command or file its arguments name", "eval", "exec"),
    **_each("a builtin that runs the command or file its arguments name", "source", "."),
    **_each("a builtin that runs the command or file its arguments name", "command", "builtin"),
    **_each("a builtin that runs a command later (on a signal, a key, a completion)", "trap"),
    **_each("a builtin that runs a command later (on a signal, a key, a completion)", "bind"),
    **_each("a builtin that runs a command later (on a signal, a key, a completion)", "complete"),
    **_each("a builtin that runs the command or function -C/-F names", "compgen"),
    **_each("a builtin that runs an editor or a command from the history", "fc"),
    **_each("a builtin that decides what a later name runs", "alias", "hash", "enable"),
    **_each(_SETS + " (set -k makes later arguments environment variables)", "set", "shopt"),
    **_each(_RESERVED, "coproc", "select", "function", "if", "then", "else", "elif", "fi"),
    **_each(_RESERVED, "case", "esac", "for", "while", "until", "do", "done", "in"),
    **_each(_RESERVED, "{", "}", "[[", "]]", "!"),
}
"""Programs that run another program or code their arguments name; a wildcard never approves
them (a pattern must start with the same word)."""

EVALUATORS: Mapping[str, str] = {
    "let": "let evaluates its arguments as arithmetic, which runs the commands a subscript holds",
    **_each(
        "it evaluates the subscript of the variable name it is given, which can run a command",
        *("read", "unset", "mapfile", "readarray", "wait", "getopts", "printf", "test", "["),
        *("declare", "typeset", "local", "export", "readonly"),
    ),
}
"""Bash builtins that evaluate a word as arithmetic or as an array subscript."""

_ONLY_AFTER = {"printf": ("-v",), "test": ("-v", "-R"), "[": ("-v", "-R")}
"""Builtins that evaluate a name only in the presence of these options (``printf '[%s]' x`` is
plain output); the others take names wherever they take arguments."""
_CODE = ("[", "$", "`")


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """Options of `program` that write a file or run a program; `subcommands` limits them to
    ``git SUB`` (the empty tuple: the words before the subcommand, or every word)."""

    program: str
    reason: str
    subcommands: tuple[str, ...] = ()
    long: tuple[str, ...] = ()
    """Long options, also found abbreviated (``--outp=F``, as getopt and git accept them)."""
    abbrev: bool = True
    """Whether the program accepts a long option abbreviated (pytest does not: ``--co``)."""
    short: str = ""
    """Letters of short options, found anywhere in a bundle (``-ro F`` is ``-r -o F``)."""
    exact: tuple[str, ...] = ()
    """Whole words (``-exec``), or prefixes of words when they end in ``…``."""
    whole: bool = False
    """Every use asks (``git difftool``)."""


_DIFFS = ("diff", "log", "show", "format-patch", "diff-tree", "diff-index", "diff-files")
_REMOTES = ("fetch", "pull", "clone", "ls-remote", "push", "archive", "submodule", "remote")

OPTIONS: tuple[Option, ...] = (
    Option(
        program="git",
        reason="git runs the program or reads the config these options give (-c core.pager=…)",
        long=("--config-env", "--exec-path", "--git-dir", "--work-tree"),
        short="c",
    ),
    Option(
        program="git",
        reason="git writes the file --output names",
        subcommands=(*_DIFFS, "whatchanged", "range-diff", "archive"),
        long=("--output", "--output-directory"),
    ),
    Option(
        program="git",
        reason="git writes into the directory -o names",
        subcommands=("format-patch", "archive"),
        short="o",
    ),
    Option(
        program="git",
        reason="git runs the pager --open-files-in-pager names",
        subcommands=("grep",),
        long=("--open-files-in-pager",),
        short="O",
    ),
    Option(
        program="git",
        reason="git runs the program this option names on the other side",
        subcommands=_REMOTES,
        long=("--upload-pack", "--receive-pack", "--exec", "--template", "--config"),
        exact=("ext::…", "fd::…"),
    ),
    Option(
        program="git",
        reason="git clone runs the program -u names and sets the config -c gives",
        subcommands=("clone",),
        short="uc",
    ),
    Option(
        program="git",
        reason="git runs the hooks of the template directory it names",
        subcommands=("init",),
        long=("--template", "--separate-git-dir"),
    ),
    Option(
        program="git",
        reason="git rebase runs the command --exec names",
        subcommands=("rebase",),
        long=("--exec",),
        short="x",
    ),
    Option(
        program="git",
        reason="this git command runs other programs or changes what git runs later",
        subcommands=("difftool", "mergetool", "bisect", "filter-branch", "config", "hook"),
        whole=True,
    ),
    Option(
        program="git",
        reason="this git command runs other programs or writes outside the repository",
        subcommands=("instaweb", "web--browse", "daemon", "send-email", "worktree", "p4", "svn"),
        whole=True,
    ),
    Option(
        program="sort",
        reason="sort writes the file -o names and runs the --compress-program",
        long=("--output", "--compress-program"),
        short="o",
    ),
    Option(
        program="sed", reason="sed -i rewrites the files it reads", long=("--in-place",), short="i"
    ),
    Option(
        program="find",
        reason="find runs commands (-exec, -ok), deletes (-delete) and writes files (-fprint)",
        exact=("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf"),
    ),
    Option(program="find", reason="find writes the file -fls names", exact=("-fls",)),
    Option(
        program="tar",
        reason="tar runs the program these options name",
        long=("--to-command", "--checkpoint-action", "--use-compress-program", "--rsh-command"),
        short="IF",
        exact=("--info-script…", "--new-volume-script…", "--rmt-command…"),
    ),
    Option(
        program="rsync",
        reason="rsync runs the remote shell or rsync program these options name",
        long=("--rsh", "--rsync-path"),
        short="e",
    ),
    Option(
        program="zip",
        reason="zip -TT runs the test command it names",
        long=("--unzip-command",),
        short="TT",
    ),
    Option(
        program="less",
        reason="less writes the log file -o names and runs the commands a +option gives",
        long=("--log-file", "--LOG-FILE"),
        short="oO",
        exact=("+…",),
    ),
    Option(
        program="man",
        reason="man runs the pager or browser these options name",
        long=("--pager", "--html", "--browser", "--config-file"),
        short="PHC",
    ),
    Option(
        program="curl",
        reason="curl writes the files these options name (-o, -O, --dump-header, --cookie-jar)",
        long=(
            *("--output", "--remote-name", "--remote-name-all", "--output-dir", "--dump-header"),
            *("--cookie-jar", "--trace", "--trace-ascii", "--libcurl", "--config", "--stderr"),
            *("--etag-save", "--hsts", "--alt-svc"),
        ),
        short="oODcK",
    ),
    Option(
        program="wget",
        reason="wget writes the files these options name and runs --use-askpass",
        long=(
            *("--output-document", "--output-file", "--append-output", "--directory-prefix"),
            *("--use-askpass", "--execute", "--config", "--save-cookies", "--warc-file"),
        ),
        short="OoaPe",
    ),
    Option(
        program="sdiff",
        reason="sdiff writes the file -o names and runs the --diff-program",
        long=("--output", "--diff-program"),
        short="o",
    ),
    Option(
        program="pytest",
        reason="pytest writes where these options say (--basetemp is emptied first) or reads "
        "settings from elsewhere",
        long=(
            *("--basetemp", "--junitxml", "--junit-xml", "--result-log", "--resultlog"),
            *("--report-log", "--debug", "--log-file", "--override-ini", "--rootdir"),
            *("--config-file", "--inifile"),
        ),
        short="oc",
        abbrev=False,
    ),
    Option(
        program="mapfile",
        reason="mapfile runs the callback -C names",
        short="C",
    ),
    Option(program="readarray", reason="readarray runs the callback -C names", short="C"),
    Option(program="history", reason="history -w/-a writes the file it names", short="wa"),
)
"""Options that write a file or run a program; they ask under any pattern."""

_BY_PROGRAM: dict[str, list[Option]] = {}
for _o in OPTIONS:
    _BY_PROGRAM.setdefault(_o.program, []).append(_o)
_ALIASES = {"py.test": "pytest", "gsed": "sed", "gtar": "tar", "bsdtar": "tar", "more": "less"}
_VERSION = re.compile(r"[-.\d]+$")
_GIT_ARG_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"})


def program(name: str) -> str:
    """The table name of a program: its basename without a version suffix (``python3.12`` and
    ``/usr/bin/python3`` are ``python``), unless the table knows the whole name (``linux32``)."""
    base = os.path.basename(name) or name
    if base in RUNNERS or base in _BY_PROGRAM or base in EVALUATORS:
        return base
    if base in _ALIASES:
        return _ALIASES[base]
    bare = _VERSION.sub("", base)
    return _ALIASES.get(bare, bare) if bare else base


def runner(name: str | None) -> str | None:
    """Why the program `name` runs other programs, or None when it is not a known runner."""
    if name is None:
        return None
    return RUNNERS.get(program(name))


def refusal(argv: Sequence[str]) -> str | None:
    """Why the simple command `argv` (program and arguments, after quote removal) must ask
    whatever the pattern: an option of `OPTIONS` or a word a builtin of `EVALUATORS` would run."""
    if not argv:
        return None
    name = program(argv[0])
    args = list(argv[1:])
    why = EVALUATORS.get(name)
    if why is not None:
        if name == "let":
            return why
        gate = _ONLY_AFTER.get(name)
        gated = gate is None or any(a.startswith(gate) for a in args)
        if gated and any(ch in a for a in args for ch in _CODE):
            return why
    for option in _BY_PROGRAM.get(name, ()):
        if _hits(option, _section(option, name, args)):
            return option.reason
    return None


def _section(option: Option, name: str, args: list[str]) -> list[str] | None:
    """The words `option` applies to: for git, those before or after the subcommand."""
    if name != "git":
        return None if option.subcommands else args
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GIT_ARG_OPTIONS else 1
    if not option.subcommands:
        return args[:i]
    if i < len(args) and args[i] in option.subcommands:
        return args[i:]
    return None


def _hits(option: Option, words: list[str] | None) -> bool:
    if words is None:
        return False
    if option.whole:
        return True
    for w in words:
        if w.startswith("--") and len(w) > 2:
            typed = w[2:].split("=", 1)[0]
            if any(
                o[2:] == typed or (option.abbrev and o[2:].startswith(typed)) for o in option.long
            ):
                return True
        elif (
            w.startswith("-")
            and len(w) > 1
            and any(letter in w[1:] for letter in _letters(option.short))
        ):
            return True
        for e in option.exact:
            if (e.endswith("…") and w.startswith(e[:-1])) or w == e:
                return True
    return False


def _letters(short: str) -> tuple[str, ...]:
    # "TT" is one option (zip -TT); otherwise each letter is an option of its own.
    if not short:
        return ()
    return (short,) if len(set(short)) == 1 and len(short) > 1 else tuple(short)


__all__ = ["EVALUATORS", "OPTIONS", "RUNNERS", "Option", "program", "refusal", "runner"]
