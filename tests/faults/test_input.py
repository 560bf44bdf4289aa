"""Bad input: an empty task, a 10 MB task, control characters, a script file with a bad line, an
import file whose chain is broken. Each is refused with one clear line before anything is
written, or stored exactly; nothing committed before is touched.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bubu.engine.session import new_session, start_turn
from bubu.errors import ConfigError
from bubu.events import Text
from bubu.log.sqlite import SQLiteStore
from bubu.providers.base import UserMessage
from bubu.providers.scripted import ScriptedProvider
from engine.cli import on_a_terminal
from engine.helpers import Recording

from .helpers import (
    assert_kept,
    bubu,
    bubu_cmd,
    bubu_env,
    bubu_json,
    call,
    error_line,
    kinds,
    make_host,
    read,
    snapshot,
    write_script,
)

EMPTY = (
    'bubu: error: the task is empty; say what Bubu should do, e.g. bubu run "fix the failing test"'
)


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(db, workspace, a one-line script)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    script = write_script(tmp_path / "s.jsonl", [{"text": "ok"}])
    return tmp_path / "bubu.db", ws, script


def no_sessions(db: Path) -> bool:
    """The database holds no session (or was never created)."""
    if not db.exists():
        return True
    with SQLiteStore(db) as store:
        return store.sessions() == []


# ---- the task ----------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["", "   ", "\n\t \n"])
def test_an_empty_task_is_refused_before_anything_is_written(
    project: tuple[Path, Path, Path], task: str
) -> None:
    db, ws, script = project
    done = bubu(db, "run", task, "-w", str(ws), "-m", f"scripted:{script}")
    assert done.returncode == 2
    assert error_line(done.stderr) == EMPTY
    assert no_sessions(db)


@pytest.mark.heavy
def test_an_empty_task_on_an_existing_session_appends_nothing(
    project: tuple[Path, Path, Path],
) -> None:
    db, ws, script = project
    assert bubu(db, "run", "first", "-w", str(ws), "-m", f"scripted:{script}").returncode == 0
    before = snapshot(db)
    done = bubu(db, "run", "-c", "-w", str(ws), " ", "-m", f"scripted:{script}")
    assert (done.returncode, error_line(done.stderr)) == (2, EMPTY)
    assert snapshot(db) == before


def test_a_10_mb_task_is_refused_and_nothing_is_appended(project: tuple[Path, Path, Path]) -> None:
    # A command line cannot carry 10 MB (the kernel caps one argument at 128 KB), so this is the
    # path of the Python API and the web UI, which share the check.
    db, ws, script = project
    huge = "fix this: " + "x" * (10 << 20)
    with SQLiteStore(db) as store:
        provider = ScriptedProvider(str(script))
        info = new_session(store, task=huge, workspace=ws, model=provider.spec)
        with pytest.raises(ConfigError) as caught:
            start_turn(make_host(store, provider), info, huge)
        assert store.head(info.id).high_water == 0, "no event was appended"
        assert len(info.title) <= 120
    assert str(caught.value) == (
        "the task is larger than 1 MB; put the material in a file in the workspace and refer to it"
    )


def test_a_100_kb_task_through_the_cli_is_stored_exactly(project: tuple[Path, Path, Path]) -> None:
    db, ws, script = project
    task = "review these notes:\n" + "\n".join(f"note {n}: " + "y" * 90 for n in range(1000))
    done = bubu(db, "run", task, "-w", str(ws), "-m", f"scripted:{script}")
    assert done.returncode == 0, done.stderr
    (first, *_) = read(db)
    assert first.event.content == Text(text=task)
    (row,) = bubu_json(db, "sessions", "--json")
    assert row["title"] == " ".join(task.split())[:120]


CONTROL = "fix\x1b[2J\x1b]0;pwned\x07 the\rbug\x08\x7f\u202e\x00 end\x9b31m"


def test_control_characters_are_stored_and_sent_exactly(project: tuple[Path, Path, Path]) -> None:
    db, ws, script = project
    with SQLiteStore(db) as store:
        provider = Recording(ScriptedProvider(str(script)))
        info = new_session(store, task=CONTROL, workspace=ws, model=provider.spec)
        assert start_turn(make_host(store, provider), info, CONTROL) == "completed"
        assert store.verify(info.id).ok
        assert store.read(info.id)[0].event.content == Text(text=CONTROL)
    (request,) = provider.requests
    assert request.messages[0] == UserMessage(text=CONTROL)


def test_control_characters_are_shown_escaped_on_a_terminal(
    project: tuple[Path, Path, Path],
) -> None:
    db, ws, script = project
    with SQLiteStore(db) as store:
        provider = ScriptedProvider(str(script))
        info = new_session(store, task=CONTROL, workspace=ws, model=provider.spec)
        start_turn(make_host(store, provider), info, CONTROL)
    for args in (["sessions"], ["show", info.id]):
        shown = on_a_terminal(db, *args)
        for raw in (
            b"\x1b[2J",
            b"\x1b]0;",
            b"\x07",
            b"\x08",
            b"\x7f",
            b"\x00",
            "\u202e".encode(),
            b"\xc2\x9b",
        ):
            assert raw not in shown, (args, raw, shown)


# ---- a script file with a bad line -------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            ['{"text": "ok"}', '{"txt": "typo"}'],
            "line 2 of the script {path} is not a valid response: "
            "Object contains unknown field `txt`",
        ),
        (
            ['{"text": "ok"}', "// a comment", '{"text": "unterminated'],
            "line 3 of the script {path} is not a valid response: Input data was truncated",
        ),
        (
            ['{"tool_calls": [{"name": "read_file", "arguments": "a.txt"}]}'],
            "line 1 of the script {path} is not a valid response: "
            "Expected `object`, got `str` - at `$.tool_calls[0].arguments`",
        ),
        (
            ["\udcff\udcfe"],
            "line 1 of the script {path} is not a valid response: "
            "JSON is malformed: invalid character (byte 0)",
        ),
    ],
)
def test_a_script_with_a_bad_line_is_refused_naming_the_line(
    project: tuple[Path, Path, Path], lines: list[str], message: str
) -> None:
    db, ws, _ = project
    bad = db.parent / "bad.jsonl"
    bad.write_bytes(b"".join(ln.encode("utf-8", "surrogateescape") + b"\n" for ln in lines))
    done = bubu(db, "run", "go", "-w", str(ws), "-m", f"scripted:{bad}")
    assert done.returncode == 2
    assert error_line(done.stderr) == "bubu: error: " + message.format(path=bad)
    assert no_sessions(db)


def test_a_missing_script_is_refused(project: tuple[Path, Path, Path]) -> None:
    db, ws, _ = project
    missing = db.parent / "nope.jsonl"
    done = bubu(db, "run", "go", "-w", str(ws), "-m", f"scripted:{missing}")
    assert done.returncode == 2
    assert (
        error_line(done.stderr)
        == f"bubu: error: cannot read the script {missing}: No such file or directory"
    )
    assert no_sessions(db)


# ---- an import file with a broken chain --------------------------------------------------------


@pytest.fixture
def exported(project: tuple[Path, Path, Path], tmp_path: Path) -> tuple[Path, list[bytes], str]:
    """A database with one session, and that session exported: (db, export lines, session)."""
    db, ws, _ = project
    script = write_script(
        tmp_path / "tools.jsonl",
        [
            {"tool_calls": [call("read_file", path="a.txt")]},
            {"text": "read it"},
        ],
    )
    assert bubu(db, "run", "read a", "-w", str(ws), "-m", f"scripted:{script}").returncode == 0
    session = bubu_json(db, "sessions", "--json")[0]["id"]
    done = bubu(db, "export", session)
    assert done.returncode == 0
    return db, done.stdout.encode().splitlines(), session


def _altered(lines: list[bytes]) -> list[bytes]:
    line = json.loads(lines[1])
    line["event"]["content"]["text"] = "read b"  # the user's request, its hash left as it was
    return [lines[0], json.dumps(line, sort_keys=True, separators=(",", ":")).encode(), *lines[2:]]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (_altered, "the chain does not verify at seq 1: the event was altered"),
        (lambda ls: [ls[0], *ls[1:3], *ls[4:]], "seq 3 is missing (line 4 has seq 4)"),
        (
            lambda ls: ls[:-1],
            "the file is truncated or altered: the header promises {n} events "
            "ending in {d}…, the file holds {m}",
        ),
        (
            lambda ls: ls[1:],
            "the first line is not a Bubu export header (Object missing required field `format`)",
        ),
    ],
    ids=["altered", "gap", "truncated", "headless"],
)
def test_an_import_with_a_broken_chain_is_refused_and_writes_nothing(
    exported: tuple[Path, list[bytes], str], tmp_path: Path, damage: object, problem: str
) -> None:
    db, lines, session = exported
    header = json.loads(lines[0])
    target = tmp_path / "target.db"
    with SQLiteStore(target) as store:
        other = store.create_session(title="bystander", workspace="/w")
    bystander = snapshot(target, other.id)
    assert callable(damage)
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"\n".join(damage(lines)) + b"\n")
    done = bubu(target, "import", str(broken))
    assert done.returncode == 1
    expected = problem.format(
        n=header["high_water"], d=header["digest"][:16], m=header["high_water"] - 1
    )
    assert error_line(done.stderr) == f"bubu: error: refused to import {broken}: {expected}"
    with SQLiteStore(target) as store:
        assert [s.id for s in store.sessions()] == [other.id], "nothing was imported"
    assert_kept(bystander, target)
    assert kinds(read(db, session))[-1] == "turn_ended"


def test_an_import_with_a_pathologically_nested_event_is_refused(tmp_path: Path) -> None:
    from bubu.log import codec

    payload = (
        b'{"actions":{"state_delta":{"a":'
        + b"[" * 100_000
        + b"]" * 100_000
        + b'}},"author":"user",'
        b'"id":"evt_deep","role":"user","session":"ses_deep","ts":1,"v":1}'
    )
    digest = codec.chain(codec.GENESIS, payload).hex()
    header = json.dumps(
        {
            "format": "bubu-session/1",
            "session": "ses_deep",
            "title": "deep",
            "workspace": "/w",
            "created_ms": 1,
            "high_water": 1,
            "digest": digest,
        }
    )
    hostile = tmp_path / "deep.jsonl"
    hostile.write_bytes(
        header.encode() + b'\n{"event":' + payload + b',"hash":"%s","seq":1}\n' % digest.encode()
    )
    db = tmp_path / "bubu.db"
    done = subprocess.run(
        bubu_cmd(db, "import", str(hostile)),
        env=bubu_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 1
    assert error_line(done.stderr).startswith(f"bubu: error: refused to import {hostile}: line 2 ")
    assert no_sessions(db)
