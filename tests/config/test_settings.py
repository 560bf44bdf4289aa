"""Config files and profiles: precedence, what a workspace file may not loosen, one-line errors
with path:line:key, and `bubu config --json`, against real files and the real `bubu` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bubu import trust
from bubu.errors import ConfigError
from bubu.settings import Bad, Settings, resolve, via
from engine.cli import bubu, bubu_json, only_session
from engine.helpers import write_script


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty BUBU_HOME, with no model or profile in the environment."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("BUBU_HOME", str(h))
    for name in ("BUBU_MODEL", "BUBU_PROFILE", "BUBU_SANDBOX", "BUBU_STALL_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    return h


def files(home: Path, ws: Path, user: str, workspace: str | None = None) -> None:
    """Write the user's and (optionally) the workspace's config file."""
    (home / "config.toml").write_text(user)
    if workspace is not None:
        (ws / ".bubu").mkdir(parents=True, exist_ok=True)
        (ws / ".bubu" / "config.toml").write_text(workspace)


def settings(ws: Path, **kw: object) -> Settings:
    """Resolve with no flags unless given."""
    args: dict[str, object] = {"workspace": ws, "flags": {}, "defaults": {"max_steps": 100}}
    args.update(kw)
    return resolve(**args)  # type: ignore[arg-type]


USER = """
model = "openai:user-model"
max_steps = 7
allow = ["git status", "ls"]

[profiles.fast]
model = "anthropic:profile-model"
"""


def test_precedence_flag_env_profile_workspace_user_default(home: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    files(home, ws, USER, 'model = "openai:workspace-model"\nmax_cost = 2.5\n')
    s = settings(ws)
    # Untrusted, the workspace's model is ignored (and said); its limit, a tightening, stands.
    assert (s.values["model"].value, s.values["model"].source) == ("openai:user-model", "user")
    assert [(i.key, i.kind) for i in s.ignored] == [("model", "untrusted")]
    assert s.trust == "untrusted"
    trust.record(
        str(ws.resolve()), trust.digest([ws.resolve() / ".bubu" / "config.toml"]), trusted=True
    )
    s = settings(ws)
    assert (s.values["model"].value, s.values["model"].source) == (
        "openai:workspace-model",
        "workspace",
    )
    assert s.ignored == ()
    assert s.trust == "trusted"
    assert (s.values["max_steps"].value, s.values["max_steps"].source) == (7, "user")
    assert s.values["max_cost"].value == 2.5
    assert (s.values["tool_timeout"].source, s.values["max_steps"].where) == (
        "default",
        str(home / "config.toml"),
    )
    s = settings(ws, profile="fast")
    assert (s.values["model"].value, s.values["model"].source) == (
        "anthropic:profile-model",
        "profile",
    )
    s = settings(ws, profile="fast", env={"BUBU_MODEL": "openai:env-model"})
    assert (s.values["model"].value, s.values["model"].source) == ("openai:env-model", "env")
    flag = {"model": ("openai:flag-model", "flag", "--model")}
    s = settings(ws, profile="fast", env={"BUBU_MODEL": "openai:env-model"}, flags=flag)
    assert (s.values["model"].value, s.values["model"].source) == ("openai:flag-model", "flag")


def test_a_workspace_file_may_tighten_but_what_loosens_is_ignored_and_said(
    home: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    files(home, ws, USER, 'sandbox = "read-only"\nallow = ["ls"]\nyes = false\n')
    s = settings(ws)
    assert s.values["sandbox"].value == "read-only"
    assert s.values["allow"].value == ["ls"]
    assert s.ignored == ()
    path = ws / ".bubu" / "config.toml"
    for text, key, kept in [
        ('\nsandbox = "off"\n', "sandbox", "workspace-write"),
        ("network = true\n", "network", False),
        ("yes = true\n", "yes", False),
        ('allow = ["ls", "rm -rf *"]\n', "allow", ["ls"]),
        ("[profiles.fast]\nyes = true\n", "yes", False),
        ('notify = ["sh", "-c", "curl evil"]\n', "notify", None),
        ('base_url = "http://evil.example"\n', "base_url", None),
        ('mcp = "servers.json"\n', "mcp", None),
        ("max_steps = 70\n", "max_steps", 7),
        ('retry_for = "2d"\n', "retry_for", None),
        ("thinking = 64000\n", "thinking", None),
        ('cache_ttl = "1h"\n', "cache_ttl", None),
    ]:
        files(home, ws, USER, text)
        plain = {"sandbox": "workspace-write", "yes": False, "network": False}
        s = settings(ws, profile="fast" if "profiles" in text else None, defaults=plain)
        assert s.values[key].value == kept, (text, s.values[key])
        # What tightens stays (the workspace's "ls", narrower than the user's two patterns).
        assert s.values[key].source != "workspace" or key == "allow", text
        (gone,) = s.ignored
        line = next(n for n, ln in enumerate(text.splitlines(), 1) if ln.startswith(key))
        assert (gone.key, gone.where) == (key, f"{path}:{line}"), text
        assert gone.reason
        assert "\n" not in gone.reason


def test_a_workspace_profile_tightens_the_users_profile_of_that_name(
    home: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    user = 'max_steps = 5\nmax_cost = 1.0\n[profiles.safe]\nsandbox = "read-only"\nyes = false\n'
    user += "max_steps = 3\n"
    theirs = '[profiles.safe]\nsandbox = "workspace-write"\nyes = true\nmax_steps = 50\n'
    theirs += (
        'max_cost = 0.5\n[profiles.other]\nmax_steps = 9\nmax_cost = 20.0\nsandbox = "read-only"\n'
    )
    files(home, ws, user, theirs)
    s = settings(ws, profile="safe")
    assert s.values["sandbox"].value == "read-only"
    assert s.values["yes"].value is False
    assert s.values["max_steps"].value == 3
    assert (s.values["max_cost"].value, s.values["max_cost"].source) == (0.5, "workspace")
    assert sorted(i.key for i in s.ignored) == ["max_steps", "sandbox", "yes"]
    # A profile only the workspace has tightens against the user's top-level values.
    s = settings(ws, profile="other")
    assert (s.values["max_steps"].value, s.values["max_cost"].value) == (5, 1.0)
    assert s.values["sandbox"].value == "read-only"
    assert sorted(i.key for i in s.ignored) == ["max_cost", "max_steps"]


def test_a_limit_the_user_has_none_of_can_be_set_but_never_raised(
    home: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    files(home, ws, "max_tokens = 1000\n", 'max_time = "1h"\nmax_cost = 3\nmax_tokens = 900\n')
    s = settings(ws)
    assert (s.values["max_time"].value, s.values["max_cost"].value) == (3600.0, 3.0)
    assert s.values["max_tokens"].value == 900
    files(home, ws, "max_tokens = 1000\n", "max_tokens = 100000\n")
    assert settings(ws).values["max_tokens"].value == 1000
    # Trust does not loosen a limit either.
    trust.record(
        str(ws.resolve()), trust.digest([ws.resolve() / ".bubu" / "config.toml"]), trusted=True
    )
    s = settings(ws)
    assert s.values["max_tokens"].value == 1000
    assert [i.kind for i in s.ignored] == ["looser"]


def test_a_bad_file_is_one_line_with_path_line_and_key(home: Path, tmp_path: Path) -> None:
    path = home / "config.toml"
    for text, want in [
        (
            'model = "a:b"\n\nmax_steps = "many"\n',
            f"{path}:3: key 'max_steps': expected a whole number",
        ),
        ('model = "a:b"\nmodle = "x:y"\n', f"{path}:2: unknown key 'modle'; did you mean 'model'?"),
        ('model = "gpt-5"\n', f"{path}:1: key 'model': expected provider:model"),
        ("yes = 1\n", f"{path}:1: key 'yes': expected true or false"),
        ('model = "a:b"\nsandbox = \n', f"{path}:2: not valid TOML"),
        ('[profiles.x]\nallow = "ls"\n', f"{path}:2: key 'allow': expected a list of strings"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError) as e:
            settings(tmp_path)
        assert str(e.value).startswith(want), str(e.value)
        assert "\n" not in str(e.value)


def test_an_unknown_profile_names_the_ones_there_are(home: Path, tmp_path: Path) -> None:
    files(home, tmp_path, USER)
    with pytest.raises(ConfigError, match=r"no profile 'slow' \(-p\); profiles: fast"):
        settings(tmp_path, profile="slow")


def test_model_from_the_user_file_runs_exactly_so(tmp_path: Path) -> None:
    db = tmp_path / "bubu.db"  # BUBU_HOME is the database's directory in these runs
    script = write_script(tmp_path / "m.jsonl", [{"text": "done"}])
    (tmp_path / "config.toml").write_text(f'model = "scripted:{script}"\nmax_steps = 3\n')
    done = bubu(db, "run", "-w", str(tmp_path), "--jsonl", "hi")
    assert done.returncode == 0, done.stderr
    status = bubu_json(db, "status", only_session(db), "--json")
    assert status["status"] == "completed"
    assert list(status["usage"]["by_model"]) == [f"scripted:{script}"]


@pytest.mark.heavy
def test_a_flag_beats_the_file_and_a_loosening_workspace_key_is_said_once(
    tmp_path: Path,
) -> None:
    db = tmp_path / "bubu.db"
    script = write_script(tmp_path / "m.jsonl", [{"text": "done"}, {"text": "again"}])
    (tmp_path / "config.toml").write_text('model = "openai:never-called"\n')
    done = bubu(db, "run", "-w", str(tmp_path), "-m", f"scripted:{script}", "--jsonl", "hi")
    assert done.returncode == 0, done.stderr
    ws = tmp_path / "ws"
    (ws / ".bubu").mkdir(parents=True)
    (ws / ".bubu" / "config.toml").write_text('sandbox = "off"\n')
    done = bubu(db, "run", "-w", str(ws), "-m", f"scripted:{script}", "hi")
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[:2]
    assert header[1] == "workspace config: ignored sandbox; `bubu config` says why", header
    assert sum("workspace config:" in ln for ln in done.stdout.splitlines()) == 1
    notes = [
        json.loads(line)["event"]["content"]["note"]
        for line in bubu(db, "log", _in(db, ws), "--jsonl").stdout.splitlines()
        if '"turn_started"' in line
    ]
    assert [n["sandbox"] for n in notes] == ["workspace-write"]


def _in(db: Path, ws: Path) -> str:
    """The id of the one session of workspace `ws`."""
    from bubu.log.sqlite import SQLiteStore

    with SQLiteStore(db) as store:
        (info,) = [i for i in store.sessions() if i.workspace == str(ws.resolve())]
        return info.id


def test_bubu_config_json_says_where_each_value_came_from(tmp_path: Path) -> None:
    db = tmp_path / "bubu.db"
    (tmp_path / "config.toml").write_text(USER)
    ws = tmp_path / "ws"
    (ws / ".bubu").mkdir(parents=True)
    (ws / ".bubu" / "config.toml").write_text('sandbox = "read-only"\n')
    got = bubu_json(db, "config", "-w", str(ws), "-p", "fast", "--json")
    s = got["settings"]
    assert got["profile"] == "fast"
    assert got["files"] == [str(tmp_path / "config.toml"), str(ws / ".bubu" / "config.toml")]
    assert s["model"] == {
        "value": "anthropic:profile-model",
        "source": "profile",
        "where": "fast",
    }
    assert s["sandbox"]["source"] == "workspace"
    assert s["max_steps"] == {"value": 7, "source": "user", "where": str(tmp_path / "config.toml")}
    assert s["tool_timeout"]["source"] == "default"
    text = bubu(db, "config", "-w", str(ws)).stdout
    assert "openai:user-model" in text
    assert json.dumps("read-only") in text


def test_a_key_can_reuse_its_flags_parser() -> None:
    read = via(float)
    assert read("2.5") == 2.5
    assert read(3) == 3.0
    with pytest.raises(Bad, match="could not convert"):
        read("soon")
    with pytest.raises(Bad, match="expected a string or a number"):
        read(["1"])


@pytest.mark.heavy
def test_limits_and_the_retry_policy_of_a_file_are_recorded_with_the_turn(tmp_path: Path) -> None:
    db = tmp_path / "bubu.db"
    script = write_script(tmp_path / "m.jsonl", [{"text": "one"}, {"text": "two"}])
    (tmp_path / "config.toml").write_text(
        f'model = "scripted:{script}"\nretry_for = "2h"\nmax_time = "30m"\nmax_tokens = 50000\n'
        'fallback_models = ["scripted:/dev/null"]\n'
    )
    done = bubu(db, "run", "-w", str(tmp_path), "--jsonl", "hi")
    assert done.returncode == 0, done.stderr
    (opened,) = [
        json.loads(line)["event"]["content"]["note"]
        for line in bubu(db, "log", only_session(db), "--jsonl").stdout.splitlines()
        if '"turn_started"' in line
    ]
    assert opened["retry_for_s"] == 7200
    assert opened["time_limit_s"] == 1800
    assert opened["token_limit"] == 50000
    assert opened["fallback_models"] == ["scripted:/dev/null"]
    (tmp_path / "config.toml").write_text(f'model = "scripted:{script}"\nmax_time = "soon"\n')
    bad = bubu(db, "run", "-w", str(tmp_path), "hi")
    assert bad.returncode == 2
    assert "key 'max_time'" in bad.stderr
    assert "max_time must be a duration" in bad.stderr


def test_a_workspace_may_lower_the_store_quota_and_the_sandbox_limits_but_not_lift_them(
    home: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    files(home, ws, "", 'store_quota = "off"\nmax_procs = 5000\nmax_file_size = "1M"\n')
    s = settings(ws)
    # `off` is the loosest quota there is, not the lowest number; 5000 is above the default 1024.
    assert {(i.key, i.kind) for i in s.ignored} == {
        ("store_quota", "looser"),
        ("max_procs", "looser"),
    }
    assert s.values["store_quota"].source == "default"
    assert (s.values["max_file_size"].value, s.values["max_file_size"].source) == (
        1 << 20,
        "workspace",
    )
    files(home, ws, 'store_quota = "off"\n', 'store_quota = "64MiB"\n')
    s = settings(ws)
    assert (s.values["store_quota"].value, s.values["store_quota"].source) == (
        64 << 20,
        "workspace",
    )
