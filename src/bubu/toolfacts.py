"""What a tool says about itself to the views and the permission check: which argument names a
call (its headline), whether it runs a shell command line (judged by the allow-list), and how one
call and one result read on one line.

A tool declares them where it is defined (``@tool(..., facts=ToolFacts(headline="pattern"))``,
`bubu.tools.decorator`), which records them here by the tool's name; every view (the terminal,
`bubu show`, recovery notices, the web UI) and the engine ask `facts_of(name)`. A tool that
declares nothing gets `ToolFacts()`: its headline is the first of `DEFAULT_HEADLINES` that the
call has, it runs no command, and the views summarize it as they do any call. This module is
pure: projections use it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import msgspec

DEFAULT_HEADLINES = ("command", "pattern", "path", "handle", "key", "task", "child", "url", "query")
"""The arguments that name a call of a tool that declares no headline, first found first."""

COMMAND_SUMMARY = "run `{command}`"
"""How a command's permission request is summarized (`bubu.engine.permissions.asked_command`
reads the command back from it)."""


class ToolFacts(msgspec.Struct, frozen=True, kw_only=True):
    """A tool's presentation and permission facts (see the module docstring).

    `headline` is the argument that names a call (e.g. grep's `pattern`); `command` the argument
    that holds a shell command line, which makes the tool a command for the permission check;
    `summary(args)` the one line a permission request shows (default: the command, else the
    tool and its path); `result(text, is_error)` the one line a result is shown as (default:
    the view's own summary of its first and last lines)."""

    headline: str | None = None
    command: str | None = None
    summary: Callable[[Mapping[str, object]], str] | None = None
    result: Callable[[str, bool], str] | None = None

    def headline_of(self, args: Mapping[str, object]) -> object | None:
        """The value that names a call with `args`: the declared headline when the call has it,
        else the first of `DEFAULT_HEADLINES` it has."""
        if self.headline is not None and args.get(self.headline) is not None:
            return args[self.headline]
        for name in DEFAULT_HEADLINES:
            if args.get(name):
                return args[name]
        return None

    def command_of(self, args: Mapping[str, object]) -> str | None:
        """The command line a call runs, for a command tool (else None)."""
        if self.command is None:
            return None
        value = args.get(self.command)
        return value if isinstance(value, str) else None

    def call_summary(self, name: str, args: Mapping[str, object]) -> str:
        """The one line a permission request for this call shows."""
        if self.summary is not None:
            return self.summary(args)
        if self.command is not None:
            return COMMAND_SUMMARY.format(command=args.get(self.command))
        path = args.get("path")
        return f"{name} {path}" if path is not None else name


NO_FACTS = ToolFacts()
"""The facts of a tool that declares none."""

_DECLARED: dict[str, ToolFacts] = {}


def declare(name: str, facts: ToolFacts) -> None:
    """Record the facts the tool `name` declares (a later declaration of the name replaces it)."""
    _DECLARED[name] = facts


def facts_of(name: str) -> ToolFacts:
    """The facts the tool `name` declared, else `NO_FACTS`."""
    return _DECLARED.get(name, NO_FACTS)


def declared() -> dict[str, ToolFacts]:
    """Every declaration so far, by tool name."""
    return dict(_DECLARED)


__all__ = [
    "COMMAND_SUMMARY",
    "DEFAULT_HEADLINES",
    "NO_FACTS",
    "ToolFacts",
    "declare",
    "declared",
    "facts_of",
]
