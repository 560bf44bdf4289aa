"""The recap `bubu chat` shows of a session it continues (`-c`, `--session`): how many messages
it has and the last exchanges, each message and answer cut to one line, so you pick up the
thread without running `bubu show`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bubu.events import Record, Text

EXCHANGES = 2
"""How many of the last exchanges the recap shows."""
WIDTH = 100
"""Characters of a message or answer shown, at most (the rest is `…`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Exchange:
    """One message of yours and the model's last text in answer to it (empty: none yet)."""

    asked: str
    answered: str = ""


def exchanges(records: Sequence[Record]) -> list[Exchange]:
    """Every exchange of the session, in order: each message you sent and the last text the
    model said before the next one."""
    found: list[Exchange] = []
    for r in records:
        e = r.event
        if e.visibility != "visible" or not isinstance(e.content, Text):
            continue
        if e.role == "user" and e.author == "user":
            found.append(Exchange(asked=e.content.text))
        elif e.role == "model" and found and e.content.text.strip():
            found[-1] = Exchange(asked=found[-1].asked, answered=e.content.text)
    return found


def _cut(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    more = len(first) > WIDTH or len(lines) > 1
    return first[: WIDTH - 1].rstrip() + "…" if more else first


def recap(records: Sequence[Record]) -> list[str]:
    """The recap's lines: a count, then `› message` and `  answer` for the last exchanges."""
    found = exchanges(records)
    if not found:
        return []
    shown = found[-EXCHANGES:]
    count = f"{len(found)} message{'s' if len(found) != 1 else ''}"
    head = f"{count}; the last:" if len(found) > len(shown) else f"{count}:"
    lines = [head]
    for x in shown:
        lines.append(f"› {_cut(x.asked)}")
        if x.answered:
            lines.append(f"  {_cut(x.answered)}")
    return lines


__all__ = ["EXCHANGES", "Exchange", "exchanges", "recap"]
