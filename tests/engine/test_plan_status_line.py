"""The terminal's status line says how far the plan is ("plan 2/3") once the model keeps one."""

from __future__ import annotations

import io

from bubu.cli.render import TerminalObserver
from bubu.events import FunctionCall, FunctionResponse, Record, make


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _records(items: object, *, error: bool = False, call_id: str = "c1") -> list[Record]:
    call = FunctionCall(call_id=call_id, name="update_plan", arguments={"items": items})
    done = FunctionResponse(call_id=call_id, name="update_plan", result="ok", is_error=error)
    return [
        Record(
            seq=1,
            hash="0" * 64,
            event=make(session="s", role="model", author="agent", ts=1, content=call),
        ),
        Record(
            seq=2,
            hash="1" * 64,
            event=make(session="s", role="tool", author="tool", ts=2, content=done),
        ),
    ]


def test_the_status_line_counts_completed_steps_of_the_newest_valid_plan() -> None:
    out = _Tty()
    obs = TerminalObserver(out, color=False)
    try:
        obs.on_activity("thinking")
        assert " plan " not in out.getvalue()
        steps = [
            {"text": "a", "status": "completed"},
            {"text": "b", "status": "completed"},
            {"text": "c", "status": "pending"},
        ]
        obs.on_records(_records(steps))
        obs.on_activity("run_command")
        assert "· run_command · plan 2/3 ·" in out.getvalue().rsplit("\r", 1)[-1]
        obs.on_records(_records([{"text": "x", "status": "later"}], error=True, call_id="c2"))
        obs.on_activity("grep")
        assert "· grep · plan 2/3 ·" in out.getvalue().rsplit("\r", 1)[-1]
    finally:
        obs.close()
