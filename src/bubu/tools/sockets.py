"""The host's Unix sockets, hidden from a sandboxed command unless the user names them.

A read-only filesystem does not stop ``connect()``: a command that can reach the PostgreSQL
socket, the Docker socket or the SSH agent acts outside the sandbox through it. So every
filesystem socket bound on the host (`/proc/net/unix` lists them with their paths) is covered
with ``/dev/null`` inside the sandbox, ``/run`` (where most live) is an empty tmpfs when the
network is off, and ``/tmp`` is private already. What the user names (``--allow-socket PATH``: a
socket, or a directory of them; the SSH agent's socket with ``--ssh-agent``) is left reachable,
or bound back where a tmpfs hides it. Abstract sockets (no path) belong to the network
namespace, which the sandbox unshares unless ``--network``.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Sequence

NET_UNIX = "/proc/net/unix"
RUN_DIRS = ("/run", "/var/run")
"""Where most host sockets live, covered with an empty tmpfs without the network (with it, DNS
reads its resolver files there); ``/var/run`` is usually a link to ``/run``, then left alone."""

AGENT_VAR = "SSH_AUTH_SOCK"


def bound_paths(table: str = NET_UNIX) -> set[str]:
    """The filesystem paths of the Unix sockets bound in this network namespace."""
    try:
        with open(table, "rb") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return set()
    out: set[str] = set()
    for line in lines:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith(b"/"):
            out.add(os.fsdecode(fields[7]))
    return out


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def allowed_paths(allow: Sequence[str], ssh_agent: bool, env: dict[str, str]) -> list[str]:
    """The real paths a command may reach: those named, and the agent's socket if asked for."""
    named = list(allow)
    if ssh_agent and env.get(AGENT_VAR):
        named.append(env[AGENT_VAR])
    return sorted({os.path.realpath(p) for p in named})


def mask_args(
    allowed: Iterable[str], masked_dirs: Sequence[str], visible: Sequence[str]
) -> list[str]:
    """bubblewrap arguments covering each host socket not allowed (and outside `masked_dirs`,
    which a tmpfs covers already, unless it lies in one of the `visible` paths bound back into
    them), then binding back allowed paths that a tmpfs hides."""
    allow = list(allowed)
    out: list[str] = []
    for raw in sorted(_candidates(bound_paths())):
        path = os.path.realpath(raw)
        if any(_under(path, a) for a in allow):
            continue
        hidden = any(_under(path, d) for d in masked_dirs)
        if hidden and not any(_under(path, v) for v in visible):
            continue
        try:
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                continue
        except OSError:
            continue
        out += ["--ro-bind", "/dev/null", path]
    for path in allow:
        if any(_under(path, d) for d in masked_dirs) and os.path.exists(path):
            out += ["--ro-bind", path, path]
    return out


def _candidates(bound: Iterable[str]) -> set[str]:
    """The bound paths and every socket in their directories: the table names the path a socket
    was bound at, and a server that binds a temporary name and renames it into place (or links
    it) leaves the socket under another name, usually beside it."""
    out = set(bound)
    for parent in {os.path.dirname(p) for p in out}:
        try:
            with os.scandir(parent) as listing:
                for e in listing:
                    with contextlib.suppress(OSError):
                        if stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode):
                            out.add(e.path)
        except OSError:
            continue
    return out


def maskable(dirs: Sequence[str], keep: Sequence[str]) -> list[str]:
    """Those of `dirs` that exist as real directories and hold none of `keep`, as written or
    resolved (a workspace, Bubu's interpreter, or PATH entries such as NixOS's
    ``/run/current-system/sw/bin`` must stay visible)."""
    out = []
    for d in dirs:
        if os.path.islink(d) or not os.path.isdir(d):
            continue
        if any(_under(k, d) or _under(os.path.realpath(k), d) for k in keep if k):
            continue
        out.append(d)
    return out


def check_allowed(path: str) -> str:
    """`path` as the user named it, refused in one sentence when there is nothing there."""
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(full):
        from bubu.errors import ConfigError

        raise ConfigError(
            f"--allow-socket {path}: there is no such socket or directory; name a Unix socket "
            "or the directory that holds it"
        )
    return full
