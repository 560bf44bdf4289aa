"""`bubu rewind` and `bubu fork --restore-files`: the files go back with the log, crash-safely."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bubu.api import Agent
from bubu.engine.driver import owner_id
from bubu.engine.keep import KEEP_MAX_BYTES
from bubu.engine.rewind import preview, rewind
from bubu.errors import ConfigError, UnknownSession
from bubu.events import FunctionResponse, SystemNote, TurnEnded
from bubu.log.sqlite import SQLiteStore

START = {"a.txt": b"alpha\n", "b.txt": b"beta\n", "keep.txt": b"untouched\n"}

SCRIPT = [
    {
        "tool_calls": [
            {"name": "write_file", "arguments": {"path": "a.txt", "content": "ALPHA\n"}},
            {"name": "write_file", "arguments": {"path": "new/c.txt", "content": "created\n"}},
        ]
    },
    {
        "tool_calls": [
            {"name": "edit_file", "arguments": {"path": "b.txt", "old": "beta", "new": "BETA"}}
        ]
    },
    {"text": "first turn done"},
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "d.txt", "content": "dee\n"}}]},
    {
        "tool_calls": [
            {"name": "edit_file", "arguments": {"path": "a.txt", "old": "ALPHA", "new": "A2"}}
        ]
    },
    {"text": "second turn done"},
]


def _env(home: Path, **extra: str) -> dict[str, str]:
    drop = ("BUBU_", "OPENAI_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["BUBU_HOME"] = str(home)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    env.update(extra)
    return env


def bubu(tmp: Path, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    """`bubu --db tmp/bubu.db ARGS…` in a real process, with no terminal."""
    out = subprocess.run(
        [sys.executable, "-m", "bubu", "--db", str(tmp / "bubu.db"), *args],
        capture_output=True,
        text=True,
        env=_env(tmp / "home", **env),
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    if check and out.returncode != 0:
        raise AssertionError(f"bubu {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return out


def files(ws: Path) -> dict[str, bytes]:
    """Every file below `ws` with its bytes (directories left empty do not count)."""
    return {
        str(p.relative_to(ws)): p.read_bytes()
        for p in sorted(ws.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def session(tmp_path: Path) -> tuple[Path, Path, str]:
    """A session of two turns that wrote, edited and created files: (tmp, workspace, id)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for name, data in START.items():
        (ws / name).write_bytes(data)
    script = tmp_path / "model.jsonl"
    script.write_text("".join(json.dumps(line) + "\n" for line in SCRIPT))
    model = f"scripted:{script}"
    with Agent(model=model, store=tmp_path / "bubu.db", workspace=ws) as agent:
        sid = agent.run("change the files").session
        agent.continue_("more")
    assert files(ws) == {
        "a.txt": b"A2\n",
        "b.txt": b"BETA\n",
        "d.txt": b"dee\n",
        "keep.txt": b"untouched\n",
        "new/c.txt": b"created\n",
    }
    return tmp_path, ws.resolve(), sid


def _first_turn_end(db: Path, sid: str) -> int:
    with SQLiteStore(db) as store:
        return next(
            r.seq
            for r in store.read(sid)
            if isinstance(r.event.content, SystemNote)
            and isinstance(r.event.content.note, TurnEnded)
        )


def test_every_write_keeps_the_content_it_replaced(session: tuple[Path, Path, str]) -> None:
    tmp, _, sid = session
    with SQLiteStore(tmp / "bubu.db") as store:
        dispatches = [
            r.event.actions.tool_dispatch
            for r in store.read(sid, kinds=("tool_dispatch",))
            if r.event.actions is not None and r.event.actions.tool_dispatch is not None
        ]
        writes = [d for d in dispatches if d.before_sha256]
        assert len(writes) == 3  # a.txt twice, b.txt once; the created files had no content
        for d in writes:
            assert d.before_sha256 is not None
            kept = store.blob(d.before_sha256)
            assert kept is not None
            assert hashlib.sha256(kept).hexdigest() == d.before_sha256
        assert store.blob(hashlib.sha256(b"alpha\n").hexdigest()) == b"alpha\n"


@pytest.mark.slow
def test_rewind_to_before_the_first_write_restores_every_file_but_the_hand_changed_one(
    session: tuple[Path, Path, str],
) -> None:
    tmp, ws, sid = session
    (ws / "b.txt").write_bytes(b"changed by hand\n")
    shown = bubu(tmp, "rewind", sid, "--to", "0", check=False)
    assert shown.returncode == 2  # no terminal, no --yes: the preview only
    assert "confirm with --yes" in shown.stderr
    assert "restore   a.txt" in shown.stdout
    assert "changed   b.txt" in shown.stdout
    assert "delete    d.txt" in shown.stdout
    assert "delete    new/c.txt" in shown.stdout
    assert files(ws)["a.txt"] == b"A2\n"  # nothing was done
    done = bubu(tmp, "rewind", sid, "--to", "0", "--yes", "--json")
    out = json.loads(done.stdout)
    fork = out["done"]["fork"]
    assert files(ws) == {**START, "b.txt": b"changed by hand\n"}
    actions = {f["path"]: f["action"] for f in out["preview"]["files"]}
    assert actions == {
        "a.txt": "restore",
        "b.txt": "changed",
        "d.txt": "delete",
        "new/c.txt": "delete",
    }
    verify = json.loads(bubu(tmp, "verify", "--json").stdout)
    assert verify["ok"] is True
    with SQLiteStore(tmp / "bubu.db") as store:
        info = store.session(fork)
        assert info.workspace == str(ws)
        st = bubu(tmp, "status", sid, "--json", check=False)
        assert json.loads(st.stdout)["status"] == "completed"
        ended = store.read(sid)[-1].event.content
        assert isinstance(ended, SystemNote)
        assert isinstance(ended.note, TurnEnded)
        assert fork in (ended.note.message or "")


def test_a_named_file_is_overwritten_though_it_changed(session: tuple[Path, Path, str]) -> None:
    tmp, ws, sid = session
    (ws / "b.txt").write_bytes(b"changed by hand\n")
    bubu(tmp, "rewind", sid, "--to", "0", "--yes", "--force-file", "b.txt")
    assert files(ws) == START


def test_rewind_to_the_end_of_the_first_turn(session: tuple[Path, Path, str]) -> None:
    tmp, ws, sid = session
    end = _first_turn_end(tmp / "bubu.db", sid)
    fork = bubu(tmp, "rewind", sid, "--to", str(end), "--yes").stdout.strip().splitlines()[-1]
    assert files(ws) == {
        "a.txt": b"ALPHA\n",
        "b.txt": b"BETA\n",
        "keep.txt": b"untouched\n",
        "new/c.txt": b"created\n",
    }
    with SQLiteStore(tmp / "bubu.db") as store:
        assert store.head(fork).high_water == end + 2  # the copy, its facts and its note


def test_fork_restore_files_deletes_nothing_and_keeps_the_original(
    session: tuple[Path, Path, str],
) -> None:
    tmp, ws, sid = session
    with SQLiteStore(tmp / "bubu.db") as store:
        before = [(r.seq, r.hash) for r in store.read(sid)]
    out = json.loads(
        bubu(tmp, "fork", sid, "--at", "0", "--restore-files", "--yes", "--json").stdout
    )
    assert {f["path"]: f["action"] for f in out["preview"]["files"]}["d.txt"] == "keep"
    assert files(ws) == {**START, "d.txt": b"dee\n", "new/c.txt": b"created\n"}
    with SQLiteStore(tmp / "bubu.db") as store:
        after = [(r.seq, r.hash) for r in store.read(sid)]
        assert after[: len(before)] == before  # every event of the original is kept
        assert store.session(out["done"]["fork"]).workspace == str(ws)
    assert json.loads(bubu(tmp, "verify", "--json").stdout)["ok"] is True


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "decision"),
    [
        ("mid_rewind@1", "rerun_not_applied"),
        ("mid_rewind@3", "rerun_not_applied"),
        ("after_tool@3", "applied"),
    ],  # the 3rd restore deletes d.txt: proven by its absence
)
def test_a_kill_mid_rewind_is_recovered_to_a_consistent_state(
    session: tuple[Path, Path, str], point: str, decision: str
) -> None:
    tmp, ws, sid = session
    killed = bubu(tmp, "rewind", sid, "--to", "0", "--yes", check=False, BUBU_FAILPOINT=point)
    assert killed.returncode == -signal.SIGKILL
    with SQLiteStore(tmp / "bubu.db") as store:
        assert len(store.sessions()) == 1  # killed before the fork
    status = json.loads(bubu(tmp, "status", sid, "--json", check=False).stdout)
    assert status["status"] == "open turn"
    bubu(tmp, "recover", sid)
    assert files(ws) == START
    with SQLiteStore(tmp / "bubu.db") as store:
        assert len(store.sessions()) == 2  # the fork, made once
        results = [
            r.event.content.result
            for r in store.read(sid, kinds=("function_response",))
            if isinstance(r.event.content, FunctionResponse)
            and r.event.content.name == "restore_file"
        ]
        assert len(results) == 4  # each restore has exactly one outcome
        facts = [
            a.tool_recovery.decision
            for r in store.read(sid, kinds=("tool_recovery",))
            if (a := r.event.actions) is not None and a.tool_recovery is not None
        ]
        assert facts == [decision]
    assert json.loads(bubu(tmp, "status", sid, "--json").stdout)["status"] == "completed"
    assert json.loads(bubu(tmp, "verify", "--json").stdout)["ok"] is True


@pytest.mark.slow
def test_an_interrupted_rewind_is_finished_by_running_rewind_again(
    session: tuple[Path, Path, str],
) -> None:
    tmp, ws, sid = session
    killed = bubu(
        tmp, "rewind", sid, "--to", "0", "--yes", check=False, BUBU_FAILPOINT="mid_rewind@2"
    )
    assert killed.returncode == -signal.SIGKILL
    again = bubu(tmp, "rewind", sid, "--to", "0", "--yes")
    assert "finished the rewind" in again.stderr
    assert files(ws) == START
    assert json.loads(bubu(tmp, "verify", "--json").stdout)["ok"] is True


@pytest.mark.slow
def test_bad_input_gets_one_line_and_changes_nothing(session: tuple[Path, Path, str]) -> None:
    tmp, ws, sid = session
    for args, said in [
        (["nope", "--to", "0"], "no session matches 'nope'"),
        ([sid, "--to", "999"], "outside the session's events"),
        ([sid, "--to", "3"], "not a turn boundary; session"),
        ([sid, "--to", "-1"], "negative"),
        ([sid, "--to", "0", "--force-file", "zzz.txt"], "names no file this rewind touches"),
    ]:
        out = bubu(tmp, "rewind", *args, "--yes", check=False)
        assert out.returncode in (1, 2), out
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert said in lines[0], out.stderr
    assert "can be rewound to: 0, " in bubu(tmp, "rewind", sid, "--to", "3", check=False).stderr
    assert files(ws)["a.txt"] == b"A2\n"


def test_a_running_session_is_refused(session: tuple[Path, Path, str]) -> None:
    tmp, ws, sid = session
    with SQLiteStore(tmp / "bubu.db") as store:
        p = preview(store, sid, 0)
        lease = store.acquire_lease(sid, owner_id(), 60.0)
        with pytest.raises(ConfigError, match="is running; stop it first"):
            rewind(store, p)
        store.release_lease(lease)
        with pytest.raises(UnknownSession):
            preview(store, "ses_missing", 0)
    assert files(ws)["a.txt"] == b"A2\n"


def test_a_preview_that_went_stale_is_not_carried_out(session: tuple[Path, Path, str]) -> None:
    tmp, ws, sid = session
    with SQLiteStore(tmp / "bubu.db") as store:
        p = preview(store, sid, 0)
        (ws / "a.txt").write_bytes(b"edited after the preview\n")
        with pytest.raises(ConfigError, match="changed since the preview"):
            rewind(store, p)
    assert (ws / "a.txt").read_bytes() == b"edited after the preview\n"


def test_too_large_content_and_escaping_symlinks_cannot_be_restored(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.txt").write_bytes(b"x" * (KEEP_MAX_BYTES + 1))
    (ws / "link.txt").write_bytes(b"before\n")
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"secret place\n")
    script = tmp_path / "m.jsonl"
    script.write_text(
        json.dumps(
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "big.txt", "content": "small\n"}},
                    {"name": "write_file", "arguments": {"path": "link.txt", "content": "after\n"}},
                ]
            }
        )
        + "\n"
        + json.dumps({"text": "ok"})
        + "\n"
    )
    # Without snapshots only what the writes kept can be put back (with them, see
    # test_snapshot_rewind: the snapshot holds the large file too).
    bubu(
        tmp_path,
        "run",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        "go",
        BUBU_SNAPSHOTS="off",
    )
    (ws / "link.txt").unlink()
    (ws / "link.txt").symlink_to(outside)
    with SQLiteStore(tmp_path / "bubu.db") as store:
        sid = store.sessions()[0].id
        p = preview(store, sid, 0)
        acts = {f.path: (f.action, f.reason) for f in p.files}
        assert acts["big.txt"][0] == "cannot"
        assert "was not kept (over 2 MiB" in acts["big.txt"][1]
        assert acts["link.txt"][0] == "cannot"
        assert "out of the workspace" in acts["link.txt"][1]
        rewind(store, p)
    assert outside.read_bytes() == b"secret place\n"
    assert (ws / "big.txt").read_bytes() == b"small\n"


def _talk(tmp: Path, args: list[str], answers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """Run `bubu ARGS` on a pseudo-terminal, answering each prompt as it appears."""
    import pty
    import select

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bubu", "--db", str(tmp / "bubu.db"), *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=_env(tmp / "home"),
    )
    os.close(follower)
    out = b""
    todo = list(answers)
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 60)
            if not ready:
                raise AssertionError(f"no output for 60 s; so far: {out!r}")
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
            if todo and todo[0][0] in out.split(b"\n")[-1]:
                os.write(leader, todo.pop(0)[1])
    finally:
        os.close(leader)
        code = proc.wait(60)
    return code, out


@pytest.mark.slow
def test_at_a_terminal_each_changed_file_and_the_rewind_are_asked(
    session: tuple[Path, Path, str],
) -> None:
    tmp, ws, sid = session
    (ws / "b.txt").write_bytes(b"changed by hand\n")
    code, out = _talk(
        tmp,
        ["rewind", sid, "--to", "0"],
        [
            (b"b.txt was changed since Bubu's last write; overwrite it?", b"n\n"),
            (b"restore these files and fork at seq 0?", b"n\n"),
        ],
    )
    assert code == 0, out
    assert b"nothing was done" in out
    assert files(ws)["a.txt"] == b"A2\n"
    code, out = _talk(
        tmp,
        ["rewind", sid, "--to", "0"],
        [
            (b"overwrite it?", b"y\n"),
            (b"restore these files and fork at seq 0?", b"y\n"),
        ],
    )
    assert code == 0, out
    assert b"Traceback" not in out
    assert files(ws) == START  # b.txt too: the user said so
