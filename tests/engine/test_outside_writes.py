"""A write outside the workspace asks a person, `--yes` or not, and `--allow-write PATH` lets
exactly that path through: real `bubu run` processes with a fake HOME, a scripted model and no
terminal, so nobody can answer."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bubu.events import FunctionResponse, PermissionRequest, Record, SystemNote, TurnStarted
from bubu.log.sqlite import SQLiteStore

from .cli import bubu_cmd, bubu_env
from .helpers import call, calls, outcomes, write_script

PLANTED = "touch /tmp/pwned-by-bubu\n"

HOME_FILES = [
    ".config/git/config",  # core.fsmonitor runs at the next `git status`
    ".gitconfig",
    ".bashrc",
    ".zshrc",
    ".bash_aliases",
    ".config/fish/conf.d/aliases.fish",
    ".config/autostart/evil.desktop",
    ".config/systemd/user/evil.service",
    ".npmrc",
    ".tmux.conf",
    ".vimrc",
    ".config/nvim/init.lua",
    ".emacs.d/init.el",
]


class Home:
    """A fake home directory with a Bubu home not named `.bubu` and a workspace in it."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.home = tmp_path / "home"
        self.bubu_home = tmp_path / "state"  # BUBU_HOME, not named .bubu
        self.ws = self.home / "src" / "project"
        self.ws.mkdir(parents=True)
        self.bubu_home.mkdir()
        self.db = self.bubu_home / "bubu.db"
        self.records: list[Record] = []

    def run(
        self, tool_calls: list[dict[str, object]], *flags: str
    ) -> tuple[list[FunctionResponse], list[PermissionRequest]]:
        script = write_script(self.tmp / "s.jsonl", [{"tool_calls": tool_calls}, {"text": "done"}])
        env = {**bubu_env(self.bubu_home), "HOME": str(self.home)}
        env.pop("XDG_CONFIG_HOME", None)
        env.pop("XDG_DATA_HOME", None)
        done = subprocess.run(
            bubu_cmd(
                self.db,
                "run",
                "the task",
                "-w",
                str(self.ws),
                "-m",
                f"scripted:{script}",
                "--sandbox",
                "off",
                *flags,
            ),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode == 0, done.stderr
        with SQLiteStore(self.db) as store:
            (info,) = [s for s in store.sessions() if s.workspace == str(self.ws)][-1:]
            records = store.read(info.id)
        self.records = records
        by_call = outcomes(records)
        # In the order of the calls (a denied call's outcome is committed before the others).
        results = [by_call[c.call_id][-1][1] for _, c in calls(records)]
        requests = [
            r.event.actions.permission_request
            for r in records
            if r.event.actions is not None and r.event.actions.permission_request is not None
        ]
        return results, requests


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path)


def test_every_write_in_the_home_directory_asks_under_yes(home: Home) -> None:
    targets = [str(home.home / rel) for rel in HOME_FILES] + [
        str(home.bubu_home / "mcp.json"),
        str(home.bubu_home / "config.toml"),
    ]
    results, requests = home.run(
        [call("write_file", path=t, content=PLANTED) for t in targets], "--yes"
    )
    assert len(results) == len(targets)
    for target, result in zip(targets, results, strict=True):
        assert result.is_error, target
        assert result.result.startswith("permission denied: nobody was there to approve it"), (
            result.result
        )
        assert "--yes does not" in result.result, target
        assert not os.path.lexists(target), f"{target} was written"
    assert [r.protected for r in requests] == [True] * len(targets)


def test_an_edit_outside_the_workspace_asks_under_yes(home: Home) -> None:
    gitconfig = home.home / ".config" / "git" / "config"
    gitconfig.parent.mkdir(parents=True)
    gitconfig.write_text("[core]\n\teditor = vi\n")
    results, _ = home.run(
        [call("edit_file", path=str(gitconfig), old="[core]\n", new='[core]\n\tfsmonitor = "x"\n')],
        "--yes",
    )
    assert results[0].is_error
    assert gitconfig.read_text() == "[core]\n\teditor = vi\n"


def test_allow_write_lets_exactly_the_named_path_through(home: Home) -> None:
    npmrc = home.home / ".npmrc"
    others = [home.home / ".npmrc2", home.home / ".config" / "git" / "config"]
    results, requests = home.run(
        [call("write_file", path=str(p), content="x=1\n") for p in [npmrc, *others]],
        "--allow-write",
        str(npmrc),
    )
    assert [r.is_error for r in results] == [False, True, True]
    assert npmrc.read_text() == "x=1\n"
    assert not any(p.exists() for p in others)
    assert len(requests) == 2, "the named path was not asked about"
    (started,) = [
        r.event.content.note
        for r in home.records
        if isinstance(r.event.content, SystemNote) and isinstance(r.event.content.note, TurnStarted)
    ]
    assert started.allow_write == [str(npmrc)], "recorded, so a recovery writes the same"


def test_a_directory_named_with_allow_write_keeps_its_protected_files(home: Home) -> None:
    notes = home.tmp / "notes"
    notes.mkdir()
    paths = [
        notes / "todo.md",
        notes / "deep" / "x.txt",
        notes / ".git" / "config",
        notes / ".envrc",
    ]
    results, _ = home.run(
        [call("write_file", path=str(p), content="x\n") for p in paths],
        "--yes",
        "--allow-write",
        str(notes),
    )
    assert [r.is_error for r in results] == [False, False, True, True]
    assert (notes / "todo.md").read_text() == "x\n"
    assert not (notes / ".git").exists()
    assert not (notes / ".envrc").exists()


def test_allow_write_from_the_user_config_file(home: Home) -> None:
    target = home.tmp / "shared" / "out.txt"
    target.parent.mkdir()
    (home.bubu_home / "config.toml").write_text(f'allow_write = ["{target}"]\n')
    results, requests = home.run([call("write_file", path=str(target), content="x\n")])
    assert [r.is_error for r in results] == [False]
    assert requests == []
    assert target.read_text() == "x\n"


def test_a_workspace_file_may_not_name_paths_to_write(home: Home) -> None:
    (home.ws / ".bubu").mkdir()
    (home.ws / ".bubu" / "config.toml").write_text(f'allow_write = ["{home.home}"]\n')
    script = write_script(home.tmp / "s.jsonl", [{"text": "done"}])
    done = subprocess.run(
        bubu_cmd(home.db, "run", "t", "-w", str(home.ws), "-m", f"scripted:{script}"),
        env={**bubu_env(home.bubu_home), "HOME": str(home.home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    # Ignored, not obeyed: the run goes on and says so once.
    assert done.returncode == 0, done.stderr
    assert "ignored allow_write" in done.stdout + done.stderr, done.stdout


def test_bubu_home_inside_the_workspace_is_protected_whatever_its_name(home: Home) -> None:
    # BUBU_HOME reached through a symlink: the workspace holds the real directory.
    real = home.ws / "state"
    real.mkdir()
    link = home.tmp / "bubu-link"
    link.symlink_to(real)
    home.bubu_home = link
    home.db = home.tmp / "bubu.db"
    results, requests = home.run(
        [
            call("write_file", path=f"state/{name}", content="{}\n")
            for name in ("mcp.json", "config.toml")
        ],
        "--yes",
    )
    assert [r.is_error for r in results] == [True, True]
    assert "Bubu's home directory" in results[0].result
    assert not (real / "mcp.json").exists()
    assert not (real / "config.toml").exists()
    assert all(r.protected for r in requests)


def test_the_log_database_inside_the_workspace_is_protected(home: Home) -> None:
    home.db = home.ws / "logs" / "bubu.db"
    home.db.parent.mkdir()
    results, _ = home.run(
        [call("write_file", path=f"logs/bubu.db{s}", content="x") for s in ("", "-wal", "-journal")]
        + [call("write_file", path="logs/other.txt", content="x")],
        "--yes",
    )
    assert [r.is_error for r in results] == [True, True, True, False]
    assert "Bubu's log database" in results[0].result
    with SQLiteStore(home.db) as store:
        assert store.sessions(), "the log is intact"


def _in_process(
    tmp_path: Path, ws: Path, tool_calls: list[dict[str, object]], allow_write: tuple[str, ...] = ()
) -> list[FunctionResponse]:
    """One turn under --yes in this process, nobody to ask; the outcomes in call order."""
    from dataclasses import replace

    from bubu.engine.permissions import Policy
    from bubu.engine.session import new_session, start_turn

    from .helpers import make_host, scripted

    script = write_script(tmp_path / "s.jsonl", [{"tool_calls": tool_calls}, {"text": "ok"}])
    with SQLiteStore(tmp_path / "in-process.db") as store:
        provider = scripted(script)
        info = new_session(store, task="t", workspace=ws, model=provider.spec)
        policy = Policy(yes=True, allow_write=allow_write)
        host = make_host(store, provider, policy=replace(policy, sandbox="off"))
        assert start_turn(host, info, "t") == "completed"
        records = store.read(info.id)
    by_call = outcomes(records)
    return [by_call[c.call_id][-1][1] for _, c in calls(records)]


def test_a_workspace_that_is_the_home_directory_keeps_its_dot_files_protected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    xdg = tmp_path / "xdg-config"
    for d in (home / "src", xdg):
        d.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.setenv("BUBU_HOME", str(tmp_path / "state"))
    protected = [".config/git/config", ".local/share/applications/x.desktop", ".tmux.conf"]
    results = _in_process(
        tmp_path,
        home,
        [call("write_file", path=p, content="x\n") for p in [*protected, "src/app.py"]]
        + [call("write_file", path=str(xdg / "git" / "config"), content="x\n")],
    )
    assert [r.is_error for r in results] == [True, True, True, False, True]
    assert "in your home directory" in results[0].result, results[0].result
    assert "dot-file of your home directory" in results[2].result
    assert not (home / ".config").exists()
    assert not (xdg / "git").exists()


def test_a_workspace_inside_a_dot_directory_of_home_is_the_users_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    ws = home / ".config" / "nvim"
    ws.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("BUBU_HOME", str(tmp_path / "state"))
    results = _in_process(tmp_path, ws, [call("write_file", path="init.lua", content="x\n")])
    assert [r.is_error for r in results] == [False]
    assert (ws / "init.lua").read_text() == "x\n"


def test_a_directory_named_inside_a_dot_directory_of_home_opens_only_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    ws = home / "src"
    app = home / ".config" / "myapp"
    for d in (ws, app, home / ".config" / "git"):
        d.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("BUBU_HOME", str(tmp_path / "state"))
    results = _in_process(
        tmp_path,
        ws,
        [
            call("write_file", path=str(app / "settings.json"), content="{}\n"),
            call("write_file", path=str(home / ".config" / "git" / "config"), content="x\n"),
            call("write_file", path=str(home / ".bashrc"), content="x\n"),
        ],
        allow_write=(str(app), str(home)),
    )
    assert [r.is_error for r in results] == [False, True, True]
    assert (app / "settings.json").read_text() == "{}\n"


def test_an_imported_log_grants_no_paths_to_write(tmp_path: Path) -> None:
    from bubu import clock
    from bubu.events import Event, SessionStarted
    from bubu.events import make as make_event
    from bubu.projections.turn import fold

    def note(sid: str, n: TurnStarted | SessionStarted, turn: str | None) -> Event:
        return make_event(
            session=sid,
            turn=turn,
            role="system",
            author="system",
            ts=clock.now_ms(),
            content=SystemNote(note=n),
            visibility="hidden",
        )

    with SQLiteStore(tmp_path / "b.db") as store:
        info = store.create_session(title="t", workspace=str(tmp_path), events=[])
        started = TurnStarted(model="scripted:x", allow_write=["/home/u"])
        store.append(info.id, [note(info.id, started, "trn_1")], expect=0)
        assert fold(store.read(info.id)).allow_write == ("/home/u",)
        mark = SessionStarted(workspace=str(tmp_path), title="t", origin="import")
        store.append(info.id, [note(info.id, mark, None)], expect=store.head(info.id).high_water)
        assert fold(store.read(info.id)).allow_write == ()
