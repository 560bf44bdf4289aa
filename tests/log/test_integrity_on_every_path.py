"""A session whose log was altered in the real SQLite file is never run again: `bubu run -c`,
`--session`, `resume` and the web UI refuse with the reason and write nothing, and `bubu
sessions` marks it. And read-only means read-only: the file tools refuse under `--sandbox
read-only` as the sandbox does, and the model is told so."""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from backends import tamper_payload
from bubu.engine.session import Host
from bubu.errors import CorruptLog
from bubu.events import FunctionResponse, Text, make
from bubu.log.sqlite import SQLiteStore
from bubu.providers.scripted import ScriptedProvider
from engine.cli import bubu, bubu_json, only_session
from engine.helpers import write_script


def _events(db: Path) -> int:
    with closing(sqlite3.connect(db)) as raw:
        (n,) = raw.execute("SELECT count(*) FROM events").fetchone()
        return int(n)


def altered_session(tmp_path: Path) -> tuple[Path, Path, str, Path]:
    """A completed session in a real database whose model answer was rewritten behind the
    store's back; the database, workspace, session id and the next turn's script."""
    db, ws = tmp_path / "bubu.db", tmp_path / "ws"
    ws.mkdir()
    first = write_script(tmp_path / "one.jsonl", [{"text": "the tests pass: bonjour"}])
    done = bubu(db, "run", "-w", str(ws), "-m", f"scripted:{first}", "--jsonl", "check it")
    assert done.returncode == 0, done.stderr
    sid = only_session(db)
    with SQLiteStore(db) as store:
        (seq,) = [
            r.seq
            for r in store.read(sid)
            if isinstance(r.event.content, Text) and "bonjour" in r.event.content.text
        ]
        tamper_payload(store, sid, seq, b"the tests pass", b"rm -rf is safe")
    second = write_script(tmp_path / "two.jsonl", [{"text": "continued"}])
    return db, ws, sid, second


@pytest.mark.heavy
def test_continuing_an_altered_session_is_refused_with_the_reason(tmp_path: Path) -> None:
    db, ws, sid, script = altered_session(tmp_path)
    before = _events(db)
    for args in (
        ("run", "-c", "-w", str(ws), "-m", f"scripted:{script}", "go on"),
        ("run", "--session", sid, "-m", f"scripted:{script}", "--jsonl", "go on"),
        ("resume", sid, "-m", f"scripted:{script}"),
    ):
        done = bubu(db, *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(
            f"bubu: error: session {sid} is not continued: its log does not verify at seq "
        ), line
        assert "does not match its content" in line
        assert f"`bubu verify {sid}`" in line
        assert "continued" not in done.stdout
        assert _events(db) == before  # nothing was written
    rows = bubu_json(db, "sessions", "--json")
    assert [(r["id"], r["verified"]) for r in rows] == [(sid, False)]
    assert "does not match its content" in rows[0]["integrity"]
    text = bubu(db, "sessions").stdout
    assert "does not verify at seq" in text


def test_a_host_verifies_the_log_after_the_runners_snapshot_and_the_facts_it_acts_on(
    tmp_path: Path,
) -> None:
    """Without a snapshot of the runner's state the whole log is verified; with one, the records
    after it (from its digest) and the rows of its prefix a run acts on (the first event, each
    turn's start). A row of the prefix nothing acts on, altered alone, is left to `bubu verify`
    and `bubu sessions`, which re-hash the whole chain."""
    from bubu.context.policy import ContextPolicy
    from bubu.engine import reload

    db, _, sid, script = altered_session(tmp_path)
    with SQLiteStore(db) as store:
        host = Host(store=store, provider=ScriptedProvider(str(script)), tools={})
        with pytest.raises(CorruptLog) as refused:
            host.check_integrity(sid)  # no snapshot: every record
        assert refused.value.session == sid

    policy = ContextPolicy()

    def session_with_snapshot(name: str) -> tuple[SQLiteStore, Host, str]:
        store = SQLiteStore(tmp_path / f"{name}.db")
        host = Host(store=store, provider=ScriptedProvider(str(script)), tools={})
        clean = store.create_session(title="t", workspace=str(tmp_path)).id
        for i, text in enumerate(("hello", "world", "again", "and", "again")):
            ev = make(session=clean, role="user", author="user", ts=1, content=Text(text=text))
            store.append(clean, [ev], expect=i)
        reload.load(store, clean, policy, save_every=1)  # a snapshot at seq 5
        last = make(session=clean, role="user", author="user", ts=1, content=Text(text="later"))
        store.append(clean, [last], expect=5)
        host.check_integrity(clean)
        return store, host, clean

    # A record after the snapshot, altered: refused.
    store, host, clean = session_with_snapshot("suffix")
    with store:
        tamper_payload(store, clean, 6, b"later", b"LATER")
        with pytest.raises(CorruptLog) as refused:
            host.check_integrity(clean)
        assert refused.value.seq == 6
    # The session's first event (its chained facts), altered below the snapshot: refused.
    store, host, clean = session_with_snapshot("facts")
    with store:
        tamper_payload(store, clean, 1, b"hello", b"hullo")
        with pytest.raises(CorruptLog) as refused:
            host.check_integrity(clean)
        assert refused.value.seq == 1
    # A row below the snapshot no run reads: the run goes on from the snapshot, and the whole
    # chain check of `bubu verify` and `bubu sessions` finds it.
    store, host, clean = session_with_snapshot("prefix")
    with store:
        tamper_payload(store, clean, 3, b"again", b"AGAIN")
        host.check_integrity(clean)
        assert not store.verify(clean).ok
    done = bubu(tmp_path / "prefix.db", "verify", clean)
    assert done.returncode == 1, done.stdout
    assert "at seq 3" in done.stdout, done.stdout
    rows = bubu_json(tmp_path / "prefix.db", "sessions", "--json")
    assert [(r["id"], r["verified"]) for r in rows] == [(clean, False)]


def test_the_web_ui_refuses_to_continue_an_altered_session(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from bubu.web import create_app

    db, ws, sid, _ = altered_session(tmp_path)
    before = _events(db)
    token = "test-token-0123456789"
    with SQLiteStore(db) as store:
        app = create_app(store, token=token, recover=False, workspace=str(ws), hosts=())
        with TestClient(
            app, base_url="http://127.0.0.1:8642", headers={"authorization": f"Bearer {token}"}
        ) as client:
            r = client.post(f"/api/sessions/{sid}/turns", json={"task": "go on"})
            assert r.status_code == 409, r.text
            assert "its log does not verify at seq" in r.json()["error"], r.text
    assert _events(db) == before


@pytest.mark.heavy
def test_read_only_file_tools_refuse_and_the_model_is_told(tmp_path: Path) -> None:
    db, ws = tmp_path / "bubu.db", tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("x = 1\n")
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "new.py", "content": "y = 2\n"}},
                    {
                        "name": "edit_file",
                        "arguments": {"path": "a.py", "old": "x = 1", "new": "x = 9"},
                    },
                    # The providers' own shapes of the file tools (OpenAI's apply_patch, Anthropic's
                    # text editor insert) are refused the same way.
                    {
                        "name": "apply_patch",
                        "arguments": {
                            "path": "p.py",
                            "operation": "create_file",
                            "diff": "+z = 3\n",
                        },
                    },
                    {
                        "name": "insert_text",
                        "arguments": {"path": "a.py", "insert_line": 1, "text": "w = 4\n"},
                    },
                ]
            },
            {"text": "done"},
        ],
    )
    done = bubu(
        db,
        "run",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--sandbox",
        "read-only",
        "--yes",
        "--jsonl",
        "change things",
    )
    assert done.returncode == 0, done.stderr
    assert not (ws / "new.py").exists()
    assert not (ws / "p.py").exists()
    assert (ws / "a.py").read_text() == "x = 1\n"
    results = [
        json.loads(line)["event"]["content"]
        for line in bubu(db, "log", only_session(db), "--jsonl").stdout.splitlines()
        if '"function_response"' in line
    ]
    assert len(results) == 4
    for r in results:
        assert r["is_error"] is True
        assert "--sandbox read-only, so no file may be written" in r["result"]
    # Refused, not asked: no permission request was made (--yes or not).
    assert '"permission_request"' not in bubu(db, "log", only_session(db), "--jsonl").stdout


def test_a_read_only_turn_does_not_merge_a_sub_agents_branch(tmp_path: Path) -> None:
    """A worktree sub-agent of an earlier turn left a branch; merging it in a read-only turn
    would write the workspace, so merge_child is refused there as the file tools are."""
    import subprocess

    db, ws = tmp_path / "bubu.db", tmp_path / "ws"
    ws.mkdir()
    env = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "PATH": os.environ["PATH"]}
    for args in (
        ["init", "-q"],
        ["add", "."],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i", "--allow-empty"],
    ):
        subprocess.run(["git", *args], cwd=ws, env=env, check=True)
    child = write_script(
        tmp_path / "child.jsonl",
        [
            {
                "tool_calls": [
                    {
                        "name": "write_file",
                        "arguments": {"path": "child.txt", "content": "from the child\n"},
                    }
                ]
            },
            {"text": "wrote it"},
        ],
    )
    parent = write_script(
        tmp_path / "parent.jsonl",
        [
            {
                "tool_calls": [
                    {
                        "name": "delegate",
                        "arguments": {
                            "task": "write child.txt",
                            "isolation": "worktree",
                            "model": f"scripted:{child}",
                        },
                    }
                ]
            },
            {"text": "delegated"},
            {"tool_calls": [{"name": "merge_child", "arguments": {"child": "ses_"}}]},
            {"text": "done"},
        ],
    )
    first = bubu(db, "run", "-w", str(ws), "-m", f"scripted:{parent}", "--yes", "delegate it")
    assert first.returncode == 0, first.stderr
    done = bubu(
        db,
        "run",
        "-c",
        "-w",
        str(ws),
        "-m",
        f"scripted:{parent}",
        "--sandbox",
        "read-only",
        "--yes",
        "--jsonl",
        "merge it",
    )
    assert done.returncode == 0, done.stderr
    assert not (ws / "child.txt").exists()
    with SQLiteStore(db) as store:
        (sid,) = [i.id for i in store.sessions() if i.workspace == str(ws.resolve())]
    log = bubu(db, "log", sid, "--jsonl").stdout
    merged = [
        json.loads(line)["event"]["content"]
        for line in log.splitlines()
        if '"function_response"' in line and "merge_child" in line
    ]
    assert merged, log
    assert merged[-1]["is_error"] is True
    assert "--sandbox read-only, so no file may be written" in merged[-1]["result"]


def test_a_read_only_turn_asks_a_person_for_a_tool_no_sandbox_confines(tmp_path: Path) -> None:
    """A plugin's or an MCP server's tool that may change something runs in Bubu's process or
    the server's, not in the sandbox: in a read-only turn --yes does not approve it."""
    from bubu import Agent, tool
    from bubu.engine.permissions import Policy

    ws = tmp_path / "ws"
    ws.mkdir()

    @tool(effect="side_effecting", permission="name")  # it asks, as an MCP server's tools do
    def stamp(name: str) -> str:
        """Write a stamp file."""
        (ws / name).write_text("stamped\n")
        return "stamped"

    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [{"name": "stamp", "arguments": {"name": "STAMP"}}]},
            {"text": "done"},
        ]
        * 2,
    )
    for mode, written in (("read-only", False), ("workspace-write", True)):
        policy = Policy(yes=True, sandbox=mode)  # type: ignore[arg-type]
        with Agent(
            model=f"scripted:{script}",
            store=tmp_path / f"{mode}.db",
            workspace=ws,
            tools=[stamp],
            policy=policy,
        ) as agent:
            agent.run("stamp it")
        assert (ws / "STAMP").exists() is written, mode
        if not written:
            with SQLiteStore(tmp_path / f"{mode}.db") as store:
                (info,) = store.sessions()
                said = [
                    c.result
                    for r in store.read(info.id)
                    if isinstance(c := r.event.content, FunctionResponse)
                ]
            assert "--yes does not approve a tool that no sandbox confines" in said[0], said
