"""Reading a file line by line with a bound on each line, so a file without newlines
(`/dev/zero`, a binary) costs at most the bound in memory, never the whole file."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO


class LineTooLong(ValueError):
    """A line longer than the bound; `str()` names the line and the limit."""

    def __init__(self, number: int, limit: int, what: str) -> None:
        self.number, self.limit = number, limit
        super().__init__(
            f"line {number} of {what} is longer than {human(limit)}, the limit for one line "
            "(is it the right file?)"
        )


def human(n: int) -> str:
    """A byte count in the largest binary unit that divides it (`64 MiB`)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def bounded_lines(f: BinaryIO, *, limit: int, what: str) -> Iterator[tuple[int, bytes]]:
    """(number, line without its end) for each line of `f`, numbered from 1; raises
    `LineTooLong` as soon as a line passes `limit` bytes, having read at most that much of it."""
    number = 0
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        number += 1
        body = line[:-1] if line.endswith(b"\n") else line
        if len(body) > limit:
            raise LineTooLong(number, limit, what)
        yield number, body[:-1] if body.endswith(b"\r") else body
