"""A command of several lines keeps them apart wherever it is shown on one line (a tool card, the
recovery notice, the rewind preview): each newline is a ⏎, so two commands never read as one."""

from __future__ import annotations

from bubu.cli.render import call_label
from bubu.events import FunctionCall
from bubu.projections.recovery import label, one_line_marked

TWO = "echo checked\nrm -rf build"


def test_a_label_marks_each_newline() -> None:
    assert one_line_marked("a  b\n\tc\n") == "a b⏎ c⏎ "
    assert label("run_command", {"command": TWO}) == "run_command echo checked⏎ rm -rf build"
    assert label("read_file", {"path": "a.txt"}) == "read_file a.txt"


def test_the_terminal_card_marks_each_newline() -> None:
    card = call_label(FunctionCall(call_id="c1", name="run_command", arguments={"command": TWO}))
    assert card == "run_command echo checked⏎ rm -rf build"
