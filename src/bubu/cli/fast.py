"""The read-only commands `sessions`, `status`, `show`, `log`, `verify` and `context` without
click, which costs a reader about a fifth of its start.

`run` reads the command line against a table of those commands' options (`TABLE`, which
tests/cli/test_fast.py holds equal to the click commands' parameters) and runs the command's
body (`bubu.cli.reading`, `bubu.cli.readviews`, `bubu.cli.contextview`: the one the click
command runs too) only when it understands every word: a known command, its arguments, its
options spelled out (`--after 3`, `--after=3`), `--db` before or after the command. Anything
else (help, a version, an unknown or repeated option, a missing or extra argument, a value it
would have to refuse, an empty word, `--`, shell completion, a stream click would rewrap) it
declines, and the whole command line goes through click unchanged, so every help page and every
error is click's own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, NoReturn


def _at_least_one(value: str) -> int:
    n = int(value)
    if n < 1:  # click's IntRange(min=1) refuses it, in words
        raise ValueError(value)
    return n


def _window(value: str) -> int:
    from bubu.windowfacts import MIN_CONTEXT_WINDOW

    n = int(value)
    if n < MIN_CONTEXT_WINDOW:  # `checks.context_window` refuses it, in words
        raise ValueError(value)
    return n


def _state(value: str) -> str:
    from bubu.cli.states import check_state

    shown = check_state(value)  # refuses what is no state: then click says so
    assert shown is not None
    return shown


class Spec:
    """A command's parameters as the fast path reads them, and the body that runs it."""

    __slots__ = ("arguments", "flags", "options", "run")

    def __init__(
        self,
        run: str,
        *,
        arguments: tuple[tuple[str, bool], ...] = (),
        flags: Mapping[str, tuple[str, bool]] | None = None,
        options: Mapping[str, tuple[str, Callable[[str], Any], object]] | None = None,
    ) -> None:
        self.run = run  # "module:function", called with the Ctx and the parameters
        self.arguments = arguments  # (parameter, required), in order
        self.flags = dict(flags or {})  # option -> (parameter, value given); False unless given
        self.options = dict(options or {})  # option -> (parameter, conversion, default)


TABLE = {
    "sessions": Spec(
        "bubu.cli.reading:sessions",
        flags={"--json": ("as_json", True)},
        options={"--status": ("status_filter", _state, None), "--search": ("text", str, None)},
    ),
    "log": Spec(
        "bubu.cli.reading:log",
        arguments=(("session", True),),
        flags={"--jsonl": ("jsonl", True)},
        options={"--after": ("after", int, 0)},
    ),
    "verify": Spec(
        "bubu.cli.reading:verify",
        arguments=(("session", False),),
        flags={"--json": ("as_json", True)},
    ),
    "status": Spec(
        "bubu.cli.readviews:status",
        arguments=(("session", True),),
        flags={"--json": ("as_json", True)},
    ),
    "show": Spec(
        "bubu.cli.readviews:show",
        arguments=(("session", True),),
        flags={
            "--json": ("as_json", True),
            "--thinking": ("thinking", True),
            "--no-thinking": ("thinking", False),
        },
        options={"--tail": ("tail", _at_least_one, None)},
    ),
    "context": Spec(
        "bubu.cli.contextview:context",
        arguments=(("session", True),),
        flags={"--json": ("as_json", True)},
        options={"--context-window": ("context_window", _window, None)},
    ),
}
"""Each command the fast path runs: its body, its arguments and its options as click declares
them (`bubu.cli.logcmds`, `bubu.cli.agentcmds`, `bubu.cli.contextcmd`)."""


def _ascii(stream: Any) -> bool:
    import codecs

    try:
        return codecs.lookup(stream.encoding or "ascii").name == "ascii"
    except (AttributeError, LookupError, TypeError):
        return True  # a stream click would look at more closely


def parse(argv: list[str]) -> tuple[str, dict[str, object], str | None] | None:
    """The command, its parameters and `--db` (None: as BUBU_DB or the default), or None when
    the command line is anything but a plain use of one of TABLE's commands."""
    db: str | None = None
    i = 0
    while i < len(argv) and argv[i].startswith("--db"):
        if db is not None:
            return None
        db, i = _value(argv, i, "--db")
        if db is None:
            return None
    if i >= len(argv) or argv[i] not in TABLE:
        return None
    name = argv[i]
    spec = TABLE[name]
    given: dict[str, object] = {}
    positional: list[str] = []
    i += 1
    while i < len(argv):
        word = argv[i]
        if not word or word == "-" or (word.startswith("-") and not word.startswith("--")):
            return None
        if not word.startswith("--"):
            positional.append(word)
            i += 1
            continue
        opt = word.split("=", 1)[0]
        if opt in spec.flags and "=" not in word:
            param, value = spec.flags[opt]
            i += 1
        elif opt in spec.options:
            convert: Callable[[str], Any]
            param, convert, _ = spec.options[opt]
            raw, i = _value(argv, i, opt)
            if raw is None:
                return None
            try:
                value = convert(raw)
            except Exception:  # broad: whatever the conversion refuses, click refuses in words
                return None
        elif opt == "--db" and db is None:
            db, i = _value(argv, i, opt)
            if db is None:
                return None
            continue
        else:
            return None
        if param in given:
            return None
        given[param] = value
    if len(positional) > len(spec.arguments):
        return None
    for n, (param, required) in enumerate(spec.arguments):
        if n < len(positional):
            given[param] = positional[n]
        elif required:
            return None
        else:
            given[param] = None
    for param, _ in spec.flags.values():
        given.setdefault(param, False)
    for param, _, default in spec.options.values():
        given.setdefault(param, default)
    return name, given, db


def _value(argv: list[str], i: int, opt: str) -> tuple[str | None, int]:
    """The value of the option at argv[i] (`--opt=V` or `--opt V`) and the index after it; None
    for a spelling the fast path leaves to click (a prefix of another name, an empty value, a
    value that looks like an option, none)."""
    word = argv[i]
    if word == opt:
        if i + 1 >= len(argv) or not argv[i + 1] or argv[i + 1].startswith("-"):
            return None, i + 1
        return argv[i + 1], i + 2
    if word.startswith(opt + "=") and len(word) > len(opt) + 1:
        return word[len(opt) + 1 :], i + 1
    return None, i + 1


class _Pacified:
    """A stream whose flush ignores a closed pipe, as click leaves stdout after one."""

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        import errno

        try:
            self.wrapped.flush()
        except OSError as e:
            if e.errno != errno.EPIPE:
                raise

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.wrapped, attr)


def run(argv: list[str]) -> bool:
    """Run `argv` if it is a plain use of one of TABLE's commands, exactly as click would have
    run it (the same exits, the same one-line errors); False, having done nothing, if not."""
    if "_BUBU_COMPLETE" in os.environ:  # shell completion is click's
        return False
    if sys.stdout is None or sys.stderr is None or _ascii(sys.stdout) or _ascii(sys.stderr):
        return False
    plan = parse(argv)
    if plan is None:
        return False
    import errno
    import gc
    import importlib

    # Without the cycle collector: what the imports make lives as long as the process, and a
    # reader's folds make no cycles (tests/cli/test_fast.py holds that flat in the session's
    # length), so each collection would only walk everything to free nothing.
    gc.disable()
    from bubu.cli.core import Ctx, echo, fail
    from bubu.errors import BubuError

    name, params, db = plan
    module, _, function = TABLE[name].run.partition(":")
    state = Ctx(db or os.environ.get("BUBU_DB") or None, readonly=True)
    try:
        try:
            try:
                getattr(importlib.import_module(module), function)(state, **params)
            finally:
                state.close()
        except (EOFError, KeyboardInterrupt):
            echo(err=True)  # click's blank line after the terminal's ^C
            echo("bubu: aborted", err=True)
            sys.exit(130)
        except OSError as e:  # click's handling of a closed pipe: quiet, and exit 1
            if e.errno != errno.EPIPE:
                raise
            sys.stdout = _Pacified(sys.stdout)
            sys.stderr = _Pacified(sys.stderr)
            sys.exit(1)
    except BubuError as e:
        fail(str(e), e.exit_code)
    return True


def leave(code: object) -> NoReturn:
    """End the process once a fast-path command is done, with the exit status `code` (as
    `sys.exit` takes it): what the interpreter's own exit would do that matters to anyone (the
    `atexit` handlers, the flushed output, the status) without tearing down every module and
    collecting every object, which costs a reader about a seventh of its CPU. When it cannot be
    sure that is all (another thread still runs, a status that is not a number) it exits the
    ordinary way."""
    threading = sys.modules.get("threading")
    if (threading is not None and threading.active_count() > 1) or not (
        code is None or isinstance(code, int)
    ):
        raise SystemExit(code)
    import atexit

    status = code if isinstance(code, int) else 0
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except OSError:  # a closed pipe (as `run` treats one: quiet, and exit 1)
            status = status or 1
    os._exit(status)
