"""`/NAME ARGS` from a prompt file (`bubu.engine.extensions`), for `bubu chat` and `bubu run`.

The prompt is text the user chose to send, so a workspace's prompt file is offered whether or
not the workspace is trusted; what its front matter would choose for the turn (a model, command
patterns approved without asking) counts only for the user's own files and in a trusted
workspace, and is otherwise ignored and said so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bubu.engine.extensions import PromptFile, allow_patterns, expand, prompt_files
from bubu.errors import ConfigError

NAME = re.compile(r"^/([A-Za-z0-9][A-Za-z0-9_.:-]*)$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """What `/NAME ARGS` sends and how: the prompt, and the model and patterns that apply."""

    name: str
    prompt: str
    model: str = ""
    allow: tuple[str, ...] = ()
    ignored: str | None = None
    """Why the file's front matter was not applied (an untrusted workspace), to say once."""


def workspace_trusted(workspace: str) -> bool:
    """Whether the user trusts this workspace's config file as it is now."""
    from bubu.settings import trust_state, workspace_layer

    ws = workspace_layer(workspace)
    return ws is not None and trust_state(ws) == "trusted"


def command_name(text: str) -> str | None:
    """The NAME of a message ``/NAME ARGS`` (None when the first word is not one)."""
    first = text.strip().split(maxsplit=1)[0] if text.strip() else ""
    m = NAME.match(first)
    return m[1] if m else None


def prepare(p: PromptFile, arguments: str, *, trusted: bool) -> Prepared:
    """The prompt file `p` run with `arguments`."""
    prompt = expand(p, arguments)
    if not prompt.strip():
        raise ConfigError(f"the prompt file {p.path} has no text to send")
    applies = p.origin == "user" or trusted
    if p.chooses and not applies:
        why = (
            f"/{p.name}: {p.path} sets {', '.join(p.chooses)}, ignored: the workspace is not "
            "trusted (`bubu trust` if you wrote it); its text is sent as it is"
        )
        return Prepared(name=p.name, prompt=prompt, ignored=why)
    return Prepared(
        name=p.name, prompt=prompt, model=p.model, allow=tuple(allow_patterns(p.allowed_tools))
    )


def find(text: str, workspace: str) -> Prepared | None:
    """`text` as a prompt-file command run in `workspace`; None when it is not ``/NAME …``.
    A ``/NAME`` with no prompt file of that name is a ConfigError that lists those there are."""
    name = command_name(text)
    if name is None:
        return None
    files = prompt_files(workspace)
    p = files.get(name)
    if p is None:
        known = ", ".join(f"/{n}" for n in files) or "none"
        raise ConfigError(
            f"no prompt file for /{name} (.bubu/commands/{name}.md, .claude/commands/{name}.md "
            f"or $BUBU_HOME/commands/{name}.md); the prompt files here: {known}"
        )
    arguments = text.strip()[len(name) + 1 :]
    return prepare(p, arguments, trusted=workspace_trusted(workspace))


__all__ = ["Prepared", "command_name", "find", "prepare", "workspace_trusted"]
