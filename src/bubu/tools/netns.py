"""One network namespace for a session's sandboxed commands, so that they can reach each other.

A sandboxed command without the network gets a network namespace of its own, with only a loopback
interface: a server started in the background would be out of reach of the command that polls
it. So once a session starts a sandboxed background process, a holder — an empty bubblewrap
sandbox running ``sleep``, under a keeper like any command, so it dies with Bubu — owns one
network namespace (loopback only, still no way out) and every later sandboxed command of the
session joins it (``nsenter --user --net``) instead of making its own. Where that cannot be done
(no ``nsenter``, a kernel that refuses), commands keep their own namespaces, as before.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import TYPE_CHECKING

from bubu.tools import proctree

if TYPE_CHECKING:
    from bubu.tools.sandbox import Sandbox

FIND_S = 5.0
"""How long the holder's sandbox has to come up."""


class Holder:
    """The process whose user and network namespaces a session's commands join."""

    def __init__(self, tree: proctree.Tree, pid: int) -> None:
        self.tree = tree
        self.pid = pid

    def alive(self) -> bool:
        """Whether the namespace is still there to join."""
        return self.tree.returncode is None and os.path.exists(f"/proc/{self.pid}/ns/net")

    def stop(self) -> None:
        """Kill the holder (its namespace goes with the last process in it)."""
        self.tree.kill(0)


def start(box: Sandbox, marker: str) -> Holder | None:
    """A holder for commands confined like `box`, or None where one cannot be made."""
    if shutil.which("nsenter") is None:
        return None
    sleep = shutil.which("sleep") or "/bin/sleep"
    argv = [
        box.bwrap,
        "--die-with-parent",
        "--unshare-all",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--",
        sleep,
        "infinity",
    ]
    env = {"PATH": os.environ.get("PATH", ""), proctree.MARKER_VAR: marker}
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        tree = proctree.start(argv, cwd="/", env=env, output=null)
    except Exception:  # no namespace helper: commands run without one
        return None
    finally:
        os.close(null)
    pid = _inside(tree)
    if pid is None:
        tree.kill(0)
        return None
    return Holder(tree, pid)


def _inside(tree: proctree.Tree) -> int | None:
    """The holder's ``sleep``, once it runs in its own network namespace: bubblewrap starts it
    only after the namespace is set up (its loopback up)."""
    own = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + FIND_S
    while time.monotonic() < deadline:
        tree.read_status()
        for pid in _below(tree.pid) if tree.pid else []:
            try:
                with open(f"/proc/{pid}/comm") as f:
                    ready = f.read().strip() == "sleep"
                if ready and os.readlink(f"/proc/{pid}/ns/net") != own:
                    return pid
            except OSError:
                continue
        time.sleep(0.01)
    return None


def _below(pid: int) -> list[int]:
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        found += kids
        stack += kids
    return found


def joining(pid: int) -> list[str]:
    """The command-line prefix that runs a program in the holder `pid`'s namespaces."""
    return ["nsenter", "--user", "--net", "--preserve-credentials", "-t", str(pid), "--"]
