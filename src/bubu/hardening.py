"""Keep a secret withheld from a command out of its reach in Bubu's own process, too.

A command runs as the same user as Bubu, whose environment still holds every secret (the provider
needs its key). Two holes are closed before the first command or MCP server starts:

- ``/proc/PID/environ`` and the memory of a *dumpable* process are readable by the user's other
  processes: Bubu makes itself non-dumpable (``PR_SET_DUMPABLE 0``, as ssh-agent does), so they
  are readable by root only;
- root reads them anyway: so the secrets' values are also wiped from the block of memory
  ``/proc/PID/environ`` shows (the strings the kernel placed at exec). Python has its own copy
  (``os.environ``), and the C environment is pointed at fresh copies first, so nothing needs
  those bytes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

_PR_SET_DUMPABLE = 4
_PR_GET_DUMPABLE = 3
_done: list[bool] = []


def harden_process(*, is_secret: Callable[[str], bool]) -> bool:
    """Make this process non-dumpable and wipe the values of the variables `is_secret` names
    from its exec-time environment block; once per process, Linux only. True when done."""
    if _done:
        return _done[0]
    ok = False
    if sys.platform.startswith("linux"):
        import ctypes  # here: a process that never starts a command does not load it

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            ok = libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
            ok = ok and libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 0
            _wipe_environ_block(is_secret)
        except (OSError, AttributeError, ValueError):
            pass
    _done.append(bool(ok))
    return bool(ok)


def _wipe_environ_block(is_secret: Callable[[str], bool]) -> None:
    """Overwrite, in place, the value of each secret in the memory ``/proc/self/environ`` reads
    (between ``env_start`` and ``env_end`` of ``/proc/self/stat``), with NUL bytes. Only when the
    memory there holds exactly what the kernel reports, so a layout we do not expect is left
    alone rather than damaged."""
    import ctypes

    stat = Path("/proc/self/stat").read_bytes()
    fields = stat[stat.rfind(b")") + 2 :].split()
    # Fields 50 and 51 of stat (numbered from 1, the name being field 2).
    start, end = int(fields[47]), int(fields[48])
    block = Path("/proc/self/environ").read_bytes()
    if not start or end - start != len(block) or ctypes.string_at(start, len(block)) != block:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    offset = 0
    for entry in block.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        # A fresh copy first: the C environment (getenv, a child started without an explicit
        # environment) keeps the value; only the block the kernel shows loses it.
        secret = eq and value and is_secret(name.decode("utf-8", "replace"))
        if secret and libc.setenv(name, value, 1) == 0:
            ctypes.memset(start + offset + len(name) + 1, 0, len(value))
        offset += len(entry) + 1


__all__ = ["harden_process"]
