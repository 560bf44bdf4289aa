"""Background processes through the whole engine, with real processes: a web server started in
the background, polled by another command and killed; stopped when the turn ends; and a SIGKILL
of Bubu while it runs, after which the server is really dead and the recovered run's first model
request tells the model so, with its last output, while a restartable process is started again."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bubu.events import FunctionResponse, ProcessEnded, ProcessOutput, ProcessStarted, Record
from bubu.log.sqlite import SQLiteStore
from bubu.providers.base import ModelRequest
from bubu.providers.function import FunctionProvider
from bubu.tools import proctree
from bubu.tools.sandbox import unavailable
from engine.helpers import call, write_script
from faults.helpers import bubu, finish, make_host, only_session, read, start_bubu, wait_for
from faults.test_process import pid_alive

pytestmark = pytest.mark.heavy  # each starts Bubu and a server (about 3 s); tool tests are quick

POLL = """\
import sys, time, urllib.request
for _ in range(300):
    try:
        print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=1).status)
        break
    except OSError:
        time.sleep(0.05)
else:
    print("the server never answered")
"""
"""Polls the server until it answers (from a command of its own)."""

TICK = """\
import itertools, time
for n in itertools.count():
    print("tick", n, flush=True)
    time.sleep(0.1)
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _notes(records: list[Record], kind: type) -> list:  # type: ignore[type-arg]
    return [n for r in records if isinstance(n := getattr(r.event.content, "note", None), kind)]


def _results(records: list[Record]) -> list[FunctionResponse]:
    return [c for r in records if isinstance(c := r.event.content, FunctionResponse)]


def _project(tmp_path: Path) -> tuple[Path, Path, int]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "poll.py").write_text(POLL)
    (ws / "tick.py").write_text(TICK)
    return tmp_path / "bubu.db", ws, _port()


def _server(port: int) -> str:
    return f"exec python3 -m http.server {port} --bind 127.0.0.1"


SANDBOXES = [
    pytest.param(["--sandbox", "off"], id="off"),
    pytest.param(
        ["--sandbox", "workspace-write"],
        id="sandboxed",
        marks=pytest.mark.skipif(unavailable() is not None, reason="no bubblewrap here"),
    ),
    pytest.param(
        ["--sandbox", "workspace-write", "--network"],
        id="sandboxed-network",
        marks=pytest.mark.skipif(unavailable() is not None, reason="no bubblewrap here"),
    ),
]


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_background_server_is_polled_by_a_command_and_killed(
    tmp_path: Path, sandbox: list[str]
) -> None:
    db, ws, port = _project(tmp_path)
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [call("run_command", command=_server(port), background=True)]},
            {
                "tool_calls": [
                    call(
                        "run_command",
                        command=f"python3 poll.py {port}; "
                        f"curl -s -o /dev/null -w 'curl %{{http_code}}' http://127.0.0.1:{port}/",
                    )
                ]
            },
            {"tool_calls": [call("process_kill", handle="bg-1")]},
            {"text": "done"},
        ],
    )
    done = bubu(db, "run", "serve", "-w", str(ws), "-m", f"scripted:{script}", "--yes", *sandbox)
    assert done.returncode == 0, done.stdout + done.stderr
    records = read(db)
    started, polled, killed = _results(records)
    assert started.result.startswith("started in the background as bg-1 (pid ")
    assert polled.result.startswith("200\ncurl 200")
    assert killed.result.startswith("bg-1: killed")
    assert '"GET / HTTP/1.1" 200' in killed.result, "its own log, read back"
    (start,) = _notes(records, ProcessStarted)
    (end,) = _notes(records, ProcessEnded)
    assert (end.how, end.reason) == ("killed", "stopped by process_kill")
    assert start.pid is not None
    assert not pid_alive(start.pid)
    assert _notes(records, ProcessOutput), "its output is in the log"


def test_the_turn_end_stops_a_background_process(tmp_path: Path) -> None:
    db, ws, _ = _project(tmp_path)
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [call("run_command", command="exec python3 tick.py", background=True)]},
            {"text": "done"},
        ],
    )
    done = bubu(
        db, "run", "tick", "-w", str(ws), "-m", f"scripted:{script}", "--yes", "--sandbox", "off"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    records = read(db)
    (start,) = _notes(records, ProcessStarted)
    (end,) = _notes(records, ProcessEnded)
    assert (end.how, end.reason) == ("killed", "the turn ended")
    ended_at = next(r.seq for r in records if getattr(r.event.content, "note", None) is end)
    turn_end = next(
        r.seq
        for r in records
        if r.event.content and "TurnEnded" in type(getattr(r.event.content, "note", None)).__name__
    )
    assert ended_at < turn_end, "stopped before the turn's end is written"
    assert start.pid is not None
    assert not pid_alive(start.pid)


def test_a_sigkilled_bubu_takes_its_background_processes_and_recovery_tells_the_model(
    tmp_path: Path,
) -> None:
    db, ws, port = _project(tmp_path)
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [call("run_command", command=_server(port), background=True)]},
            {
                "tool_calls": [
                    call(
                        "run_command", command="exec python3 tick.py", background=True, restart=True
                    )
                ]
            },
            {
                "tool_calls": [
                    call(
                        "run_command",
                        command=f"python3 poll.py {port}; touch ready; exec sleep 300",
                    )
                ]
            },
        ],
    )
    proc = start_bubu(
        db, "run", "serve", "-w", str(ws), "-m", f"scripted:{script}", "--yes", "--sandbox", "off"
    )
    wait_for((ws / "ready").exists, "the server to answer")

    def logged(handle: str, text: bytes) -> bool:
        with SQLiteStore(db) as store:
            return any(
                text in (store.blob(n.chunk.sha256) or b"")
                for n in _notes(store.read(only_session(db)), ProcessOutput)
                if n.handle == handle
            )

    wait_for(lambda: logged("bg-1", b'"GET / HTTP/1.1" 200'), "the server's log in the log")
    proc.kill()
    code, _, _ = finish(proc)
    assert code == -9
    session = only_session(db)
    before = {n.handle: n for n in _notes(read(db), ProcessStarted)}
    server_pid, tick_pid = before["bg-1"].pid, before["bg-2"].pid
    assert server_pid is not None
    assert tick_pid is not None
    wait_for(lambda: not pid_alive(server_pid) and not pid_alive(tick_pid), "the keepers' kill")
    assert not proctree.marked(proctree.session_match(session))

    asked: list[ModelRequest] = []

    def model(request: ModelRequest) -> object:
        asked.append(request)
        if len(asked) == 1:
            from bubu.providers.base import ToolCallPart

            return ToolCallPart(
                call_id="c_out", name="process_wait", arguments={"handle": "bg-2", "timeout": 0.5}
            )
        return "noted"

    from bubu.engine.recovery import recover_session

    with SQLiteStore(db) as store:
        host = make_host(store, FunctionProvider(model))  # type: ignore[arg-type]
        outcome = recover_session(host, store.session(session))
    assert outcome.outcome == "completed"
    told = "\n".join(
        text for m in asked[0].messages if isinstance(text := getattr(m, "text", None), str)
    )
    assert "[Bubu] The background process bg-1 (`" + _server(port) + "`) died" in told
    assert '"GET / HTTP/1.1" 200' in told, "with its last output"
    assert "The background process bg-2 (`exec python3 tick.py`) died" in told
    assert "It is restartable and was started again as bg-2." in told
    records = read(db)
    again = [n for n in _notes(records, ProcessStarted) if n.restarts == 1]
    (restarted,) = again
    assert restarted.handle == "bg-2"
    assert restarted.pid not in (None, tick_pid)
    waited = [c for c in _results(records) if c.call_id == "c_out"]
    assert waited[0].result.startswith("still running after 0.5s; bg-2: running")
    assert "tick 0" in waited[0].result
    ends = [(n.handle, n.how) for n in _notes(records, ProcessEnded)]
    assert ends == [("bg-1", "died"), ("bg-2", "died"), ("bg-2", "killed")]
    assert restarted.pid is not None
    wait_for(lambda: not pid_alive(restarted.pid), "the restarted process's end")
