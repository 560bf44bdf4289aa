"""What a session did to its files after a seq: the pure half of a rewind (`bubu.engine.rewind`).

For every file a provable write changed after SEQ, the log says what the file was at SEQ (the
``before_sha256`` of the first write dispatched on it after SEQ; None: it did not exist) and what
Bubu last left in it (the ``after_sha256`` of the last write on it that was applied: a successful
outcome, or recovery's "applied"). Commands and other side effects after SEQ are listed too:
their effects are not known, so they cannot be undone.

The seqs a session can be rewound to are its turn boundaries: the seq just before a request that
opened a turn, the end of each turn, and the last seq when no turn is open. 0 is before the
session's first request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bubu.events import FunctionCall, FunctionResponse, Record, SystemNote, Text, TurnStarted
from bubu.projections.memory import is_memory_path
from bubu.projections.recovery import DELETED, label


@dataclass(frozen=True, slots=True, kw_only=True)
class FileChange:
    """One file Bubu changed after the seq."""

    path: str
    """The absolute path the writes' dispatches recorded."""
    at_seq: str | None
    """Its sha-256 at the seq (None: it did not exist)."""
    last_after: str | None
    """What Bubu's last applied write left in it (None: deleted)."""
    last_write_seq: int
    writes: int
    command_after: bool
    """A command (or another unprovable effect) ran after Bubu's last write to it."""
    link: bool = False
    """A symbolic link at the seq or in Bubu's last snapshot (put back by hand)."""
    from_snapshots: bool = False
    mode: int | None = None
    """Its permission bits at the seq, where a snapshot recorded them."""
    """Known from the workspace snapshots (what commands changed too), not only from writes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """A side-effecting call dispatched after the seq, whose effects cannot be undone."""

    seq: int
    label: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Since:
    """What a session did after a seq."""

    to: int
    files: tuple[FileChange, ...]
    commands: tuple[Command, ...]


def boundaries(records: Sequence[Record]) -> list[int]:
    """The seqs a session can be rewound to (see the module docstring), ascending."""
    out: list[int] = []
    open_turn = False
    for i, r in enumerate(records):
        c = r.event.content
        if isinstance(c, SystemNote):
            note = type(c.note).__name__
            if note == "TurnStarted":
                open_turn = True
            elif note == "TurnEnded":
                open_turn = False
                out.append(r.seq)
        elif (
            isinstance(c, Text)
            and r.event.role == "user"
            and not open_turn
            and i + 1 < len(records)
            and _opens_turn(records[i + 1])
        ):
            out.append(r.seq - 1)
    if records and not open_turn:
        out.append(records[-1].seq)
    return sorted(set(out))


def _opens_turn(r: Record) -> bool:
    c = r.event.content
    return isinstance(c, SystemNote) and isinstance(c.note, TurnStarted)


def shown_boundaries(valid: Sequence[int], limit: int = 12) -> str:
    """The valid seqs for an error message (the first and last ones when there are many)."""
    if len(valid) <= limit:
        return ", ".join(map(str, valid))
    half = limit // 2
    return f"{', '.join(map(str, valid[:half]))}, …, {', '.join(map(str, valid[-half:]))}"


def since(records: Sequence[Record], to: int) -> Since:
    """What the session of `records` did after seq `to` (see the module docstring)."""
    names: dict[str, FunctionCall] = {}
    dispatched: list[tuple[int, str]] = []  # (seq, call id) of provable writes, in order
    paths: dict[str, tuple[str, str | None, str | None]] = {}  # call id -> path, before, after
    applied: set[str] = set()
    commands: list[Command] = []
    for r in records:
        c, a = r.event.content, r.event.actions
        if isinstance(c, FunctionCall):
            names[c.call_id] = c
        if r.seq <= to:
            continue
        if a is not None and a.tool_dispatch is not None:
            d = a.tool_dispatch
            if d.effect == "provable_write" and d.path and not is_memory_path(d.path):
                dispatched.append((r.seq, d.call_id))
                paths[d.call_id] = (d.path, d.before_sha256, d.after_sha256)
            elif d.effect == "side_effecting":
                call = names.get(d.call_id)
                text = label(call.name, call.arguments) if call is not None else d.tool
                commands.append(Command(seq=r.seq, label=text))
        if isinstance(c, FunctionResponse) and not c.is_error:
            applied.add(c.call_id)
        if a is not None and a.tool_recovery is not None and a.tool_recovery.decision == "applied":
            applied.add(a.tool_recovery.call_id)
    first: dict[str, str | None] = {}
    last: dict[str, tuple[str | None, int]] = {}
    count: dict[str, int] = {}
    for seq, call_id in dispatched:
        path, before, after = paths[call_id]
        first.setdefault(path, before)
        if call_id in applied:
            last[path] = (None if after == DELETED else after, seq)
            count[path] = count.get(path, 0) + 1
    files = tuple(
        FileChange(
            path=p,
            at_seq=first[p],
            last_after=after,
            last_write_seq=seq,
            writes=count[p],
            command_after=any(cmd.seq > seq for cmd in commands),
        )
        for p, (after, seq) in sorted(last.items())
    )
    return Since(to=to, files=files, commands=tuple(commands))


__all__ = [
    "DELETED",
    "Command",
    "FileChange",
    "Since",
    "boundaries",
    "shown_boundaries",
    "since",
]
