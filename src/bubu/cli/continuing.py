"""The settings of another run of an existing session: its chained facts and its recorded settings.

A session's workspace and model come from its chain (`bubu.engine.scope.acting_info`), and its
provider settings from its latest turn (`bubu.engine.settings`); a flag the user gave on the
command line (or through its environment variable) changes that one setting, nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from bubu.cli.settling import settle, unsaid
from bubu.engine.scope import acting_info
from bubu.engine.settings import continuing_opts, imported_server, last_turn
from bubu.errors import ConfigError
from bubu.log.store import SessionInfo, Store
from bubu.modelchoice import default_model


def explicit_flags() -> set[str]:
    """The options of the running command that the user gave (not defaults)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return set()
    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    return {name for name in ctx.params if ctx.get_parameter_source(name) in given}


def continuing_opts_of(
    store: Store, info: SessionInfo, opts: dict[str, Any], *, new_turn: bool = False
) -> tuple[dict[str, Any], SessionInfo, str]:
    """The options of another run of `info` (a `new_turn`, or the continuation of its latest
    one), the session as its chain records it, and the model spec (`agentcmds.continuing_host`
    builds the host from them)."""
    acting, facts = acting_info(store, info)
    if not Path(acting.workspace).is_dir():
        raise ConfigError(
            f"the workspace {acting.workspace} of session {acting.id} is not a directory on this "
            "machine; restore it to continue the session"
        )
    # The config files fill in what no flag gave; the turn's recorded settings still win over
    # them below (only a flag changes a recorded setting).
    opts = settle(opts, acting.workspace)
    note = last_turn(store, acting.id)
    explicit = explicit_flags()
    if facts.origin == "import" and "base_url" not in explicit:
        imported_server(note, acting.id)
    merged = continuing_opts(opts, explicit, note, new_turn=new_turn)
    configured = opts.get("configured_model")
    model = merged.get("model") or acting.model or default_model(configured, unsaid=unsaid())
    return merged, acting, model


def recover_line(info: SessionInfo, origin: str | None) -> str:
    """The line that opens a recovery: which session, in which workspace, and where it came
    from when it was imported or forked (the user is continuing it explicitly)."""
    came = f" ({origin})" if origin else ""
    from bubu.cli.term import one_line

    return f"recovering {info.id}{came} in {info.workspace}: {one_line(info.title, 60)}"


__all__ = ["continuing_opts_of", "explicit_flags", "recover_line"]
