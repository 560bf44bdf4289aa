"""Host Unix sockets, for real: the PostgreSQL server the tests use, a socket server made here
outside the workspace and outside /tmp, and a fake SSH agent are unreachable from a sandboxed
command, with or without the network, unless named (``--allow-socket``, ``--ssh-agent``)."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu.tools import ToolContext, ToolResult
from bubu.tools.base import Tool
from bubu.tools.sandbox import Options, Sandbox, confinement, wrap
from engine.cli import bubu
from engine.helpers import call, write_script

PG_DIR = "/var/run/postgresql"
PSQL = f"psql -h {PG_DIR} -d test -tAc 'select 40 + 2'"
needs_pg = pytest.mark.skipif(
    shutil.which("psql") is None or not os.path.exists(f"{PG_DIR}/.s.PGSQL.5432"),
    reason="no PostgreSQL Unix socket here",
)


def box(network: bool = False, **options: object) -> Sandbox:
    sandbox = confinement("workspace-write", network, options=Options(**options))  # type: ignore[arg-type]
    assert sandbox is not None
    return sandbox


def run(tools: dict[str, Tool], ws: Path, sandbox: Sandbox | None, command: str) -> str:
    ctx = ToolContext(workspace=ws, timeout_s=60.0, sandbox=sandbox)
    result: ToolResult = tools["run_command"].run({"command": command}, ctx, None)
    return result.output


def connect(path: str, *, ask: bool = False) -> str:
    code = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX); s.settimeout(10); "
        f"s.connect({path!r}); {'s.sendall(bytes([0, 0, 0, 1, 11])); ' if ask else ''}"
        "sys.stdout.write(repr(s.recv(64)))"
    )
    return f"{sys.executable} -c {code!r}"


def serve(path: str, answer: bytes, *, asked: bool = False) -> Iterator[str]:
    """A Unix socket server at `path` that sends `answer` to each connection (after its first
    message, when `asked`)."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(8)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                try:
                    if asked:  # a whole message: a length, then that many bytes
                        data = b""
                        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4]):
                            data += conn.recv(4096) or b"\0\0\0\0"
                    conn.sendall(answer)
                    while asked and conn.recv(4096):
                        pass  # until the client is done with it
                except OSError:
                    continue

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        # close() alone leaves the thread blocked in accept(); shutdown() wakes it at once.
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_RDWR)
        server.close()
        thread.join(5)


@pytest.fixture
def outside_socket() -> Iterator[str]:
    """A socket server in a directory outside both the workspace and /tmp (/tmp is private in
    the sandbox anyway): only the sandbox's own masking hides it."""
    base = tempfile.mkdtemp(prefix="bubu-sock-", dir="/var/tmp")
    try:
        yield from serve(os.path.join(base, "server.sock"), b"hello from the host")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@needs_pg
def test_the_host_postgresql_socket_is_unreachable_unless_allowed(
    tools: dict[str, Tool], ws: Path
) -> None:
    assert run(tools, ws, None, PSQL) == "42\nexit code 0", "the server answers outside"
    for sandbox in (box(), box(network=True)):
        out = run(tools, ws, sandbox, PSQL)
        assert "42" not in out, out
        assert not out.endswith("exit code 0"), out
        # Not even by the socket's other path (/var/run is /run here).
        out = run(tools, ws, sandbox, PSQL.replace(PG_DIR, os.path.realpath(PG_DIR)))
        assert "42" not in out, out
    for allowed in (PG_DIR, f"{PG_DIR}/.s.PGSQL.5432"):
        for network in (False, True):
            sandbox = box(network, allow_sockets=(allowed,))
            assert run(tools, ws, sandbox, PSQL) == "42\nexit code 0", (allowed, network)


@pytest.mark.heavy
def test_a_host_socket_server_is_unreachable_unless_allowed(
    tools: dict[str, Tool], ws: Path, outside_socket: str
) -> None:
    assert run(tools, ws, None, connect(outside_socket)).startswith("b'hello from the host'")
    for sandbox in (box(), box(network=True)):
        out = run(tools, ws, sandbox, connect(outside_socket))
        assert "hello" not in out, out
        assert "ConnectionRefusedError" in out, out
    allowed = box(allow_sockets=(outside_socket,))
    assert run(tools, ws, allowed, connect(outside_socket)).startswith("b'hello from the host'")


@pytest.mark.heavy
def test_a_socket_in_the_workspace_or_tmp_is_unreachable_too(
    tools: dict[str, Tool], ws: Path, tmp_path: Path
) -> None:
    for path in (str(ws / "dev.sock"), str(tmp_path / "t.sock")):
        for _ in serve(path, b"hello"):
            assert run(tools, ws, None, connect(path)).startswith("b'hello'")
            out = run(tools, ws, box(), connect(path))
            assert "hello" not in out, (path, out)
            assert "Error" in out, (path, out)


@pytest.mark.heavy
def test_a_socket_renamed_or_linked_after_it_was_bound_is_unreachable_too(
    tools: dict[str, Tool], ws: Path, outside_socket: str
) -> None:
    """The kernel's table names the path a socket was bound at; a server that binds a temporary
    name and renames it into place (or links it) leaves it reachable under another name."""
    final = os.path.join(os.path.dirname(outside_socket), "final.sock")
    linked = os.path.join(os.path.dirname(outside_socket), "linked.sock")
    os.rename(outside_socket, final)
    os.link(final, linked)
    for path in (final, linked):
        assert run(tools, ws, None, connect(path)).startswith("b'hello from the host'")
        out = run(tools, ws, box(), connect(path))
        assert "hello" not in out, (path, out)
        assert "ConnectionRefusedError" in out, (path, out)


def _agent(path: str) -> Iterator[str]:
    # SSH2_AGENT_IDENTITIES_ANSWER with no keys: what `ssh-add -l` asks an agent for.
    yield from serve(path, struct.pack(">IBI", 5, 12, 0), asked=True)


@pytest.mark.heavy
def test_the_ssh_agent_only_with_ssh_agent(
    tools: dict[str, Tool], ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tempfile.mkdtemp(prefix="bubu-agent-", dir="/var/tmp")
    try:
        for agent in _agent(os.path.join(base, "agent.sock")):
            monkeypatch.setenv("SSH_AUTH_SOCK", agent)
            line = f"echo sock=$SSH_AUTH_SOCK; ssh-add -l; {connect(agent, ask=True)}"
            assert "The agent has no identities." in run(tools, ws, None, line)
            out = run(tools, ws, box(), line)
            assert out.startswith("sock=\n"), "the agent's variable is not passed in"
            assert "no identities" not in out, out
            assert "Error" in out, out
            out = run(tools, ws, box(ssh_agent=True), line)
            assert out.startswith(f"sock={agent}\nThe agent has no identities."), out
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.heavy
@needs_pg
def test_bubu_run_allow_socket(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = write_script(
        tmp_path / "s.jsonl", [{"tool_calls": [call("run_command", command=PSQL)]}, {"text": "ok"}]
    )
    db = tmp_path / "bubu.db"
    done = bubu(db, "run", "t", "-w", str(ws), "-m", f"scripted:{script}", "--jsonl")
    assert done.returncode == 0, done.stderr
    assert '"42\\nexit code 0"' not in done.stdout
    db.unlink()
    done = bubu(
        db,
        "run",
        "t",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--jsonl",
        "--allow-socket",
        PG_DIR,
    )
    assert done.returncode == 0, done.stderr
    assert "42\\nexit code 0" in done.stdout, done.stdout
    missing = bubu(
        db,
        "run",
        "t",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--allow-socket",
        str(tmp_path / "nothing"),
    )
    assert missing.returncode != 0
    assert missing.stderr == (
        f"bubu: error: --allow-socket {tmp_path / 'nothing'}: there is no such socket or "
        "directory; name a Unix socket or the directory that holds it\n"
    )


@pytest.mark.skipif(not os.path.isdir("/run"), reason="no /run here")
def test_run_stays_where_programs_come_from_it(monkeypatch: pytest.MonkeyPatch, ws: Path) -> None:
    def tmpfs_run(argv: list[str]) -> bool:
        return any(a == "--tmpfs" and b == "/run" for a, b in itertools.pairwise(argv))

    assert tmpfs_run(wrap(["true"], str(ws), box()))
    assert not tmpfs_run(wrap(["true"], str(ws), box(network=True))), "DNS reads /run"
    # NixOS puts every program under /run/current-system: hiding it would break every command.
    monkeypatch.setenv("PATH", f"/run/current-system/sw/bin{os.pathsep}{os.environ['PATH']}")
    assert not tmpfs_run(wrap(["true"], str(ws), box()))
