"""Calls of one response on the same file, in-process: they wait for each other in the model's
order, calls on other files do not wait, a refused one does not stop the next, and a stop leaves
the waiting ones "not run". (`tests/recovery/test_same_path.py` runs them as real processes.)"""

from __future__ import annotations

import threading
from pathlib import Path

from bubu.engine.session import new_session, start_turn
from bubu.events import FunctionCall, FunctionResponse
from bubu.log.sqlite import SQLiteStore
from bubu.tools import ToolContext
from bubu.tools.decorator import tool

from .helpers import call, dispatches, make_host, outcomes, scripted, wait_for, write_script


def test_same_file_calls_wait_for_each_other_and_other_files_do_not(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {
                "tool_calls": [
                    call("edit_file", path="a.txt", old="alpha", new="beta"),
                    call("write_file", path="b.txt", content="other\n"),
                    call(
                        "edit_file", path="a.txt", old="nowhere", new="x"
                    ),  # refused: nothing to find
                    call(
                        "edit_file", path="./a.txt", old="beta", new="gamma"
                    ),  # the same file, spelled so
                    call("read_file", path="a.txt"),
                ]
            },
            {"text": "done"},
        ],
    )
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    assert start_turn(make_host(sqlite_store, provider), info, "t") == "completed"
    assert (ws / "a.txt").read_text() == "gamma\n"
    assert (ws / "b.txt").read_text() == "other\n"
    records = sqlite_store.read(info.id)
    ids = [c.call_id for r in records if isinstance(c := r.event.content, FunctionCall)]
    done = {cid: out[0] for cid, out in outcomes(records).items()}
    sent = dispatches(records)
    results = [done[cid][1] for cid in ids]
    assert [r.is_error for r in results] == [False, False, True, False, False]
    assert results[2].result.startswith("old was not found in a.txt")
    assert results[4].result.split() == ["1", "gamma"]
    assert ids[2] not in sent, "refused before its dispatch"
    # The first edit and the write of b.txt start together; each later call on a.txt only after
    # the call before it on a.txt has its outcome.
    assert sent[ids[1]][0] < done[ids[0]][0]
    assert sent[ids[3]][0] > done[ids[0]][0]
    assert sent[ids[4]][0] > done[ids[3]][0]
    assert sent[ids[3]][1].before_sha256 == sent[ids[0]][1].after_sha256


def test_a_stop_leaves_the_waiting_calls_on_a_file_not_run(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    started, release = threading.Event(), threading.Event()

    @tool(effect="provable_write", target=lambda a: a["path"], content=lambda a: a["text"])
    def slow_save(path: str, text: str, ctx: ToolContext) -> str:
        """Save text, slowly."""
        started.set()
        release.wait(30)
        return "saved"

    script = write_script(
        tmp_path / "s.jsonl",
        [
            {
                "tool_calls": [
                    call("slow_save", path="a.txt", text="one\n"),
                    call("write_file", path="a.txt", content="two\n"),
                ]
            },
            {"text": "done"},
        ],
    )
    provider = scripted(script)
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    host = make_host(sqlite_store, provider)
    host.tools = {**host.tools, "slow_save": slow_save}
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(start_turn(host, info, "t")))
    thread.start()
    wait_for(started.is_set, "the first write to start")
    assert host.runner is not None
    host.runner.request_stop("stopped")
    release.set()
    thread.join(60)
    assert result == ["stopped"]
    records = sqlite_store.read(info.id)
    second = [c for r in records if isinstance(c := r.event.content, FunctionResponse)][-1]
    assert second.name == "write_file"
    assert second.result == "not run: the turn was stopped"
    assert (ws / "a.txt").read_text() == "one\n"
    assert len(dispatches(records)) == 1
