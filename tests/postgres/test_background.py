"""Background processes on PostgreSQL: the reader thread appends chunks of output beside the
runner's own appends, through the same lease, and the runner folds them in."""

from __future__ import annotations

from pathlib import Path

from bubu.engine.driver import RunConfig
from bubu.engine.permissions import Policy
from bubu.engine.session import Host, new_session, start_turn
from bubu.events import ProcessEnded, ProcessOutput
from bubu.log.postgres import PostgresStore
from bubu.providers.scripted import ScriptedProvider
from bubu.tools import builtin_tools
from engine.helpers import call, write_script


def test_a_chatty_background_process_is_logged_beside_the_turn(
    pg: PostgresStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    chatty = "for i in $(seq 1 2000); do echo line $i; done; sleep 0.5; echo done"
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [call("run_command", command=chatty, background=True)]},
            {"tool_calls": [call("run_command", command="echo meanwhile")]},
            {"tool_calls": [call("process_wait", handle="bg-1", timeout=30)]},
            {"text": "done"},
        ],
    )
    info = new_session(pg, task="t", workspace=ws, model=f"scripted:{script}")
    host = Host(
        store=pg,
        provider=ScriptedProvider(str(script)),
        tools=builtin_tools(),
        policy=Policy(yes=True, sandbox="off"),
        config=RunConfig(),
    )
    assert start_turn(host, info, "chat") == "completed"
    records = pg.read(info.id)
    assert pg.verify(info.id).ok
    notes = [
        n
        for r in records
        if isinstance(n := getattr(r.event.content, "note", None), ProcessOutput | ProcessEnded)
    ]
    chunks = [n for n in notes if isinstance(n, ProcessOutput)]
    data = b"".join(pg.blob(c.chunk.sha256) or b"" for c in chunks)
    expected = "".join(f"line {i}\n" for i in range(1, 2001)) + "done\n"
    assert data.decode() == expected
    assert [c.offset for c in chunks] == [
        sum(c.chunk.size for c in chunks[:i]) for i in range(len(chunks))
    ]
    assert isinstance(notes[-1], ProcessEnded)
    assert (notes[-1].how, notes[-1].code) == ("exited", 0)
