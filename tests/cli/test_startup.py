"""Read-only commands import only what they use: no tools, providers, SDKs, asyncio, ssl, web or
the live view's renderer (rich); but for `export`, not even click (`bubu.cli.fast`). `context`
lists the built-in tools from their record (`bubu.toolspecs`) and loads the tools only when the
host may offer others (MCP servers, a tool plugin).

Each command runs in a fresh interpreter that prints the modules it loaded at exit, so a stray
top-level import anywhere on a read-only command's path fails here by name.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from bubu.cli.app import COMMANDS, cli
from bubu.pluginscan import ALLOW_ENV
from faults.helpers import seed
from providers.servers import serve, stream_file

CLI = Path(__file__).resolve().parents[2] / "src" / "bubu" / "cli"

FORBIDDEN_ROOTS = {
    "asyncio",
    "ssl",
    "httpx",
    "httpcore",
    "openai",
    "anthropic",
    "starlette",
    "uvicorn",
    "pydantic",
    "concurrent",
    "rich",
}
FORBIDDEN_PREFIXES = (
    "bubu.tools",
    "bubu.providers",
    "bubu.web",
    "bubu.engine.driver",
    "bubu.engine.permissions",
    "bubu.engine.session",
    "bubu.cli.render",
)
BUDGET = 185
"""Modules a read-only command may load in all (the interpreter alone loads about 30; 341 did
when every command's module loaded for each). The largest, `bubu export`, loads 185 through
click; `bubu verify` 183, refolding the log a runner's state snapshot names to check it; the
commands the fast path runs without click fewer: `context` 169 with the request's projection and
the built-in tools' record, `status` 162 with its sub-agents, background processes and plan mode,
`show` 163, `sessions` 158, `log` 146."""

FAST = {"sessions", "status", "show", "log", "verify", "context"}
"""The commands the fast path runs without click (`bubu.cli.fast`) on a plain command line."""

WRAPPER = """
import atexit, json, runpy, sys
sys.argv = ["bubu", *sys.argv[1:]]
def done():
    with open(__import__("os").environ["MODULES_OUT"], "w") as f:
        json.dump(sorted(sys.modules), f)
atexit.register(done)  # a fast-path command ends the process itself, after the atexit handlers
runpy.run_module("bubu", run_name="__main__")
"""


def _under(module: str, packages: tuple[str, ...]) -> bool:
    """Whether `module` is one of `packages` or inside one (`bubu.toolspecs` is not in tools)."""
    return any(module == p or module.startswith(p + ".") for p in packages)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db, _, ids = seed(tmp_path_factory.mktemp("startup"), 1)
    return db, ids[0]


def _loaded(tmp_path: Path, db: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    out = tmp_path / "modules.json"
    env = {
        **(os.environ if env is None else env),
        "MODULES_OUT": str(out),
        "BUBU_HOME": str(tmp_path / "home"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, "--db", str(db), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(out.read_text())
    return loaded


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["sessions"],
        ["status", "{id}"],
        ["show", "{id}"],
        ["log", "{id}"],
        ["verify", "{id}"],
        ["verify"],
        ["context", "{id}"],
        ["context", "{id}", "--json", "--context-window", "8192"],
        ["export", "{id}"],
    ],
    ids=" ".join,
)
def test_a_read_only_command_loads_no_engine_tools_providers_or_network(
    tmp_path: Path, seeded: tuple[Path, str], args: list[str]
) -> None:
    db, session = seeded
    loaded = _loaded(tmp_path, db, *(a.format(id=session) for a in args))
    forbidden = [
        m for m in loaded if m.split(".")[0] in FORBIDDEN_ROOTS or _under(m, FORBIDDEN_PREFIXES)
    ]
    assert forbidden == []
    assert len(loaded) <= BUDGET, len(loaded)
    assert ("click" in loaded) is (args[0] not in FAST)


def test_context_reads_the_installed_distributions_without_importlib_metadata(
    tmp_path: Path, seeded: tuple[Path, str]
) -> None:
    # As for a user: every installed distribution counts, and none registers a tool.
    db, session = seeded
    env = {k: v for k, v in os.environ.items() if k != ALLOW_ENV}
    loaded = _loaded(tmp_path, db, "context", session, env=env)
    assert [m for m in loaded if _under(m, FORBIDDEN_PREFIXES)] == []
    assert "importlib.metadata" not in loaded
    assert "bubu.toolspecs" in loaded


EXTRA_TOOL = '''
from bubu.tools.decorator import tool

@tool(effect="read_only")
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()

def tools():
    return [shout]
'''


def test_context_loads_the_tools_when_the_host_may_offer_others(
    tmp_path: Path, seeded: tuple[Path, str]
) -> None:
    # The next request lists the tools a run would offer: with MCP servers configured, or with
    # a tool plugin installed, those come from the tools themselves, as a run loads them.
    db, session = seeded
    site = tmp_path / "site"
    info = site / "bubu_extra-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bubu-extra\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[bubu.tools]\nextra = bubu_extra_tools:tools\n")
    (site / "bubu_extra_tools.py").write_text(EXTRA_TOOL)
    env = {k: v for k, v in os.environ.items() if k != ALLOW_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *sys.path])
    loaded = _loaded(tmp_path, db, "context", session, env=env)
    assert "bubu.tools.files" in loaded
    forbidden = [m for m in loaded if m.split(".")[0] in FORBIDDEN_ROOTS or m == "bubu.tools.mcp"]
    assert forbidden == []
    shown = subprocess.run(
        [sys.executable, "-m", "bubu", "--db", str(db), "context", session, "--json"],
        env={**env, "BUBU_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "shout" in json.loads(shown.stdout)["tools"]
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "mcp.json").write_text('{"mcpServers": {}}')
    loaded = _loaded(tmp_path, db, "context", session)  # the suite's pin: no plugin counts
    assert "bubu.tools.files" in loaded


def test_help_imports_no_command_module(tmp_path: Path, seeded: tuple[Path, str]) -> None:
    loaded = _loaded(tmp_path, seeded[0], "--help")
    modules = {c.module for c in COMMANDS.values()}
    assert [m for m in loaded if m in modules] == []
    assert "bubu.log" not in loaded
    assert "msgspec" not in loaded


def _declared() -> dict[str, str]:
    """Every `@cli.command("NAME")` / `@cli.group("NAME")` in the CLI's sources, by module."""
    found = {}
    for path in CLI.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "cli"
                and node.func.attr in ("command", "group")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                found[str(node.args[0].value)] = f"bubu.cli.{path.stem}"
    return found


def test_the_lazy_table_names_every_command_its_module_and_its_help() -> None:
    declared = _declared()
    assert {name: c.module for name, c in COMMANDS.items()} == declared
    ctx = click.Context(cli)
    for name, lazy in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None
        assert command.get_short_help_str(limit=10_000) == lazy.short_help, name


def test_help_lists_each_command_as_if_every_module_were_loaded(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "80", "BUBU_HOME": str(tmp_path)}
    lazy_page = subprocess.run(
        [sys.executable, "-m", "bubu", "--help"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    ctx = cli.make_context("bubu", [], terminal_width=78, resilient_parsing=True)  # 80 columns
    cli.load_all(ctx)
    assert cli.get_help(ctx) + "\n" == lazy_page
    assert all(f"  {name} " in lazy_page for name in COMMANDS)


@pytest.mark.parametrize(
    ("model", "route", "answer", "other"),
    [
        ("anthropic:claude-haiku-4-5", "/v1/messages", "anthropic_text.sse", "openai"),
        ("openai:gpt-4.1-mini", "/v1/chat/completions", "openai_text.sse", "anthropic"),
    ],
)
@pytest.mark.heavy
def test_a_run_loads_only_its_own_provider(
    tmp_path: Path, model: str, route: str, answer: str, other: str
) -> None:
    db = tmp_path / "run.db"
    with serve({("POST", route): stream_file(answer)}) as server:
        base = server.url + ("/v1" if model.startswith("openai") else "")
        os.environ.update(ANTHROPIC_API_KEY="sk-ant-test", OPENAI_API_KEY="sk-test")
        try:
            loaded = _loaded(tmp_path, db, "run", "say hello", "-m", model, "--base-url", base)
        finally:
            del os.environ["ANTHROPIC_API_KEY"], os.environ["OPENAI_API_KEY"]
        assert f"POST {route}" in server.paths()  # the run reached the wire
    own = model.split(":", maxsplit=1)[0]
    assert f"bubu.providers.{own}" in loaded
    # The adapters speak the wire themselves: neither SDK is imported, nor the other adapter.
    assert [m for m in loaded if m.split(".")[0] in ("openai", "anthropic")] == []
    assert f"bubu.providers.{other}" not in loaded
