"""The operating-system sandbox of commands: bubblewrap on Linux.

A confined command sees the whole filesystem read-only, a fresh ``/dev`` and ``/proc``, a private
``/tmp`` (``TMPDIR``), and the workspace at its real path — writable in ``workspace-write``,
read-only in ``read-only`` — except every ``.git``, ``.gitmodules`` and ``.bubu`` in it, at any
depth, which stay read-only because hooks and configuration there run code later, outside the
sandbox (`bubu.tools.controlfiles`). No host Unix socket is reachable unless the user names it
(`bubu.tools.sockets`), and the command runs under process, memory and file-size limits
(`bubu.tools.limits`). Every namespace is
unshared (the network too unless allowed), the command gets its own PID namespace, dies with its
runner, runs in a new terminal session so it cannot push keystrokes into the user's terminal, and
has no capabilities, so it cannot undo the mounts even when Bubu runs as root.

Whether bubblewrap works is probed once per process. Where it does not (macOS, a container without
user namespaces), `confinement` says so once on stderr and returns None: the caller then asks for
each command as it would with ``--sandbox off``; a command never runs unconfined silently.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from bubu.errors import ConfigError
from bubu.events import SandboxMode
from bubu.tools import netns, sockets
from bubu.tools.controlfiles import Scan, binds
from bubu.tools.limits import Limits, tighter

Confined = Literal["workspace-write", "read-only"]
"""The modes that confine a command."""

MODES: tuple[SandboxMode, ...] = get_args(SandboxMode)
DEFAULT_MODE: SandboxMode = "workspace-write"
"""The mode of a turn whose user chose none."""

BWRAP_ENV = "BUBU_BWRAP"
"""Names the bubblewrap binary (default: ``bwrap`` on PATH); tests point it at a missing one."""

PROBE_TIMEOUT_S = 5.0
"""How long the probe waits for bubblewrap to start and run ``true``."""

SANDBOX_TMP = "/tmp"


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """What a sandboxed command may reach and use beyond the mode and the network: host Unix
    sockets named by the user, the SSH agent, and its limits."""

    allow_sockets: tuple[str, ...] = ()
    ssh_agent: bool = False
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sandbox:
    """How a command is confined: the mode, whether it may use the network, and the rest."""

    mode: Confined
    network: bool = False
    bwrap: str = "bwrap"
    options: Options = field(default_factory=Options)
    shared_net: int | None = None
    """Without the network: the process whose network namespace (loopback only) the command
    joins, shared by the session's commands (`bubu.tools.netns`); None: one of its own."""


def parse_mode(text: str) -> SandboxMode:
    """The sandbox mode named by `text`; a ConfigError naming the valid ones otherwise."""
    value = text.strip().lower()
    for mode in MODES:
        if value == mode:
            return mode
    raise ConfigError(
        f"unknown sandbox mode {text!r}; use --sandbox workspace-write, read-only or off"
    )


def bwrap_binary() -> str | None:
    """The bubblewrap binary to use: $BUBU_BWRAP, else ``bwrap`` on PATH (None if there is none)."""
    named = os.environ.get(BWRAP_ENV)
    if named:
        return named
    return shutil.which("bwrap")


def _base_args(binary: str, network: bool, root: str = "--ro-bind") -> list[str]:
    # Run by root, bubblewrap leaves the command its capabilities, with which it could unmount
    # the read-only binds or remount / writable: --cap-drop ALL takes them away for every user.
    args = [
        binary,
        "--die-with-parent",
        "--new-session",
        "--unshare-all",
        "--unshare-pid",
        "--cap-drop",
        "ALL",
    ]
    if network:
        args.append("--share-net")
    return [
        *args,
        root,
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        SANDBOX_TMP,
        "--setenv",
        "TMPDIR",
        SANDBOX_TMP,
    ]


@functools.cache
def _probe(binary: str | None) -> str | None:
    """None when `binary` can start a sandbox like the ones commands get; else why not."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap runs only on Linux, not {sys.platform}"
    if binary is None:
        return "bubblewrap (bwrap) is not installed"
    try:
        done = subprocess.run(
            [*_base_args(binary, network=False), "--chdir", "/", "--", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        return f"{binary} does not exist"
    except PermissionError:
        return f"{binary} cannot be executed"
    except OSError as e:
        return f"{binary} cannot be started ({e.strerror})"
    except subprocess.TimeoutExpired:
        return f"{binary} did not start a sandbox within {PROBE_TIMEOUT_S:g}s"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return (
            f"{binary} cannot start a sandbox here "
            f"({said[-1] if said else f'exit code {done.returncode}'})"
        )

    return None


def unavailable() -> str | None:
    """Why commands cannot be sandboxed in this process, or None when they can (probed once)."""
    return _probe(bwrap_binary())


_told: set[str] = set()
_told_lock = threading.Lock()


def _tell_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def confinement(
    mode: SandboxMode,
    network: bool,
    say: Callable[[str], None] = _tell_stderr,
    options: Options | None = None,
) -> Sandbox | None:
    """The sandbox a command of a turn in `mode` runs in, or None when it runs unconfined (mode
    off, or bubblewrap unavailable: said once per process through `say`; such commands ask)."""
    if mode == "off":
        return None
    why = unavailable()
    if why is not None:
        with _told_lock:
            first = why not in _told
            _told.add(why)
        if first:
            say(f"bubu: no sandbox for commands: {why}; each command will ask for approval")
        return None
    return Sandbox(
        mode=mode, network=network, bwrap=bwrap_binary() or "bwrap", options=options or Options()
    )


def _programs() -> list[str]:
    """Where the command's programs come from: Bubu's interpreter and virtualenv, and PATH."""
    found = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    return [*found, *os.environ.get("PATH", "").split(os.pathsep)]


def _toolchain_binds() -> list[str]:
    """Read-only binds of the programs that live in the real temp dir — Bubu's own interpreter
    and virtualenv, and PATH entries — which the sandbox's private /tmp would otherwise hide
    (a project cloned and set up under /tmp must still run its own python)."""
    prefix = SANDBOX_TMP.rstrip("/") + "/"
    found = set(_programs())
    dirs = {
        real
        for d in found
        if d and (real := os.path.realpath(d)).startswith(prefix) and os.path.isdir(real)
    }
    # Parents first, so a later bind of a directory inside one is not hidden by it.
    out: list[str] = []
    for d in sorted(dirs, key=len):
        out += ["--ro-bind", d, d]
    return out


def wrap(
    argv: Sequence[str],
    cwd: str,
    sandbox: Sandbox | None,
    workspace: str | None = None,
    *,
    controls: Scan | None = None,
    env: dict[str, str] | None = None,
) -> list[str]:
    """`argv` as run in `sandbox` from `cwd`, with `workspace` (default `cwd`) bound in it and
    the control entries `controls` found in it read-only; unchanged when `sandbox` is None.
    `env` is the command's environment (its SSH agent socket, when allowed)."""
    if sandbox is None:
        return list(argv)
    # The real path, so the command sees the workspace where it really is (a symlink to it from
    # elsewhere would be read-only inside: only the real path is bound).
    ws = os.path.realpath(workspace if workspace is not None else cwd)
    kind = "--bind" if sandbox.mode == "workspace-write" else "--ro-bind"
    toolchain = _toolchain_binds()
    opts = sandbox.options
    # /run holds most host sockets; without the network nothing there is needed (with it,
    # DNS reads its resolver files), so it is an empty tmpfs unless the workspace lies in it.
    covered = [] if sandbox.network else sockets.maskable(sockets.RUN_DIRS, [ws, *_programs()])
    tmpfs = [a for d in covered for a in ("--tmpfs", d)]
    allowed = sockets.allowed_paths(opts.allow_sockets, opts.ssh_agent, env or {})
    # A session's shared namespace is joined first; bubblewrap then keeps it (--share-net).
    shared = sandbox.shared_net is not None and not sandbox.network
    head = netns.joining(sandbox.shared_net) if shared and sandbox.shared_net else []
    if ws == "/":  # bound after /dev, /proc and /tmp it would hide them
        args = [*head, *_base_args(sandbox.bwrap, sandbox.network or shared, root=kind), *tmpfs]
    else:
        base = _base_args(sandbox.bwrap, sandbox.network or shared)
        args = [*head, *base, *tmpfs, *toolchain, kind, ws, ws]
    if sandbox.mode == "workspace-write" and controls is not None:
        args += binds(controls)
    # Last, so that a socket inside the workspace (or inside its .git) is covered too.
    args += sockets.mask_args(allowed, [*covered, SANDBOX_TMP], [ws, *toolchain[1::3]])
    return [*args, "--chdir", os.path.realpath(cwd), "--", *argv]


def turn_mode(
    recorded: SandboxMode | None, recorded_network: bool, chosen: SandboxMode | None, network: bool
) -> tuple[SandboxMode, bool]:
    """The mode and network flag a turn runs under: those recorded with it (so a recovered or
    resumed turn keeps them), else those the host chose, else the default."""
    if recorded is not None:
        return recorded, recorded_network
    return chosen or DEFAULT_MODE, network


def recorded_options(
    allow_sockets: Sequence[str],
    ssh_agent: bool,
    procs: int | None,
    memory: int | None,
    file_size: int | None,
) -> Options:
    """The options a turn recorded (`TurnStarted`'s fields; None: the default limit)."""
    limits = Limits(procs=procs or 0, memory=memory or 0, file_size=file_size or 0)
    return Options(allow_sockets=tuple(allow_sockets), ssh_agent=ssh_agent, limits=limits)


def turn_options(recorded: Options | None, given: Options) -> Options:
    """The options a turn's commands run with: those recorded with it (so a recovered or resumed
    turn keeps them), where the command that continues it may only tighten — a lower limit it
    names applies, a socket or the SSH agent it names that the turn did not record is not
    added; with nothing recorded (an older Bubu, an imported log), the given ones."""
    if recorded is None:
        return given
    return Options(
        allow_sockets=recorded.allow_sockets,
        ssh_agent=recorded.ssh_agent,
        limits=tighter(recorded.limits, given.limits),
    )


def box_fields(options: Options) -> dict[str, Any]:
    """`options` as the fields of the `TurnStarted` that records them."""
    limits = options.limits
    return {
        "allow_sockets": list(options.allow_sockets),
        "ssh_agent": options.ssh_agent,
        "max_procs": limits.procs or None,
        "max_memory": limits.memory or None,
        "max_file_size": limits.file_size or None,
    }
