"""One function assembles a host from settings, and the front ends all go through it: the deny
rules, ``native_tools`` and the background limit of the user's config file reach the host the
CLI, the web UI and the fleet worker build, and the Python API's own choices reach its host."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.api import Agent
from bubu.engine.assemble import assemble_host, config_options
from bubu.engine.driver import NullObserver, RunConfig
from bubu.engine.permissions import Policy
from bubu.engine.session import Host
from bubu.engine.worker import (
    Submission,
    SubmittedModel,
    WorkerConfig,
    submit,
    worker_host,
    worker_options,
)
from bubu.errors import ConfigError
from bubu.events import SystemNote, TurnStarted
from bubu.log.sqlite import SQLiteStore
from bubu.providers.scripted import ScriptedProvider
from bubu.tools import builtin_tools
from bubu.web.runs import default_host

from .cli import bubu, only_session
from .helpers import write_script

CONFIG = 'deny = ["rm *", "path:secrets/**"]\nnative_tools = false\nmax_background = 2\n'
MODEL = "anthropic:claude-sonnet-5-5"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$BUBU_HOME with the config file above, and a key so that Anthropic's provider builds."""
    monkeypatch.setenv("BUBU_HOME", str(tmp_path))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    (tmp_path / "config.toml").write_text(CONFIG)
    return tmp_path


def native(host: Host) -> object:
    """Whether the host's Anthropic provider offers its own tool shapes."""
    return getattr(host.provider, "_native", None)


def test_the_cli_records_the_config_files_deny_rules_and_native_tools(home: Path, ws: Path) -> None:
    script = write_script(home / "s.jsonl", [{"text": "done"}])
    db = home / "bubu.db"
    done = bubu(db, "run", "-m", f"scripted:{script}", "-w", str(ws), "say done")
    assert done.returncode == 0, done.stderr
    with SQLiteStore(db) as store:
        (note,) = [
            r.event.content.note
            for r in store.read(only_session(db))
            if isinstance(r.event.content, SystemNote)
            and isinstance(r.event.content.note, TurnStarted)
        ]
    assert note.deny == ["rm *", "path:secrets/**"]
    assert note.native_tools is False


def test_a_page_host_has_the_config_files_deny_rules_native_tools_and_limits(home: Path) -> None:
    with SQLiteStore(home / "bubu.db") as store:
        host = default_host(store, MODEL)
    assert host.policy.deny == ("rm *", "path:secrets/**")
    assert host.model_settings.native_tools is False
    assert native(host) is False
    assert host.config.max_background == 2


def test_a_worker_host_has_its_config_files_deny_rules_and_the_tasks_model_options(
    home: Path, ws: Path
) -> None:
    with SQLiteStore(home / "bubu.db") as store:
        policy = Submission(model=SubmittedModel(native_tools=False))
        info = submit(store, task="say done", workspace=ws, model=MODEL, policy=policy)
        options = worker_options(tool_timeout=30.0)
        host = worker_host(
            store, info, options, observer=NullObserver(), owner="w1", config=WorkerConfig()
        )
    assert host.policy.deny == ("rm *", "path:secrets/**")
    assert native(host) is False
    assert host.config.max_background == 2
    assert host.config.max_steps is None, "the limit recorded with each turn applies"
    assert host.config.tool_timeout_s == 30.0
    assert host.owner == "w1"


def test_a_worker_takes_no_loosening_setting_from_its_config_file(home: Path, ws: Path) -> None:
    (home / "config.toml").write_text('yes = true\nallow = ["*"]\nnetwork = true\n' + CONFIG)
    with SQLiteStore(home / "bubu.db") as store:
        info = submit(store, task="say done", workspace=ws, model=MODEL)
        host = worker_host(
            store,
            info,
            worker_options(),
            observer=NullObserver(),
            owner="w1",
            config=WorkerConfig(),
        )
    assert not host.policy.yes
    assert not host.policy.allow_commands
    assert not host.policy.network
    assert host.policy.deny == ("rm *", "path:secrets/**")


def test_the_python_api_host_carries_the_agents_own_choices(home: Path) -> None:
    policy = Policy(deny=("rm *",))
    provider = ScriptedProvider(str(write_script(home / "s.jsonl", [{"text": "ok"}])))
    with Agent(
        provider, store=home / "bubu.db", policy=policy, config=RunConfig(max_background=2)
    ) as agent:
        host = agent.host()
    assert host.policy.deny == ("rm *",)
    assert host.config.max_background == 2
    assert set(builtin_tools()) <= set(host.tools)
    assert host.mcp_config is None
    assert host.load_tools is None


def test_the_config_options_are_those_the_cli_reads(home: Path) -> None:
    options = config_options(None)
    assert options["deny"] == ["rm *", "path:secrets/**"]
    assert options["native_tools"] is False
    with SQLiteStore(home / "bubu.db") as store:
        host = assemble_host(store, MODEL, options)
    assert host.policy.deny == ("rm *", "path:secrets/**")
    assert native(host) is False


def test_a_worker_with_a_bad_config_file_refuses_to_start(home: Path) -> None:
    (home / "config.toml").write_text('deny = "rm *"\n')
    with pytest.raises(ConfigError, match="deny"):
        worker_options()
