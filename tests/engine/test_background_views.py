"""A background process kept for the session outlives its turn, and every view lists it: the
chat's status line, `bubu status --json` (stable keys) and the web UI's session page; the next
run of another Bubu process finds it gone and tells the model so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bubu.cli.chatview import ChatView
from bubu.cli.readviews import status_dict
from bubu.engine import processes
from bubu.engine.driver import RunConfig
from bubu.engine.permissions import Policy
from bubu.engine.session import Host, new_session, start_turn
from bubu.events import ProcessEnded, ProcessStarted
from bubu.log.sqlite import SQLiteStore
from bubu.projections.context import fold_context
from bubu.providers.scripted import ScriptedProvider
from bubu.tools import background, builtin_tools, proctree
from bubu.web.runs import RunManager
from bubu.web.views import SessionIndex, detail

from .helpers import call, write_script

PROCESS_KEYS = ["command", "exit_code", "handle", "keep", "output_bytes", "pid", "restart", "state"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "bubu.db") as s:
        yield s


def _run(store: SQLiteStore, tmp_path: Path, lines: list[dict[str, object]]) -> str:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    script = write_script(tmp_path / f"s{len(list(tmp_path.iterdir()))}.jsonl", lines)
    info = new_session(store, task="t", workspace=ws, model=f"scripted:{script}")
    host = Host(
        store=store,
        provider=ScriptedProvider(str(script)),
        tools=builtin_tools(),
        policy=Policy(yes=True, sandbox="off"),
        config=RunConfig(),
    )
    assert start_turn(host, info, "serve") == "completed"
    return info.id


def test_a_process_kept_for_the_session_is_listed_by_every_view(
    store: SQLiteStore, tmp_path: Path
) -> None:
    sid = _run(
        store,
        tmp_path,
        [
            {
                "tool_calls": [
                    call("run_command", command="exec sleep 300", background=True, keep="session")
                ]
            },
            {"text": "it runs"},
        ],
    )
    try:
        procs = background.known(sid)
        assert procs is not None
        assert list(procs.live) == ["bg-1"], "it outlived its turn"
        status = status_dict(store, store.session(sid))
        listed: Any = status["processes"]
        (shown,) = listed
        assert sorted(shown) == PROCESS_KEYS
        assert (shown["handle"], shown["state"], shown["keep"]) == ("bg-1", "running", "session")
        assert shown["pid"] == procs.live["bg-1"].pid
        page = detail(SessionIndex(store, RunManager(store)), store.session(sid))
        assert [(p.handle, p.command) for p in page.processes] == [("bg-1", "exec sleep 300")]
        view = ChatView()
        view.on_records(store.read(sid))
        assert "bg: bg-1 exec sleep 300" in view.status_text()
    finally:
        processes.end_session(sid, store)
    assert not proctree.marked(proctree.session_match(sid))
    ends = [
        n
        for r in store.read(sid)
        if isinstance(n := getattr(r.event.content, "note", None), ProcessEnded)
    ]
    assert [(n.how, n.reason) for n in ends] == [("killed", "the session ended")]
    assert status_dict(store, store.session(sid))["processes"] == []


@pytest.mark.heavy
def test_a_process_left_by_another_bubu_is_told_to_the_model_as_dead(
    store: SQLiteStore, tmp_path: Path
) -> None:
    sid = _run(
        store,
        tmp_path,
        [
            {
                "tool_calls": [
                    call(
                        "run_command",
                        command="echo up; exec sleep 300",
                        background=True,
                        keep="session",
                    )
                ]
            },
            {"tool_calls": [call("process_wait", handle="bg-1", timeout=2)]},
            {"text": "it runs"},
            {"text": "and now?"},
        ],
    )
    procs = background.known(sid)
    assert procs is not None
    # As if this Bubu had ended: its processes are gone, their end never recorded.
    procs.recorder = background.Waiting()
    processes.end_session(sid)
    background._REGISTRY.pop(sid)
    info = store.session(sid)
    script = info.model.removeprefix("scripted:") if info.model else ""
    host = Host(
        store=store,
        provider=ScriptedProvider(script),
        tools=builtin_tools(),
        policy=Policy(yes=True, sandbox="off"),
        config=RunConfig(),
    )
    assert start_turn(host, info, "again") == "completed"
    records = store.read(sid)
    ends = [
        (n.handle, n.how)
        for r in records
        if isinstance(n := getattr(r.event.content, "note", None), ProcessEnded)
    ]
    assert ends == [("bg-1", "died")]
    starts = [
        r for r in records if isinstance(getattr(r.event.content, "note", None), ProcessStarted)
    ]
    assert len(starts) == 1, "not restartable: not started again"
    told = [getattr(e, "message", None) for e in fold_context(records).entries]
    texts = [m.text for m in told if m is not None and "background process" in m.text]
    assert texts == [
        "[Bubu] The background process bg-1 (`echo up; exec sleep 300`) died: Bubu stopped while "
        "it ran (its processes were killed with it). It is not running now; start it again if "
        "it is still needed.\nIts last output:\nup\n"
    ]
