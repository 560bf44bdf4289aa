"""The chat's status line names the files the running turn has changed, from its snapshots."""

from __future__ import annotations

import io
from pathlib import Path

from bubu.cli.chatview import ChatView
from bubu.events import Actions, FunctionCall, FunctionResponse, Record, ToolDispatch
from bubu.log.sqlite import SQLiteStore
from bubu.snapshot.take import Snapshotter
from conftest import make_event


def test_the_status_line_names_what_the_turn_changed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    (ws / "b.txt").write_text("same\n")
    store = SQLiteStore(tmp_path / "bubu.db")
    snapper = Snapshotter(store, ws)
    before = snapper.take()
    (ws / "a.txt").write_text("two\n")
    after = snapper.take()
    sid = "ses_x"
    call = FunctionCall(call_id="c1", name="run_command", arguments={"command": "edit"})
    dispatch = ToolDispatch(
        call_id="c1", tool="run_command", effect="side_effecting", args_digest="d", snapshot=before
    )
    done = FunctionResponse(call_id="c1", name="run_command", result="ok", snapshot=after)
    records = [
        Record(seq=n, hash="", event=ev)
        for n, ev in enumerate(
            [
                make_event(sid, call, role="model", author="agent"),
                make_event(
                    sid, actions=Actions(tool_dispatch=dispatch), role="system", author="system"
                ),
                make_event(sid, done, role="tool", author="tool"),
            ],
            start=1,
        )
    ]
    view = ChatView(io.StringIO())
    view.objects = store.get_object
    view.begin()
    view.on_records(records)
    assert view.changed == ["a.txt"]
    assert view.status_text().endswith(" · changed a.txt")
    view.begin()  # the next turn starts with nothing changed
    assert " · changed" not in view.status_text()
    view.end()
    store.close()
