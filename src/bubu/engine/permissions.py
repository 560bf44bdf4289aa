"""Who may run what: reads and writes inside the workspace are allowed, commands ask unless
allow-listed or `--yes`, anything outside the workspace asks. The asking is the host's job."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from bubu.events import PermissionRequest, SandboxMode

Answer = Literal["allow", "deny"]
Asker = Callable[[PermissionRequest], Answer | None]
"""Asks a person; returns None when nobody can answer (no TTY, no UI)."""


def nobody(_: PermissionRequest) -> Answer | None:
    """The asker of a non-interactive host: nobody can answer."""
    return None


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

    def allowed_without_asking(self, tool: str, command: str | None) -> bool:
        """True when a call that needs permission is pre-approved by an allow-list pattern."""
        if tool != "run_command" or command is None:
            return False
        if self.sandboxed:  # confined by the operating system: nothing to approve
            return True
        cmd = command.strip()
        return any(fnmatch.fnmatchcase(cmd, pat) or cmd == pat for pat in self.allow_commands)
