"""Config files under the run commands' options: what a flag did not say, the files fill in."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from bubu.cli.term import printable

if TYPE_CHECKING:  # `bubu show` and `status` share a module with the options; only runs resolve
    from bubu.settings import Source


def _flag_name(p: click.Parameter) -> str:
    names = [o for o in getattr(p, "opts", []) if o.startswith("--")]
    return names[0] if names else str(p.name)


def _plain(value: object) -> object:
    """A default as JSON can show it (click's own markers for "no default" are None)."""
    if isinstance(value, tuple):
        return list(value)
    return value if isinstance(value, str | int | float | bool | list) else None


def defaults_of(params: list[click.Parameter]) -> dict[str, object]:
    """Every option's default, as `bubu config` shows it."""
    from bubu.tools.sandbox import DEFAULT_MODE

    out = {str(p.name): _plain(p.default) for p in params}
    from bubu.notify import DEFAULT_TIMEOUT_S

    fallback: dict[str, object] = {"sandbox": DEFAULT_MODE, "yes": False, "network": False}
    fallback["notify_timeout"] = DEFAULT_TIMEOUT_S
    for name, value in fallback.items():
        if out.get(name) is None:
            out[name] = value
    return out


def _given(
    ctx: click.Context, opts: dict[str, Any]
) -> tuple[dict[str, tuple[object, Source, str | None]], dict[str, object]]:
    """The options the command line (or a flag's own variable) set, and every option's default."""
    given: dict[str, tuple[object, Source, str | None]] = {}
    defaults = defaults_of(ctx.command.params)
    for p in ctx.command.params:
        assert p.name is not None  # every option of the run commands is named
        src = ctx.get_parameter_source(p.name)
        if p.name not in opts:
            continue
        if src is ParameterSource.COMMANDLINE:
            given[p.name] = (opts[p.name], "flag", _flag_name(p))
        elif src is ParameterSource.ENVIRONMENT:
            envvar = p.envvar if isinstance(p.envvar, str) else None
            given[p.name] = (opts[p.name], "env", envvar)
    return given, defaults


def settle(opts: dict[str, Any], workspace: str | None) -> dict[str, Any]:
    """`opts` with the config files' values filled in where no flag or variable gave one.

    The model lands in `configured_model` (a continued session keeps its own unless `-m`);
    `settings` holds the whole resolution. A bad file raises ConfigError before anything runs.
    """
    from bubu.settings import BY_NAME, resolve

    ctx = click.get_current_context()
    out = dict(opts)
    profile = out.pop("profile", None)
    src = ctx.get_parameter_source("profile")
    given, defaults = _given(ctx, opts)
    repeatable = {p.name for p in ctx.command.params if getattr(p, "multiple", False)}
    settings = resolve(
        workspace=workspace,
        flags=given,
        defaults=defaults,
        profile=profile,
        profile_source="env" if src is ParameterSource.ENVIRONMENT else "flag",
    )
    for name, s in settings.values.items():
        option = BY_NAME[name].option
        if option == "model":
            out["configured_model"] = s.value if s.source != "flag" else None
        elif s.source not in ("flag", "default") or (BY_NAME[name].merge and s.value):
            # (A list every layer adds to holds the flag's values and the files'.)
            # A repeatable flag gives a tuple; a file's list stands in for it the same way.
            out[option] = (
                tuple(s.value) if isinstance(s.value, list) and option in repeatable else s.value
            )
        elif option not in out:
            out[option] = s.value
    out["settings"] = settings
    out.setdefault("workspace_dir", workspace)  # where the host looks for skills
    global _unsaid
    from bubu.settings import ignored_line

    _unsaid = ignored_line(settings)
    return out


_unsaid: str | None = None
"""The line about ignored workspace keys, until the run's header has said it (once)."""


def unsaid() -> str | None:
    """The line about ignored workspace keys, if the header has not said it yet."""
    return _unsaid


def announce(say: Callable[[str], object] | None = None) -> None:
    """Say, once, under the run's header, which workspace keys were ignored (with `say`, else
    on stderr, where a script's output is not disturbed)."""
    global _unsaid
    line, _unsaid = _unsaid, None
    if line is None:
        return
    if say is not None:
        say(printable(line))
    else:
        click.echo(f"bubu: {printable(line)}", err=True)


def profile_option(f: Any) -> Any:
    """`-p NAME` / BUBU_PROFILE: a `[profiles.NAME]` table of the config files."""
    return click.option(
        "-p",
        "--profile",
        default=None,
        envvar="BUBU_PROFILE",
        metavar="NAME",
        help="Use the [profiles.NAME] table of the config files.",
    )(f)
