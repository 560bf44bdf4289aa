"""Who may run what: reads and writes inside the workspace are allowed, commands ask unless
allow-listed or `--yes`, anything outside the workspace asks, and a write to a protected path
asks a person whatever the flags say. The asking is the host's job.

An allow-list pattern approves one *simple command*, never a whole line: the line is parsed
(`bubu.engine.commandline`) and each of its simple commands must match a pattern on its own,
every file it redirects output to must lie inside the workspace (``/dev/null`` is fine) and not
be protected, and nothing may run that the parse does not show (substitutions, here-documents
that expand, constructs it does not judge); otherwise the whole line asks. A pattern that is
character for character the whole line also approves it, as the user wrote it out.

An approved line's words are plain: nothing in them is expanded (``$HOME``, ``*.py``, ``~``,
``{a,b}`` make the line ask). A wildcard cannot reach past the program it names: a command that
starts with an assignment (``FOO=1 pytest``) or whose program runs other programs (``bash -c``,
``env``, ``prlimit``, ``python``, ``npx`` …, see `bubu.engine.runners.RUNNERS`) is approved only
by a pattern whose first word is that same word, written out (``--allow 'env *'``). An option
that writes a file or runs a program (``git diff --output=F``, ``find -exec``), or a word a bash
builtin would evaluate (``printf -v 'a[$(…)]'``), asks under any pattern (`runners.refusal`).

A deny rule (``--deny``, ``deny = [...]``) refuses without asking, before the allow-list is
looked at, and whatever the sandbox, ``--yes`` or a hook say: a command pattern is matched with
the same parser against the whole line and each of its simple commands (a program named by its
path counts by its name, ``/bin/rm`` as ``rm``); when the line runs other programs (``bash -c``,
``xargs``, ``env`` …) or holds what the parser does not judge, it is refused if the program a
rule names appears among its words. A rule ``path:GLOB`` refuses a file tool whose path, relative
to the workspace or absolute, matches GLOB (a GLOB without ``/`` matches the file's name in any
directory).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from bubu.engine import commandline, runners
from bubu.events import PermissionRequest, SandboxMode
from bubu.toolfacts import COMMAND_SUMMARY, facts_of
from bubu.tools.kinds import kind_reason
from bubu.tools.places import place_reason
from bubu.tools.protected import protected_reason
from bubu.tools.sandbox import Options

Answer = Literal["allow", "deny"]
Asker = Callable[[PermissionRequest], Answer | None]
"""Asks a person; returns None when nobody can answer (no TTY, no UI)."""

WRAPPERS = frozenset(runners.RUNNERS)
"""Programs that run another program named in their arguments; a wildcard never approves them."""

_CWD_CHANGERS = frozenset({"cd", "pushd", "popd"})
_DEVICES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})


def nobody(_: PermissionRequest) -> Answer | None:
    """The asker of a non-interactive host: nobody can answer."""
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """Whether the allow-list approves a command, and if not, which part it does not cover."""

    allowed: bool
    why: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """The permission policy of a run."""

    yes: bool = False
    allow_commands: tuple[str, ...] = ()
    sandbox: SandboxMode | None = None
    """The sandbox mode chosen for commands (None: the turn's recorded one, else the default)."""
    network: bool = False
    sandboxed: bool = False
    """Whether commands really run confined (the mode is not off and bubblewrap works here)."""
    pass_env: tuple[str, ...] = ()
    """Secret environment variables passed on to commands by name (``--env``)."""
    box: Options = field(default_factory=Options)
    """The sandbox's sockets, SSH agent and limits (``--allow-socket``, ``--ssh-agent``,
    ``--max-procs`` …)."""
    allow_write: tuple[str, ...] = ()
    """Absolute paths outside the workspace the file tools may write without asking
    (``--allow-write``): a file, or a directory and what is below it."""
    web_domains: tuple[str, ...] = ()
    """Domains web_fetch may fetch without the network permission (``web_domains``)."""
    deny: tuple[str, ...] = ()
    """Deny rules: command patterns, and ``path:GLOB`` for the file tools (see the module)."""

    def denied_by(
        self, tool: str, args: Mapping[str, object], *, cwd: str | None = None
    ) -> str | None:
        """The first deny rule that refuses this call, or None."""
        return deny_rule(self.deny, tool, args, cwd=cwd)

    def allowed_without_asking(
        self, tool: str, command: str | None, *, cwd: str | None = None
    ) -> bool:
        """True when a call that needs permission is pre-approved by an allow-list pattern."""
        if facts_of(tool).command is None or command is None:
            return False
        return self.check_command(command, cwd=cwd).allowed

    def check_command(self, command: str, *, cwd: str | None = None) -> Verdict:
        """Judge a command line against the allow-list; `cwd` is the workspace it runs in
        (without one, only redirections to ``/dev/null`` pass)."""
        if self.sandboxed:  # confined by the operating system: nothing to approve
            return Verdict(allowed=True)
        patterns = tuple(p.strip() for p in self.allow_commands if p.strip())
        if not patterns:
            return Verdict(allowed=False)
        # Only blanks are trimmed: bash reads a carriage return or a form feed as part of a word.
        if command.strip(" \t\n") in patterns:
            return Verdict(allowed=True)  # the user wrote out this very line
        if shutil.which("bash") is None:
            # run_command falls back to /bin/sh, whose grammar is not the one parsed here.
            return Verdict(allowed=False, why="there is no bash to parse the line for")
        line = commandline.parse(command)
        if line.refusal is not None:
            return Verdict(allowed=False, why=f"the allow-list does not judge it: {line.refusal}")
        if not line.commands:
            return Verdict(allowed=False, why="there is no command in it")
        if line.expands is not None:
            plain = f"the shell expands `{line.expands}`, and a pattern approves only plain words"
            return Verdict(allowed=False, why=plain)
        for c in line.commands:
            if not any(_approves(p, c) for p in patterns):
                return Verdict(allowed=False, why=f"`{c.text}` {_unmatched(c)}")
            risky = runners.refusal(c.argv)
            if risky is not None:
                return Verdict(allowed=False, why=f"`{c.text}` asks under any pattern: {risky}")
        moved = any(c.name in _CWD_CHANGERS for c in line.commands)
        for w in line.writes:
            why = _write_problem(w, cwd, moved)
            if why is not None:
                return Verdict(allowed=False, why=f"its output `{w.source}` {why}")
        return Verdict(allowed=True)


PATH_RULE = "path:"
"""The prefix of a deny rule that names paths rather than commands."""


def deny_rule(
    rules: Iterable[str], tool: str, args: Mapping[str, object], *, cwd: str | None = None
) -> str | None:
    """The first of `rules` that refuses a call of `tool` with `args`, or None."""
    rules = [r.strip() for r in rules if r.strip()]
    if not rules:
        return None
    command = args.get("command") if tool == "run_command" else None
    if isinstance(command, str):
        commands = [r for r in rules if not r.startswith(PATH_RULE)]
        line = commandline.parse(command) if commands else None
        for rule in commands:
            if line is not None and _denies_command(rule, command, line):
                return rule
    path = args.get("path")
    if isinstance(path, str) and tool != "run_command":
        for rule in rules:
            if rule.startswith(PATH_RULE) and _denies_path(rule[len(PATH_RULE) :], path, cwd):
                return rule
    return None


def _denies_command(rule: str, command: str, line: commandline.CommandLine) -> bool:
    if fnmatch.fnmatchcase(command.strip(" \t\n"), rule):
        return True
    program = _first_word(rule)
    for c in line.commands:
        if fnmatch.fnmatchcase(c.text, rule):
            return True
        if c.name is not None and "/" in c.name:
            named = os.path.basename(c.name) + c.text[c.text.find(c.name) + len(c.name) :]
            if fnmatch.fnmatchcase(named, rule):
                return True
        runs_others = c.name is None or runners.runner(c.name) is not None
        if runs_others and _names(program, c.text):
            return True  # the program may run under another: refused by its name alone
    if line.refusal is not None or line.expands is not None:
        return _names(program, command)
    return False


def _names(program: str, text: str) -> bool:
    """Whether `program` appears as a word (or a path's last part) of `text`."""
    if not program or any(ch in program for ch in "*?["):
        return False
    words = text.replace(";", " ").replace("|", " ").replace("&", " ").replace("(", " ")
    words = words.replace(")", " ").replace("`", " ").replace('"', " ").replace("'", " ")
    return any(os.path.basename(w) == program for w in words.split())


def _denies_path(glob: str, path: str, cwd: str | None) -> bool:
    candidates = {path, os.path.normpath(path)}
    if cwd is not None:
        root = os.path.realpath(cwd)
        full = os.path.normpath(os.path.join(root, path))
        candidates.add(full)
        if full == root or full.startswith(root.rstrip(os.sep) + os.sep):
            candidates.add(os.path.relpath(full, root))
    glob = os.path.expanduser(glob)
    return any(
        fnmatch.fnmatchcase(c, glob)
        or ("/" not in glob and fnmatch.fnmatchcase(os.path.basename(c), glob))
        for c in candidates
    )


def _first_word(text: str) -> str:
    return text.split(maxsplit=1)[0] if text.split() else ""


def _approves(pattern: str, c: commandline.SimpleCommand) -> bool:
    if c.name is None and not c.assigns:
        return False  # the program is an expansion or a glob: nobody knows what runs
    if not fnmatch.fnmatchcase(c.text, pattern):
        return False
    if c.assigns or runners.runner(c.name) is not None:
        return _first_word(pattern) == _first_word(c.text)
    return True


def _unmatched(c: commandline.SimpleCommand) -> str:
    if c.name is None and not c.assigns:
        return "runs a program named by an expansion or a glob; no pattern approves it"
    if c.assigns:
        return "sets variables for the program; only a pattern that starts with them approves it"
    why = runners.runner(c.name)
    if why is not None:
        return (
            f"runs other programs through {c.name} ({why}); only a pattern that starts with "
            f"{_first_word(c.text)} approves it"
        )
    return "matches no --allow pattern"


def _write_problem(w: commandline.Write, cwd: str | None, moved: bool) -> str | None:
    if w.path is None:
        return "is not a plain path"
    if w.path in _DEVICES:
        return None
    if cwd is None:
        return "goes to a file"
    if not os.path.isabs(w.path) and moved:
        return "is relative to a directory the line changes to"
    root = os.path.realpath(cwd)
    target = os.path.realpath(os.path.join(root, w.path))
    if target != root and not target.startswith(root.rstrip(os.sep) + os.sep):
        return f"goes outside the workspace ({target})"
    protected = (
        protected_reason(os.path.relpath(target, root))
        or protected_reason(os.path.normpath(w.path))
        or kind_reason(target, stop=root)
        or place_reason(target, root=root)
    )
    return None if protected is None else f"goes to a protected file ({protected})"


# ---- showing a command to a person --------------------------------------------------------------

NEWLINE_MARK = "⏎"


def show_command(command: str) -> list[str]:
    """The lines of a command as a person must see them before approving it: each line apart,
    a ⏎ where a newline was, and invisible characters shown as symbols (a carriage return as
    ␍, an escape as ␛, a bidi control as ⟨U+202E⟩), so nothing can hide part of a line."""
    lines = command.split("\n")
    shown = [_visible(line) for line in lines]
    return [s + NEWLINE_MARK for s in shown[:-1]] + shown[-1:]


def _visible(line: str) -> str:
    out: list[str] = []
    for ch in line:
        cat = unicodedata.category(ch)
        if ch == "\t":
            out.append(ch)
        elif ord(ch) < 0x20:
            out.append(chr(0x2400 + ord(ch)))  # the Unicode control pictures: ␍ ␛ …
        elif ch == "\x7f":
            out.append("␡")
        elif cat in ("Cc", "Cf", "Cs", "Zl", "Zp") or (ch.isspace() and ch != " "):
            out.append(f"⟨U+{ord(ch):04X}⟩")
        else:
            out.append(ch)
    return "".join(out)


def visible_line(text: str) -> str:
    """Text shown on one line, newlines marked ⏎ and invisible characters shown."""
    return "".join(show_command(text))


def asked_command(request: PermissionRequest) -> str | None:
    """The exact command a command tool's request asks about (its summary is ``run `COMMAND` ``,
    `bubu.toolfacts.COMMAND_SUMMARY`)."""
    s = request.summary
    head, _, tail = COMMAND_SUMMARY.partition("{command}")
    if facts_of(request.tool).command is None or not (s.startswith(head) and s.endswith(tail)):
        return None
    return s[len(head) : len(s) - len(tail)]
