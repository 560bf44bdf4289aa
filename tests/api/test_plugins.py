"""Plugins through entry points: the built-ins and third-party providers and tools share one seam.

Most tests install a real distribution: a temporary sys.path entry holding the module
`bubu_echo_plugin` (a copy of `plugin_sample.py`) and its ``.dist-info`` with an
``entry_points.txt``, found by `importlib.metadata` like any installed package, and name it in
`BUBU_PLUGINS`, so that only it (and no plugin really installed beside Bubu) takes part. Others
pass the entry points explicitly, as the seam allows.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import hermetic
from bubu.api import Agent
from bubu.errors import ConfigError
from bubu.plugins import ALLOW_ENV, BUILTINS, plugin_tools, provider_factory, registry
from bubu.providers import resolve
from bubu.providers.scripted import ScriptedProvider
from bubu.tools import builtin_tools, registered_tools

from .conftest import Script

SAMPLE = Path(__file__).with_name("plugin_sample.py")
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
MODULE = "bubu_echo_plugin"

Install = Callable[[str, Mapping[str, Mapping[str, str]]], Path]
"""Installs a distribution NAME with entry points {group: {name: value}} on sys.path."""


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """Install distributions (with the plugin module beside them) for the length of a test."""
    shutil.copyfile(SAMPLE, tmp_path / f"{MODULE}.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    installed: list[str] = []

    def add(dist: str, groups: Mapping[str, Mapping[str, str]]) -> Path:
        installed.append(dist)
        monkeypatch.setenv(ALLOW_ENV, ",".join(installed))
        info = tmp_path / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        lines = [
            line
            for group, names in groups.items()
            for line in (f"[{group}]", *(f"{n} = {v}" for n, v in names.items()), "")
        ]
        (info / "entry_points.txt").write_text("\n".join(lines))
        return info

    yield add
    sys.modules.pop(MODULE, None)


ECHO = {
    "bubu.providers": {"echo": f"{MODULE}:provider"},
    "bubu.tools": {"echo": f"{MODULE}:tools"},
}


def test_the_builtins_are_there_without_any_entry_point(script: Script) -> None:
    reg = registry("bubu.providers", entry_points=[])
    assert reg.names() == ["anthropic", "openai", "openai-chat", "openai-responses", "scripted"]
    assert {p.dist for p in reg.plugins.values()} == {"bubu-agent"}
    model = script([{"text": "hi"}])
    provider = resolve(model, entry_points=[])
    assert isinstance(provider, ScriptedProvider)
    assert provider.spec == model
    tools = plugin_tools(entry_points=[])
    assert [t.name for t in tools] == list(builtin_tools())


def test_the_builtins_are_declared_as_entry_points_in_pyproject() -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]
    for group, names in BUILTINS.items():
        assert declared[group] == dict(names)


def test_an_installed_plugin_provides_a_model_and_tools(
    install: Install, db: Path, ws: Path
) -> None:
    install("bubu-echo-plugin", ECHO)
    assert "echo" in registry("bubu.providers").names()
    assert registry("bubu.providers").plugins["echo"].dist == "bubu-echo-plugin"
    tools = registered_tools()
    assert set(builtin_tools()) < set(tools)
    assert tools["shout"].effect == "read_only"
    with Agent(model="echo:hello", plugins=True, store=db, workspace=ws) as agent:
        result = agent.run("shout your name")
    assert result.reason == "completed"
    assert result.text == "echo: HELLO!"


def test_resolve_passes_only_the_options_given(install: Install) -> None:
    ep = EntryPoint(name="echo", value=f"{MODULE}:provider", group="bubu.providers")
    plain = resolve("echo:a", entry_points=[ep])
    tuned = resolve("echo:b", context_window=5000, base_url="http://x", entry_points=[ep])
    assert plain.spec == "echo:a"
    assert getattr(plain, "options", None) == {}
    assert getattr(tuned, "options", None) == {"context_window": 5000, "base_url": "http://x"}


def test_a_name_claimed_twice_is_refused_and_the_rest_still_works(install: Install) -> None:
    install("bubu-echo-plugin", ECHO)
    install("squatter", {"bubu.providers": {"scripted": f"{MODULE}:provider"}})
    reg = registry("bubu.providers")
    assert reg.conflicts == {"scripted": ("bubu-agent", "squatter")}
    assert "scripted" not in reg.names()
    with pytest.raises(
        ConfigError, match=r"registered by more than one package \(bubu-agent, squatter\)"
    ):
        resolve("scripted:x.jsonl")
    assert callable(provider_factory("anthropic"))
    assert resolve("echo:still").spec == "echo:still"


def test_bubu_agent_declaring_its_own_builtins_is_no_conflict(install: Install) -> None:
    install("bubu-agent", {"bubu.providers": dict(BUILTINS["bubu.providers"])})
    reg = registry("bubu.providers")
    assert reg.conflicts == {}
    assert reg.names() == ["anthropic", "openai", "openai-chat", "openai-responses", "scripted"]


def test_broken_plugins_are_config_errors_naming_them(install: Install) -> None:
    broken = EntryPoint(name="broken", value="no_such_module_xyz:make", group="bubu.providers")
    with pytest.raises(
        ConfigError, match=r"plugin 'broken' \(no_such_module_xyz:make.*failed to load"
    ):
        resolve("broken:m", entry_points=[broken])
    with pytest.raises(
        ConfigError,
        match=(
            "unknown model provider 'nope'; known: anthropic, openai, openai-chat, "
            "openai-responses, scripted"
        ),
    ):
        resolve("nope:m", entry_points=[])
    with pytest.raises(ConfigError, match="not provider:model"):
        resolve("scripted", entry_points=[])
    install("bubu-bad-tools", {"bubu.tools": {"bad": f"{MODULE}:not_tools"}})
    with pytest.raises(ConfigError, match="the tool plugin 'bad' from bubu-bad-tools gave str"):
        registered_tools()


def test_a_plugin_tool_may_not_take_a_builtin_name(install: Install) -> None:
    install("bubu-clash", {"bubu.tools": {"clash": f"{MODULE}:clashing_tools"}})
    with pytest.raises(ConfigError, match="two tools are named 'read_file'"):
        registered_tools()


def test_an_unknown_group_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown plugin group"):
        registry("bubu.widgets", entry_points=[])  # type: ignore[arg-type]  # the mistake under test


HELLO = {
    "bubu.providers": {"hello": "bubu_hello:provider"},
    "bubu.tools": {"hello": "bubu_hello:tools"},
}
"""What `pip install ./examples/plugin` registers."""


def installed_dist(where: Path, dist: str, groups: Mapping[str, Mapping[str, str]]) -> None:
    """A distribution's .dist-info in `where`, as pip leaves it in site-packages."""
    info = where / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    lines = [
        f"[{g}]\n" + "".join(f"{n} = {v}\n" for n, v in names.items())
        for g, names in groups.items()
    ]
    (info / "entry_points.txt").write_text("\n".join(lines))


def test_a_plugin_installed_beside_bubu_takes_no_part_in_the_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed_dist(tmp_path, "bubu-hello", HELLO)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert os.environ[ALLOW_ENV] == "none"  # the suite's pin (tests/hermetic.py)
    assert "hello" not in registry("bubu.providers").names()
    assert "hello" not in registry("bubu.tools").names()
    # Nor in a `bubu` process a test starts, in the clean environment tests build for it.
    env = {**hermetic.environ("BUBU_"), "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    code = "from bubu.plugins import registry; print(registry('bubu.providers').names())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "hello" not in out
    assert "scripted" in out


def test_bubu_plugins_chooses_the_distributions_that_register(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed_dist(tmp_path, "bubu-hello", HELLO)
    installed_dist(tmp_path, "other-plugin", {"bubu.providers": {"other": "x:y"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(ALLOW_ENV)
    assert {"hello", "other"} <= set(registry("bubu.providers").names())  # unset: every one
    monkeypatch.setenv(ALLOW_ENV, "Bubu_Hello")  # names compare as pip normalizes them
    names = registry("bubu.providers").names()
    assert "hello" in names
    assert "other" not in names
    monkeypatch.setenv(ALLOW_ENV, "none")
    reg = registry("bubu.providers")
    assert reg.names() == ["anthropic", "openai", "openai-chat", "openai-responses", "scripted"]
    with pytest.raises(ConfigError, match=r"BUBU_PLUGINS=none leaves out the others"):
        reg.get("hello", what="model provider")
