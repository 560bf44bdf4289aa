"""MCP servers as tools, against real server processes the suite starts (stdio and HTTP).

One module-wide connection serves three servers of `mcp_server.py`: ``ro`` (stdio, trusted),
``rw`` (stdio, untrusted) and ``web`` (streamable HTTP on a free local port, trusted). Each writes
the calls it serves to a tally file, so a test can tell which process ran a tool and how often.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

import hermetic
from bubu.api import Agent
from bubu.engine.permissions import Policy
from bubu.errors import ConfigError
from bubu.events import SystemNote
from bubu.log.sqlite import SQLiteStore
from bubu.projections.recovery import INTERRUPTED
from bubu.projections.status import fold_status
from bubu.tools import ToolContext, builtin_tools, host_tools
from bubu.tools.mcp import (
    MCPServers,
    MCPTool,
    connect,
    default_config_path,
    disconnect_all,
    load_config,
    parse_config,
    result_text,
    tool_name,
)

from .child import save_note
from .conftest import Script
from .helpers import call, outcomes, recoveries

SERVER = Path(__file__).with_name("mcp_server.py")
CHILD = Path(__file__).with_name("child.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tallies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the servers write down the calls they serve."""
    return tmp_path_factory.mktemp("tallies")


@pytest.fixture(scope="module")
def web_url(tallies: Path) -> Iterator[str]:
    """A streamable-HTTP MCP server process on a free local port."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        env={**os.environ, "TALLY": str(tallies / "web.txt")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "the HTTP MCP server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP MCP server never listened"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _config(web_url: str, tallies: Path, prefix: str) -> dict[str, object]:
    def stdio(tally: str, **extra: object) -> dict[str, object]:
        return {
            "command": [sys.executable, str(SERVER)],
            "env": {"TALLY": str(tallies / f"{prefix}{tally}.txt")},
            **extra,
        }

    return {
        "servers": {
            "ro": stdio("ro", trusted=True, ask=False),
            "rw": stdio("rw"),
            "web": {"url": web_url, "trusted": True, "ask": False},
        }
    }


@pytest.fixture(scope="module")
def mcp_file(tmp_path_factory: pytest.TempPathFactory, web_url: str, tallies: Path) -> Path:
    """The configuration of the three servers."""
    path = tmp_path_factory.mktemp("mcp") / "mcp.json"
    path.write_text(json.dumps(_config(web_url, tallies, "")))
    return path


@pytest.fixture(scope="module")
def servers(mcp_file: Path) -> Iterator[MCPServers]:
    """One connection to the three servers for the whole module."""
    with MCPServers(load_config(mcp_file), where=str(mcp_file)) as connected:
        yield connected


def _by_name(servers: MCPServers) -> dict[str, MCPTool]:
    return {t.name: t for t in servers.tools()}


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


# ---- listing and calling ------------------------------------------------------------------------


@pytest.mark.heavy
def test_tools_are_offered_with_the_server_prefix(servers: MCPServers) -> None:
    tools = _by_name(servers)
    assert set(tools) == {
        f"{s}__{t}" for s in ("ro", "rw", "web") for t in ("lookup", "bump", "fail")
    }
    lookup = tools["ro__lookup"]
    assert lookup.description == "(MCP server ro) Look up the value of a key."
    assert lookup.parameters["type"] == "object"
    assert lookup.parameters["required"] == ["key"]
    assert (lookup.server, lookup.remote) == ("ro", "lookup")


def test_read_only_needs_the_hint_and_a_trusted_server(servers: MCPServers) -> None:
    effects = {name: t.effect for name, t in _by_name(servers).items()}
    assert effects["ro__lookup"] == "read_only"  # hint + trusted (stdio)
    assert effects["web__lookup"] == "read_only"  # hint + trusted (HTTP)
    assert effects["rw__lookup"] == "side_effecting"  # hint, but the server is not trusted
    assert effects["ro__bump"] == "side_effecting"  # trusted, but no hint
    assert effects["web__bump"] == "side_effecting"


def test_untrusted_side_effects_ask_unless_the_server_says_not_to(
    servers: MCPServers, ws: Path
) -> None:
    tools, ctx = _by_name(servers), ToolContext(workspace=ws)
    assert tools["rw__bump"].permission({"n": 1}, ctx) == (
        "bump is a tool of the MCP server 'rw' and may change things"
    )
    assert tools["ro__bump"].permission({"n": 1}, ctx) is None  # "ask": false
    assert tools["rw__lookup"].prepare({"key": "x"}, ctx) is None


def test_calls_over_stdio_and_http_return_text_and_errors(
    servers: MCPServers, ws: Path, tallies: Path
) -> None:
    tools, ctx = _by_name(servers), ToolContext(workspace=ws, timeout_s=30)
    assert tools["ro__lookup"].run({"key": "abc"}, ctx, None).output == "the value of abc is ABC"
    assert tools["web__lookup"].run({"key": "w"}, ctx, None).output == "the value of w is W"
    failed = tools["ro__fail"].run({"reason": "no way"}, ctx, None)
    assert failed.is_error
    assert "no way" in failed.output
    bad = tools["web__bump"].run({"n": "many"}, ctx, None)
    assert bad.is_error
    assert "n" in bad.output
    assert "lookup w" in _lines(tallies / "web.txt")


def test_worker_threads_share_one_connection(servers: MCPServers, ws: Path) -> None:
    tool, ctx = _by_name(servers)["ro__lookup"], ToolContext(workspace=ws, timeout_s=30)
    results: dict[int, str] = {}

    def work(i: int) -> None:
        results[i] = tool.run({"key": f"k{i}"}, ctx, None).output

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: f"the value of k{i} is K{i}" for i in range(8)}


def test_a_full_scripted_turn_calls_mcp_tools(
    servers: MCPServers, script: Script, db: Path, ws: Path, tallies: Path
) -> None:
    model = script(
        [
            {
                "tool_calls": [
                    call("ro__lookup", key="turn"),
                    call("rw__bump", n=2),
                    call("web__lookup", key="net"),
                ]
            },
            {"text": "all three answered"},
        ]
    )
    with Agent(model=model, mcp=servers, store=db, workspace=ws, policy=Policy(yes=True)) as agent:
        assert {"read_file", "ro__lookup", "web__bump"} <= set(agent.tools)
        result = agent.run("use the servers")
        records = agent.session(result.session).records()
    assert result.reason == "completed"
    assert result.text == "all three answered"
    got = {c.name: c.result for cs in outcomes(records).values() for c in cs}
    assert got == {
        "ro__lookup": "the value of turn is TURN",
        "rw__bump": "bumped by 2",
        "web__lookup": "the value of net is NET",
    }
    dispatched = {
        a.tool_dispatch.tool: a.tool_dispatch.effect
        for r in records
        if (a := r.event.actions) is not None and a.tool_dispatch is not None
    }
    assert dispatched == {
        "ro__lookup": "read_only",
        "rw__bump": "side_effecting",
        "web__lookup": "read_only",
    }
    assert "bump 2" in _lines(tallies / "rw.txt")
    assert servers.tools()  # the agent did not close a connection it was given


@pytest.mark.heavy
def test_a_crash_reruns_trusted_reads_and_never_untrusted_calls(
    servers: MCPServers, tallies: Path, script: Script, tmp_path: Path, ws: Path
) -> None:
    """A real child process is SIGKILLed mid-tool; recovery here re-runs the trusted read-only
    call silently, proves the decorated write, and gives the untrusted call the interrupted
    result."""
    model = script(
        [
            {
                "tool_calls": [
                    call("ro__lookup", key="crash"),
                    call("rw__bump", n=5),
                    call("save_note", title="plan", text="ship it"),
                ]
            },
            {"text": "recovered"},
        ]
    )
    db = tmp_path / "bubu.db"
    web_url = servers.config.all()["web"].url
    assert web_url is not None
    child_mcp = tmp_path / "child-mcp.json"
    child_mcp.write_text(json.dumps(_config(web_url, tallies, "child-")))
    env = hermetic.environ("BUBU_")
    env |= {"BUBU_HOME": str(tmp_path), "BUBU_FAILPOINT": "mid_tool"}
    child = subprocess.run(
        [sys.executable, str(CHILD), str(db), str(ws), model.partition(":")[2], str(child_mcp)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -9, child.stderr
    session = child.stdout.split()[0]
    with SQLiteStore(db) as store:
        assert fold_status(store.read(session)).state == "open"

    with Agent(
        model=model, tools=[save_note], mcp=servers, store=db, workspace=ws, policy=Policy(yes=True)
    ) as agent:
        result = agent.recover(session)
        records = agent.session(session).records()
        assert agent.store.verify(session).ok
    assert result.reason == "completed"
    assert result.text == "recovered"
    assert result.recovery is not None
    decisions = {c.tool: c.decision for c in result.recovery.calls}
    assert decisions["ro__lookup"] == "rerun"
    assert decisions["rw__bump"] == "interrupted"
    assert decisions["save_note"] in ("applied", "rerun_not_applied")
    assert {d.tool: d.decision for d in recoveries(records).values()} == decisions
    by_tool = {cs[0].name: cs for cs in outcomes(records).values()}
    assert [(c.result, c.is_error) for c in by_tool["ro__lookup"]] == [
        ("the value of crash is CRASH", False)
    ]
    assert [(c.result[: len(INTERRUPTED)], c.is_error) for c in by_tool["rw__bump"]] == [
        (INTERRUPTED, True)
    ]
    assert len(by_tool["save_note"]) == 1
    assert not by_tool["save_note"][0].is_error
    assert (ws / "notes" / "plan.md").read_text() == "# plan\n\nship it\n"
    # The re-run happened here (this process's servers); the untrusted call was never repeated.
    assert _lines(tallies / "ro.txt").count("lookup crash") == 1
    assert "bump 5" not in _lines(tallies / "rw.txt")
    assert _lines(tallies / "child-rw.txt").count("bump 5") <= 1
    notice = fold_status(records).notice
    assert notice is not None
    assert notice.silent_retries[0] == "ro__lookup crash"  # the tool and its key argument
    assert notice.pending_review == ["rw__bump"]


def _cli(
    db: Path, home: Path, *args: str, failpoint: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = hermetic.environ("BUBU_")
    env["BUBU_HOME"] = str(home)
    if failpoint is not None:
        env["BUBU_FAILPOINT"] = failpoint
    return subprocess.run(
        [sys.executable, "-m", "bubu", "--db", str(db), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _turn_mcp(db: Path) -> list[str | None]:
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        notes = [r.event.content for r in store.read(info.id, kinds=["turn_started"])]
    return [n.note.mcp_config for n in notes if isinstance(n, SystemNote)]  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_cli_recovery_offers_the_mcp_servers_the_turn_started_with(
    web_url: str, tallies: Path, script: Script, tmp_path: Path, ws: Path
) -> None:
    model = script(
        [
            {"tool_calls": [call("ro__lookup", key="first")]},
            {"tool_calls": [call("ro__lookup", key="second")]},
            {"text": "looked up"},
        ]
    )
    home = tmp_path / "home"  # no mcp.json here: only the file given to `run` has the servers
    home.mkdir()
    custom = tmp_path / "elsewhere" / "servers.json"
    custom.parent.mkdir()
    custom.write_text(json.dumps(_config(web_url, tallies, "cli-")))
    db = tmp_path / "bubu.db"
    run = _cli(
        db,
        home,
        "run",
        "look it up",
        "-w",
        str(ws),
        "-m",
        model,
        "--mcp",
        str(custom),
        failpoint="mid_tool",
    )
    assert run.returncode == -9, run.stdout + run.stderr
    assert _turn_mcp(db) == [str(custom.resolve())]

    recovered = _cli(db, home, "recover", "--json")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        records = store.read(info.id)
        assert store.verify(info.id).ok
    results = [(cs[0].name, cs[0].result) for cs in outcomes(records).values()]
    assert results == [
        ("ro__lookup", "the value of first is FIRST"),  # re-run silently, through the same servers
        ("ro__lookup", "the value of second is SECOND"),
    ]
    assert fold_status(records).state == "completed"
    assert _lines(tallies / "cli-ro.txt").count("lookup second") == 1


@pytest.mark.slow
def test_a_cli_recovery_whose_mcp_file_is_gone_says_so_and_keeps_the_turn(
    web_url: str, tallies: Path, script: Script, tmp_path: Path, ws: Path
) -> None:
    model = script([{"tool_calls": [call("ro__lookup", key="gone")]}, {"text": "done"}])
    home = tmp_path / "home"
    home.mkdir()
    custom = tmp_path / "servers.json"
    custom.write_text(json.dumps(_config(web_url, tallies, "gone-")))
    db = tmp_path / "bubu.db"
    run = _cli(
        db,
        home,
        "run",
        "look it up",
        "-w",
        str(ws),
        "-m",
        model,
        "--mcp",
        str(custom),
        failpoint="mid_tool",
    )
    assert run.returncode == -9, run.stdout + run.stderr
    custom.unlink()

    refused = _cli(db, home, "recover")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        f"bubu: error: the turn was started with the MCP servers in {custom.resolve()}, which no "
        "longer exists; restore it, or pass --mcp FILE to continue with other servers"
    )
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        assert fold_status(store.read(info.id)).state == "open", "nothing was decided"

    # Naming the servers explicitly is the user's choice, and the turn goes on with them.
    custom.write_text(json.dumps(_config(web_url, tallies, "gone-")))
    moved = tmp_path / "moved.json"
    custom.rename(moved)
    again = _cli(db, home, "recover", "--mcp", str(moved))
    assert again.returncode == 0, again.stdout + again.stderr
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        assert fold_status(store.read(info.id)).state == "completed"


# ---- configuration ------------------------------------------------------------------------------


def test_the_configuration_is_checked() -> None:
    ok = parse_config(b'{"mcpServers": {"x": {"command": "srv", "args": ["-v"]}}}', "f.json")
    assert ok.all()["x"].argv == ["srv", "-v"]
    assert ok.all()["x"].trusted is False
    bad = [
        (b'{"servers": {"a__b": {"url": "http://h/mcp"}}}', "name 'a__b'"),
        (b'{"servers": {"a": {}}}', "exactly one of command"),
        (b'{"servers": {"a": {"url": "http://h", "command": ["x"]}}}', "exactly one of command"),
        (b'{"servers": {"a": {"url": "http://h", "trust": true}}}', "trust"),
        (b"[1]", "not valid"),
    ]
    for data, message in bad:
        with pytest.raises(ConfigError, match=message):
            parse_config(data, "f.json")
    with pytest.raises(ConfigError, match="cannot read the MCP configuration"):
        load_config("/nonexistent/mcp.json")


def test_tool_names_fit_every_provider() -> None:
    assert tool_name("srv", "get.item") == "srv__get_item"
    long = tool_name("server", "x" * 100)
    assert len(long) == 64
    assert long != tool_name("server", "x" * 99)


def test_result_text_describes_what_is_not_text() -> None:
    result = CallToolResult(
        content=[
            TextContent(text="first"),
            ImageContent(data="aGVsbG8=", mime_type="image/png"),
            EmbeddedResource(resource=TextResourceContents(uri="file:///a.txt", text="inside")),
            ResourceLink(uri="file:///b.txt", name="b"),
        ]
    )
    assert (
        result_text(result) == "first\n[image image/png, 6 bytes]\ninside\n[resource file:///b.txt]"
    )
    assert result_text(CallToolResult(content=[], structured_content={"n": 1})) == '{"n": 1}'


def test_a_server_that_fails_to_start_is_reported_with_its_stderr() -> None:
    crash = "import sys; sys.stderr.write('no luck today'); sys.exit(3)"
    config = parse_config(
        json.dumps({"servers": {"bad": {"command": [sys.executable, "-c", crash]}}}).encode(), "f"
    )
    with pytest.raises(
        ConfigError, match=r"the MCP server 'bad' could not be started .* no luck today"
    ):
        MCPServers(config, where="f").start()
    missing = parse_config(b'{"servers": {"gone": {"command": ["/nonexistent/srv"]}}}', "f")
    with pytest.raises(ConfigError, match="FileNotFoundError"):
        MCPServers(missing, where="f").start()


def test_the_cli_hosts_get_mcp_tools_from_the_file_or_bubu_home(
    web_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUBU_HOME", str(tmp_path))
    assert default_config_path() is None
    assert connect() == []
    (tmp_path / "mcp.json").write_text(json.dumps({"servers": {"web": {"url": web_url}}}))
    assert default_config_path() == tmp_path / "mcp.json"
    try:
        tools = host_tools()
        assert set(builtin_tools()) < set(tools)
        assert tools["web__lookup"].effect == "side_effecting"  # not trusted here
        assert [t.name for t in connect(tmp_path / "mcp.json")] == [
            t.name for t in connect()
        ]  # one connection per file and process
    finally:
        disconnect_all()
    with pytest.raises(ConfigError, match="cannot read"):
        host_tools(str(tmp_path / "other.json"))
