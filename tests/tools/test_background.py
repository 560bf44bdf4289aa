"""Background processes at the tool seam: real processes under their keepers, their notes
recorded as they happen (here into a `Waiting` recorder, as between turns)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from bubu.errors import ToolError
from bubu.events import Note, ProcessEnded, ProcessOutput, ProcessStarted
from bubu.log import codec
from bubu.tools import proctree
from bubu.tools.background import Processes
from bubu.tools.base import ToolContext
from bubu.tools.bgtools import (
    ProcessKillArgs,
    ProcessOutputArgs,
    ProcessWaitArgs,
    process_kill,
    process_output,
    process_wait,
)
from bubu.tools.sandbox import confinement
from bubu.tools.shell import RunCommandArgs, run_command


class Kept:
    """A recorder that keeps every note and blob, in order."""

    def __init__(self) -> None:
        self.notes: list[Note] = []
        self.blobs: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def record(self, notes: Sequence[Note], *, blobs: Sequence[bytes] = ()) -> None:
        with self._lock:
            self.notes.extend(notes)
            for b in blobs:
                self.blobs[codec.sha256_hex(b)] = b

    def output(self, handle: str) -> bytes:
        chunks = [n for n in self.notes if isinstance(n, ProcessOutput) and n.handle == handle]
        assert [c.offset for c in chunks] == [
            sum(c.chunk.size for c in chunks[:i]) for i in range(len(chunks))
        ]
        return b"".join(self.blobs[c.chunk.sha256] for c in chunks)


def _ctx(tmp_path: Path, procs: Processes, call: str = "call_1") -> ToolContext:
    # Each call has its own marker, which is what a stop kills by when a keeper is gone.
    return ToolContext(workspace=tmp_path, processes=procs, marker=f"ses_bgtest/run_1/{call}")


def _start(ctx: ToolContext, command: str, **more: object) -> str:
    res = run_command.run({"command": command, "background": True, **more}, ctx, None)
    assert not res.is_error, res.output
    assert res.output.startswith("started in the background as bg-")
    return res.output.split()[5]


def _until(predicate: object, what: str) -> None:
    deadline = time.monotonic() + 30
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def procs() -> Processes:
    p = Processes("ses_bgtest")
    p.recorder = Kept()
    return p


def test_a_background_command_is_read_and_killed_and_its_life_is_recorded(
    tmp_path: Path, procs: Processes
) -> None:
    ctx = _ctx(tmp_path, procs)
    handle = _start(ctx, "echo hello; echo $$ > pid; exec sleep 300")
    assert handle == "bg-1"
    _until(
        lambda: (
            (tmp_path / "pid").exists()
            and "hello" in process_output.run({"handle": handle}, ctx, None).output
        ),
        "its output",
    )
    page = process_output(ProcessOutputArgs(handle=handle), ctx).output
    assert page.startswith("bg-1: running (pid ")
    pid = int((tmp_path / "pid").read_text())
    done = process_kill(ProcessKillArgs(handle=handle), ctx).output
    assert done.startswith("bg-1: killed (stopped by process_kill); output bytes 0–5 of 6")
    assert not proctree.marked(proctree.session_match("ses_bgtest"))
    assert not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes()
    kept = procs.recorder
    assert isinstance(kept, Kept)
    started, *_, ended = kept.notes
    assert isinstance(started, ProcessStarted)
    assert started.command.startswith("echo hello")
    assert (started.handle, started.call_id, started.keep) == ("bg-1", "call_1", "turn")
    assert isinstance(ended, ProcessEnded)
    assert ended.how == "killed"
    assert ended.reason == "stopped by process_kill"
    assert kept.output("bg-1") == b"hello\n"
    assert "bg-1" not in procs.live


def test_process_wait_returns_the_exit_code_and_the_last_output(
    tmp_path: Path, procs: Processes
) -> None:
    ctx = _ctx(tmp_path, procs)
    handle = _start(ctx, "for i in 1 2 3; do echo line $i; done; exit 3")
    out = process_wait(ProcessWaitArgs(handle=handle, timeout=30), ctx).output
    assert out.startswith("bg-1: exited with code 3; output bytes 0–20 of 21")
    assert "line 3" in out
    kept = procs.recorder
    assert isinstance(kept, Kept)
    assert isinstance(ended := kept.notes[-1], ProcessEnded)
    assert (ended.how, ended.code) == ("exited", 3)
    assert kept.output(handle) == b"line 1\nline 2\nline 3\n"


def test_a_wait_that_times_out_leaves_it_running(tmp_path: Path, procs: Processes) -> None:
    ctx = _ctx(tmp_path, procs)
    handle = _start(ctx, "exec sleep 300")
    out = process_wait(ProcessWaitArgs(handle=handle, timeout=0.1), ctx).output
    assert out.startswith("still running after 0.1s; bg-1: running")
    procs.stop(["turn"], "the turn ended")
    kept = procs.recorder
    assert isinstance(kept, Kept)
    assert isinstance(kept.notes[-1], ProcessEnded)
    assert kept.notes[-1].reason == "the turn ended"


def test_output_pages_by_byte_offset(tmp_path: Path, procs: Processes) -> None:
    ctx = _ctx(tmp_path, procs)
    handle = _start(ctx, "seq 1 3000")
    process_wait(ProcessWaitArgs(handle=handle, timeout=30), ctx)
    total = len("".join(f"{i}\n" for i in range(1, 3001)))
    newest = process_output(ProcessOutputArgs(handle=handle, limit=10), ctx).output
    assert newest.splitlines()[0] == (
        f"bg-1: exited with code 0; output bytes {total - 10:,}–{total - 1:,} of {total:,} "
        '(earlier: process_output{"handle": "bg-1", "offset": 0})'
    )
    assert newest.splitlines()[-2:] == ["3000", "(end of the output so far)"]
    first = process_output(ProcessOutputArgs(handle=handle, offset=0, limit=8), ctx).output
    assert first.splitlines() == [
        f"bg-1: exited with code 0; output bytes 0–7 of {total:,}",
        "1",
        "2",
        "3",
        "4",
        'next page: process_output{"handle": "bg-1", "offset": 8}',
    ]
    with pytest.raises(ToolError, match="past the end"):
        process_output(ProcessOutputArgs(handle=handle, offset=total), ctx)


def test_at_most_the_limit_run_at_once(tmp_path: Path, procs: Processes) -> None:
    procs.limit = 1
    _start(_ctx(tmp_path, procs), "exec sleep 300")
    ctx = _ctx(tmp_path, procs, "call_2")
    res = run_command.run({"command": "exec sleep 300", "background": True}, ctx, None)
    assert res.is_error
    assert res.output == (
        "at most 1 background processes may run at once in a session (config key "
        "max_background) and bg-1 are running; stop one with process_kill or wait for one with "
        "process_wait first"
    )
    procs.stop(["turn", "session"], "the session ended")
    assert not procs.live


def test_an_unknown_handle_and_a_context_without_processes_are_clear_errors(
    tmp_path: Path, procs: Processes
) -> None:
    with pytest.raises(ToolError, match=r"no background process has the handle 'bg-9'"):
        process_output(ProcessOutputArgs(handle="bg-9"), _ctx(tmp_path, procs))
    bare = ToolContext(workspace=tmp_path)
    with pytest.raises(ToolError, match="background processes cannot run here"):
        run_command(RunCommandArgs(command="sleep 1", background=True), bare)


def test_only_turn_processes_stop_at_the_turn_end(tmp_path: Path, procs: Processes) -> None:
    turn = _start(_ctx(tmp_path, procs), "exec sleep 300")
    session = _start(_ctx(tmp_path, procs, "call_2"), "exec sleep 300", keep="session")
    procs.stop(["turn"], "the turn ended")
    assert list(procs.live) == [session]
    stopped = procs.get(turn)
    assert stopped is not None
    assert stopped.state == "killed"
    procs.stop(["turn", "session"], "the session ended")
    assert not procs.live


def test_a_sandboxed_background_command_runs_in_the_sandbox(
    tmp_path: Path, procs: Processes
) -> None:
    box = confinement("workspace-write", False, say=lambda line: None)
    if box is None:
        pytest.skip("bubblewrap cannot run here")
    ctx = ToolContext(
        workspace=tmp_path, processes=procs, marker="ses_bgtest/run_1/call_2", sandbox=box
    )
    handle = _start(ctx, "touch /etc/bubu-bg-test 2>/dev/null || echo read-only; echo ok > here")
    out = process_wait(ProcessWaitArgs(handle=handle, timeout=30), ctx).output
    assert "read-only" in out
    assert (tmp_path / "here").read_text() == "ok\n"


def test_sandboxed_commands_of_a_session_share_one_loopback_and_nothing_more(
    tmp_path: Path, procs: Processes
) -> None:
    box = confinement("workspace-write", False, say=lambda line: None)
    if box is None:
        pytest.skip("bubblewrap cannot run here")
    (tmp_path / "serve.py").write_text(SERVE)
    ctx = ToolContext(
        workspace=tmp_path, processes=procs, marker="ses_bgtest/run_1/call_3", sandbox=box
    )
    _start(ctx, "exec python3 serve.py")
    _until((tmp_path / "port").exists, "the server's port")
    port = (tmp_path / "port").read_text()
    joined = procs.confine(box)
    assert joined is not None
    assert joined.shared_net is not None, "the session now has a shared namespace"
    poll = ToolContext(
        workspace=tmp_path, processes=procs, marker="ses_bgtest/run_1/call_4", sandbox=joined
    )
    probe = (
        "import socket, sys\n"
        f"print(socket.create_connection(('127.0.0.1', {port})).recv(5).decode())\n"
        "try:\n    socket.create_connection(('10.255.255.1', 80), timeout=5)\n"
        "except OSError as e:\n    print('outside:', e.strerror)\n"
    )
    (tmp_path / "probe.py").write_text(probe)
    out = run_command(RunCommandArgs(command="python3 probe.py"), poll).output
    assert out.splitlines()[:2] == ["hello", "outside: Network is unreachable"], out
    own = run_command(
        RunCommandArgs(command="python3 probe.py"),
        ToolContext(workspace=tmp_path, marker="ses_other/run_1/call_5", sandbox=box),
    ).output
    assert "Connection refused" in own, "a command in a namespace of its own does not reach it"
    procs.stop(["turn", "session"], "the session ended")
    assert not proctree.marked(proctree.session_match("ses_bgtest")), "the holder went too"


SERVE = """\
import pathlib, socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
pathlib.Path("port").write_text(str(s.getsockname()[1]))
while True:
    c, _ = s.accept()
    c.sendall(b"hello")
    c.close()
"""
