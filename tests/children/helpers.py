"""Scripts for sub-agent tests: a parent that delegates, children that leave a mark on disk."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bubu.events import ChildFinished, ChildStarted, FunctionResponse, Record, SystemNote


def script(path: Path, lines: Sequence[dict[str, Any]]) -> str:
    """Write a scripted model; its spec."""
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return f"scripted:{path}"


def delegate(task: str, **args: Any) -> dict[str, Any]:
    """One delegate call."""
    return {"name": "delegate", "arguments": {"task": task, **args}}


def child_script(path: Path, mark: str, counter: Path, *, sleep: float = 0) -> str:
    """A child that appends `mark` to `counter` once, then reports."""
    cmd = f"echo {mark} >> {counter}" + (f" && sleep {sleep}" if sleep else "")
    return script(
        path,
        [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": cmd}}]},
            {"text": f"report of {mark}"},
        ],
    )


def notes(records: Sequence[Record], kind: type) -> list[Any]:
    """The system notes of one kind."""
    return [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, kind)
    ]


def started(records: Sequence[Record]) -> list[ChildStarted]:
    """The child_started facts."""
    return notes(records, ChildStarted)


def finished(records: Sequence[Record]) -> list[ChildFinished]:
    """The child_finished facts."""
    return notes(records, ChildFinished)


def results(records: Sequence[Record], tool: str = "delegate") -> list[FunctionResponse]:
    """The outcomes of one tool's calls."""
    return [
        c for r in records if isinstance(c := r.event.content, FunctionResponse) and c.name == tool
    ]
