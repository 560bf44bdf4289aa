"""A fleet worker's policy ceiling: the most a queued task may ask of the worker that runs it.

Whoever can submit to the fleet's log chooses a task's policy, and a worker runs it unattended on
its own machine with its own secrets. So a worker never takes the submitter's word for the
loosening options (`--sandbox`, `--yes`, `--network`, `--allow`, `--env`, `--allow-socket`,
`--ssh-agent`, and a `--base-url` that would receive the worker's API key): each must fit under the
worker's ceiling (`bubu worker --max-sandbox … --allow-yes …`), and a task that asks for more is
held, in the log, until a person approves it with `bubu approve-task`. A task's sandbox limits are
not judged here: the worker clamps them to its own (`bubu.tools.sandbox.turn_options`). The check is
pure; the worker does the I/O (DESIGN §7).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from bubu.events import Record, SandboxMode, SystemNote, TaskApproved, TaskHeld

STRICTNESS: dict[SandboxMode, int] = {"off": 0, "workspace-write": 1, "read-only": 2}
"""Sandbox modes from the loosest to the strictest."""

DEFAULT_MAX_SANDBOX: SandboxMode = "workspace-write"
"""The loosest sandbox a worker runs a task in unless told otherwise."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ceiling:
    """What a worker lets a queued task ask for; the default lets it loosen nothing."""

    max_sandbox: SandboxMode = DEFAULT_MAX_SANDBOX
    """The loosest sandbox mode the worker runs a task in."""
    allow_yes: bool = False
    """Whether a task's `--yes` (approve every permission request) is honoured."""
    allow_network: bool = False
    """Whether a task's sandboxed commands may use the network."""
    allow_patterns: bool = False
    """Whether a task's `--allow` patterns approve commands that run unconfined."""
    allow_env: frozenset[str] = frozenset()
    """The worker's secret variables a task may have passed on to its commands (`--env`)."""
    allow_sockets: frozenset[str] = frozenset()
    """The host Unix sockets (exact paths) a task's sandboxed commands may reach."""
    allow_ssh_agent: bool = False
    """Whether a task's sandboxed commands may use the worker's SSH agent."""
    allow_base_urls: frozenset[str] = frozenset()
    """Model servers other than the vendors' own APIs that a task may name (the worker sends
    its API key to the server a task's model is called at)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Asked:
    """The loosening options of a queued task's policy, as the ceiling reads them."""

    sandbox: SandboxMode
    yes: bool = False
    network: bool = False
    allow_commands: Sequence[str] = ()
    pass_env: Sequence[str] = ()
    allow_sockets: Sequence[str] = ()
    ssh_agent: bool = False
    base_url: str | None = None
    """The model server the task names (None: the worker's own choice)."""


def same_server(url: str) -> str:
    """`url` as servers are compared: no trailing slash, the scheme and host in lower case."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url.strip())
    return urlunsplit(
        (parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), parts.query, "")
    )


def _foreign(url: str | None) -> bool:
    """Whether `url` names a server other than a vendor's own API (where the key belongs)."""
    from urllib.parse import urlsplit

    from bubu.providerfacts import OFFICIAL_HOSTS

    if not url:
        return False
    parts = urlsplit(url.strip())
    return not (parts.scheme == "https" and (parts.hostname or "") in OFFICIAL_HOSTS)


def excess(ceiling: Ceiling, asked: Asked, *, sandbox_works: bool = True) -> tuple[str, ...]:
    """Why `asked` does not fit under `ceiling`, one reason per loosening (empty: it fits).

    `sandbox_works` is False where bubblewrap cannot run on the worker: every command then runs
    unconfined, so a task's allow patterns approve unconfined commands whatever mode it asked for.
    """
    reasons: list[str] = []
    if STRICTNESS[asked.sandbox] < STRICTNESS[ceiling.max_sandbox]:
        reasons.append(
            f"it asks for --sandbox {asked.sandbox}, looser than this worker's "
            f"--max-sandbox {ceiling.max_sandbox}"
        )
    if asked.yes and not ceiling.allow_yes:
        reasons.append("it asks for --yes, which this worker does not allow (--allow-yes)")
    if asked.network and not ceiling.allow_network and asked.sandbox != "off":
        reasons.append("it asks for --network, which this worker does not allow (--allow-network)")
    unconfined = asked.sandbox == "off" or not sandbox_works
    if asked.allow_commands and unconfined and not ceiling.allow_patterns:
        shown = ", ".join(repr(p) for p in asked.allow_commands)
        reasons.append(
            f"its --allow patterns ({shown}) approve unconfined commands, which this worker does "
            "not allow (--allow-patterns)"
        )
    extra = [n for n in asked.pass_env if n not in ceiling.allow_env]
    if extra:
        reasons.append(
            f"it asks for the worker's secret variables {', '.join(extra)}, which this worker "
            "does not pass on (--allow-env NAME)"
        )
    confined = asked.sandbox != "off"  # unconfined, every socket is reachable anyway
    sockets = [p for p in asked.allow_sockets if p not in ceiling.allow_sockets]
    if sockets and confined:
        reasons.append(
            f"it asks to reach the host sockets {', '.join(sockets)}, which this worker does not "
            "allow (--allow-socket PATH)"
        )
    if asked.ssh_agent and confined and not ceiling.allow_ssh_agent:
        reasons.append(
            "it asks for --ssh-agent, which this worker does not allow (--allow-ssh-agent)"
        )
    allowed = {same_server(u) for u in ceiling.allow_base_urls}
    if _foreign(asked.base_url) and same_server(asked.base_url or "") not in allowed:
        reasons.append(
            f"its model is called at {asked.base_url}, where this worker would send its API key, "
            "and this worker does not allow that server (--allow-base-url URL)"
        )
    return tuple(reasons)


HoldState = Literal["none", "held", "approved"]
"""Where a queued request stands with the worker's ceiling, as far as the log says."""


def hold_state(
    records: Iterable[Record], request_seq: int, vouched: frozenset[int] | None = None
) -> HoldState:
    """Whether the request at `request_seq` was held by a worker, and approved since; with
    `vouched`, only approvals at those seqs count (those the database vouches for)."""
    state: HoldState = "none"
    for r in records:
        c = r.event.content
        if not isinstance(c, SystemNote) or r.seq <= request_seq:
            continue
        n = c.note
        if isinstance(n, TaskHeld) and n.request_seq == request_seq and state == "none":
            state = "held"
        elif (
            isinstance(n, TaskApproved)
            and n.request_seq == request_seq
            and (vouched is None or r.seq in vouched)
        ):
            state = "approved"
    return state


def held_request(records: Sequence[Record]) -> TaskHeld | None:
    """The hold still in force on the session's latest request, or None (for `approve-task`)."""
    last: TaskHeld | None = None
    for r in records:
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, TaskHeld):
            last = c.note
        elif (
            isinstance(c, SystemNote)
            and isinstance(c.note, TaskApproved)
            and last is not None
            and c.note.request_seq == last.request_seq
        ):
            last = None
    return last


__all__ = [
    "DEFAULT_MAX_SANDBOX",
    "STRICTNESS",
    "Asked",
    "Ceiling",
    "HoldState",
    "excess",
    "held_request",
    "hold_state",
    "same_server",
]
