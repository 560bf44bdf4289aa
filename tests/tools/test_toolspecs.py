"""The built-in tools' recorded declarations (`bubu.toolspecs`): the record is what the tools
declare, and `bubu context` builds from it the very request it builds from the tools themselves,
plan mode's read-only subset included; a host with MCP servers or a tool plugin loads its tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from bubu import toolspecs
from bubu.engine.inspect import inspect_request
from bubu.engine.permissions import Policy
from bubu.engine.session import new_session, start_turn
from bubu.log.sqlite import SQLiteStore
from bubu.pluginscan import ALLOW_ENV
from bubu.tools import builtin_tools
from engine.helpers import FAST, call, make_host, scripted, write_script

MODULE = "bubu_toolspecs_sample"


def test_the_record_is_what_the_built_in_tools_declare() -> None:
    declared = toolspecs.declarations(builtin_tools().values())
    assert toolspecs.recorded() == declared
    # byte for byte, key order included: `python -m bubu.toolspecs` rewrites it
    assert toolspecs.RECORD.read_bytes() == toolspecs.encode(declared)
    assert [d.name for d in declared] == list(builtin_tools())
    assert {d.effect for d in declared} == {"read_only", "provable_write", "side_effecting"}


def test_the_module_rewrites_the_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "builtin_tools.json"
    target.write_text("[]")
    monkeypatch.setattr(toolspecs, "RECORD", target)
    assert toolspecs.recorded() == ()
    toolspecs.main()
    assert toolspecs.recorded() == toolspecs.declarations(builtin_tools().values())


def _session(tmp_path: Path, store: SQLiteStore, *, plan: bool, command: bool = False) -> str:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("read_file", path="a.txt")]},
        {"text": "read it"},
    ]
    if command:
        lines[1:1] = [{"tool_calls": [call("run_command", command="echo hi; exit 3")]}]
    provider = scripted(write_script(tmp_path / "s.jsonl", lines))
    info = new_session(store, task="t", workspace=ws, model=provider.spec)
    config = replace(FAST, plan=True) if plan else FAST
    host = make_host(store, provider, policy=Policy(sandbox="off", yes=True), config=config)
    assert start_turn(host, info, "look at a.txt") == "completed"
    offered = [t.name for t in provider.requests[-1].tools]
    assert ("write_file" in offered) is not plan
    return info.id


@pytest.mark.parametrize("plan", [False, True], ids=["acting", "planning"])
def test_context_builds_the_same_request_from_the_record_as_from_the_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: bool
) -> None:
    with SQLiteStore(tmp_path / "bubu.db") as store:
        info = store.session(_session(tmp_path, store, plan=plan))
        monkeypatch.setenv("BUBU_HOME", str(tmp_path / "home"))
        assert toolspecs.host_declarations() is not None  # the built-ins alone, as recorded
        from_record = inspect_request(store, info)
        monkeypatch.setattr(toolspecs, "host_declarations", lambda: None)
        from_tools = inspect_request(store, info)
    assert from_record.next.digest == from_tools.next.digest
    assert msgspec.json.encode(from_record.next.request.tools) == msgspec.json.encode(
        from_tools.next.request.tools
    )
    names = [t.name for t in from_record.next.request.tools]
    assert ("write_file" in names) is not plan
    assert "read_file" in names


def test_mcp_servers_or_a_tool_plugin_make_the_host_load_its_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("BUBU_HOME", str(home))
    monkeypatch.delenv(ALLOW_ENV)  # every installed distribution counts, as for a user
    assert toolspecs.host_declarations() == toolspecs.recorded()
    (home / "mcp.json").write_text('{"mcpServers": {}}')
    assert toolspecs.host_declarations() is None
    (home / "mcp.json").unlink()
    site = tmp_path / "site"
    info = site / "bubu_extra-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bubu-extra\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[bubu.tools]\nextra = {MODULE}:tools\n")
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    assert toolspecs.host_declarations() is None
    monkeypatch.setenv(ALLOW_ENV, "none")  # the built-ins only: the plugin takes no part
    assert toolspecs.host_declarations() == toolspecs.recorded()


def test_a_fresh_process_shows_the_same_request_without_the_tools_as_with_them(
    tmp_path: Path,
) -> None:
    # In a new process the tools' own declarations (which a loaded tool module makes, e.g. that
    # run_command runs a command) are absent: the request must not depend on them.
    with SQLiteStore(tmp_path / "bubu.db") as store:
        session = _session(tmp_path, store, plan=False, command=True)
    argv = [sys.executable, "-m", "bubu", "--db", str(tmp_path / "bubu.db"), "context", session]
    plain, mcp = tmp_path / "plain", tmp_path / "mcp"
    plain.mkdir()
    mcp.mkdir()
    (mcp / "mcp.json").write_text('{"mcpServers": {}}')  # MCP configured: the tools load
    shown = {}
    for home in (plain, mcp):
        proc = subprocess.run(
            [*argv, "--json"],
            env={**os.environ, "BUBU_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        shown[home] = json.loads(proc.stdout)
    assert shown[plain] == shown[mcp]
    assert "run_command" in shown[plain]["tools"]
