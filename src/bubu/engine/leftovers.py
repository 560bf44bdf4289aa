"""What a dead run left running on this host, found and killed before recovery writes a result.

Every command carries ``BUBU_CALL=session/run/call`` in its environment (`bubu.tools.proctree`).
Its keeper kills its tree when the runner dies, but a keeper can itself be killed, so recovery
looks for this session's marker among this user's processes, SIGKILLs what it finds and confirms
each one gone. Only this session's marker is matched — the recoverer holds its lease, so no live
runner can own them — and another session's processes are never touched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bubu.tools import proctree


def _processes(n: int) -> str:
    return "1 process" if n == 1 else f"{n} processes"


@dataclass(frozen=True, slots=True, kw_only=True)
class Leftovers:
    """Processes of a dead run: how many were killed, by call id, and which could not be."""

    killed: dict[str, int] = field(default_factory=dict)
    alive: list[int] = field(default_factory=list)

    def sentence(self, call_id: str) -> str:
        """What the interrupted result of a command adds about its processes ("" when none of
        them was found: the plain interrupted result says enough)."""
        if self.alive:
            pids = ", ".join(map(str, self.alive))
            return (
                f" Some processes of the crashed run could not be confirmed dead and may still be "
                f"running (pids {pids})."
            )
        n = self.killed.get(call_id, 0)
        if n:
            return (
                " Still running after the crash, and killed before this result was written: "
                f"{_processes(n)} it started. Nothing it started is running now."
            )
        return ""

    def lines(self, label_of: Callable[[str], str]) -> list[str]:
        """One line per call whose processes were killed, and one for any that survived."""
        out = [
            f"{label_of(call)}: {_processes(n)} still running, killed"
            for call, n in sorted(self.killed.items())
        ]
        if self.alive:
            out.append(
                f"{_processes(len(self.alive))} could not be confirmed dead: "
                + ", ".join(map(str, self.alive))
            )
        return out


def stop_leftovers(session: str) -> Leftovers:
    """Kill every process of `session` still alive on this host, and confirm each one gone."""
    found = proctree.kill_marked(proctree.session_match(session))
    killed: dict[str, int] = {}
    for marker, n in found.gone.items():
        call = proctree.call_of(marker)
        killed[call] = killed.get(call, 0) + n
    return Leftovers(killed=killed, alive=found.alive)
