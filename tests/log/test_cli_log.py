"""The log commands, run as real processes with BUBU_HOME in a temporary directory."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

import hermetic
from bubu.log import codec
from bubu.log.sqlite import SQLiteStore
from bubu.log.transfer import export_lines

from .samples import BLOB, session_events

MAIN = "from bubu.cli import main; main()"


def bubu(home: Path, *args: str, db: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run `bubu ARGS` in a clean environment whose BUBU_HOME is `home` (and BUBU_DB is `db`)."""
    env = hermetic.environ("BUBU_")
    env["BUBU_HOME"] = str(home)
    if db is not None:
        env["BUBU_DB"] = str(db)
    done = subprocess.run(
        [sys.executable, "-c", MAIN, *args], env=env, capture_output=True, timeout=120, check=False
    )
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return done


def _one_line_error(done: subprocess.CompletedProcess[bytes]) -> str:
    assert done.returncode != 0
    err = done.stderr.decode()
    assert err.startswith("bubu: error: "), err
    assert err.count("\n") == 1, err
    return err


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A BUBU_HOME holding one sample session (with an offloaded blob) and one empty session."""
    path = tmp_path / "home"
    path.mkdir()
    with closing(SQLiteStore(path / "bubu.db")) as store:
        store.create_session(title="empty one", workspace="/w", session_id="ses_empty")
        store.create_session(title="sample task", workspace="/w", session_id="ses_sample")
        store.append("ses_sample", session_events("ses_sample"), expect=0, blobs=[BLOB])
    return path


def _export(home: Path, session: str) -> bytes:
    with closing(SQLiteStore(home / "bubu.db")) as store:
        return b"".join(line + b"\n" for line in export_lines(store, store.session(session)))


def test_sessions_on_a_fresh_home(tmp_path: Path) -> None:
    done = bubu(tmp_path, "sessions")
    assert done.returncode == 0
    assert b"no sessions yet" in done.stdout
    done = bubu(tmp_path, "sessions", "--json")
    assert (done.returncode, json.loads(done.stdout)) == (0, [])
    assert not (tmp_path / "bubu.db").exists(), "a command that only reads creates no database"


def test_sessions_lists_status_from_the_log(home: Path) -> None:
    rows = json.loads(bubu(home, "sessions", "--json").stdout)
    by_id = {r["id"]: r for r in rows}
    assert set(by_id) == {"ses_empty", "ses_sample"}
    sample = by_id["ses_sample"]
    assert (sample["events"], sample["status"], sample["turns"], sample["title"]) == (
        len(session_events("ses_sample")),
        "completed",
        1,
        "sample task",
    )
    assert (by_id["ses_empty"]["events"], by_id["ses_empty"]["status"]) == (0, "idle")
    for r in rows:
        assert set(r) >= {
            "id",
            "title",
            "workspace",
            "model",
            "created_ms",
            "last_ms",
            "events",
            "status",
        }
    text = bubu(home, "sessions").stdout.decode()
    assert "ses_sample" in text
    assert "sample task" in text


def test_log_jsonl_prints_canonical_events_with_seq_and_hash(home: Path) -> None:
    done = bubu(home, "log", "ses_samp", "--jsonl")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    events = session_events("ses_sample")
    assert len(lines) == len(events)
    prev = codec.GENESIS
    for n, (line, ev) in enumerate(zip(lines, events, strict=True), start=1):
        obj = json.loads(line)
        payload = codec.encode(ev)
        prev = codec.chain(prev, payload)
        assert (obj["seq"], obj["hash"]) == (n, prev.hex())
        assert line == b'{"event":' + payload + f',"hash":"{prev.hex()}","seq":{n}}}'.encode()
    after = bubu(home, "log", "ses_sample", "--jsonl", "--after", "18").stdout.splitlines()
    assert after == lines[18:]
    assert b"turn_started" in bubu(home, "log", "ses_sample").stdout


def test_verify_passes_on_a_sound_database(home: Path) -> None:
    done = bubu(home, "verify")
    assert done.returncode == 0
    assert done.stdout.count(b"ok    ") == 2
    report = json.loads(bubu(home, "verify", "ses_sample", "--json").stdout)
    with closing(SQLiteStore(home / "bubu.db")) as store:
        head = store.head("ses_sample")
    assert (report["ok"], report["database"]) == (True, "ok")
    (session,) = report["sessions"]
    assert (session["ok"], session["high_water"], session["digest"]) == (
        True,
        head.high_water,
        head.digest,
    )


def test_verify_fails_on_a_tampered_copy(home: Path, tmp_path: Path) -> None:
    copy = tmp_path / "tampered.db"
    shutil.copyfile(home / "bubu.db", copy)
    raw = sqlite3.connect(copy, isolation_level=None)
    raw.execute("DROP TRIGGER events_no_update")
    raw.execute(
        "UPDATE events SET payload = CAST(replace(payload, 'bonjour', 'bonsoir') AS BLOB) "
        "WHERE seq = 3"
    )
    raw.close()
    done = bubu(home, "--db", str(copy), "verify")
    assert done.returncode == 1
    assert b"BAD   ses_sample  at seq 3" in done.stdout
    assert b"ok    ses_empty" in done.stdout
    done = bubu(home, "verify", "ses_sample", "--json", db=copy)
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert (report["sessions"][0]["ok"], report["sessions"][0]["first_bad_seq"]) == (False, 3)
    assert bubu(home, "verify").returncode == 0  # the original is untouched


def test_export_prints_the_session_as_jsonl(home: Path) -> None:
    done = bubu(home, "export", "ses_sample")
    assert done.returncode == 0
    assert done.stdout == _export(home, "ses_sample")
    header = json.loads(done.stdout.splitlines()[0])
    assert (header["format"], header["session"], header["high_water"]) == (
        "bubu-session/1",
        "ses_sample",
        len(session_events("ses_sample")),
    )


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, Path]:
    """A home with a session without offloaded blobs, and its export file."""
    home = tmp_path / "src"
    home.mkdir()
    with closing(SQLiteStore(home / "bubu.db")) as store:
        store.create_session(title="to move", workspace="/w", session_id="ses_move")
        store.append("ses_move", session_events("ses_move", offload=False), expect=0)
    path = tmp_path / "ses_move.jsonl"
    path.write_bytes(bubu(home, "export", "ses_move").stdout)
    return home, path


def test_import_round_trips_an_export(exported: tuple[Path, Path], tmp_path: Path) -> None:
    source, path = exported
    target = tmp_path / "target"
    done = bubu(target, "import", str(path))
    assert done.returncode == 0, done.stderr
    n = len(session_events("ses_move", offload=False))
    assert done.stdout.startswith(f"imported ses_move: {n} events".encode())
    assert bubu(target, "verify").returncode == 0
    copied = bubu(target, "log", "ses_move", "--jsonl").stdout.splitlines()
    assert copied[:-1] == bubu(source, "log", "ses_move", "--jsonl").stdout.splitlines()
    # The copy ends with where it came from, under the chain: an imported session never
    # continues by itself.
    origin = json.loads(copied[-1])
    assert origin["seq"] == n + 1
    assert origin["event"]["content"]["note"]["note"] == "session_started"
    assert origin["event"]["content"]["note"]["origin"] == "import"
    assert b"predates chained session facts" in done.stderr
    again = bubu(target, "import", str(path))
    assert "already exists" in _one_line_error(again)


def test_import_refuses_a_broken_chain_and_writes_nothing(
    exported: tuple[Path, Path], tmp_path: Path
) -> None:
    _, path = exported
    target = tmp_path / "target"
    lines = path.read_bytes().splitlines(keepends=True)
    cases = {
        "altered.jsonl": b"".join(lines).replace(b"bonjour", b"bonsoir"),
        "truncated.jsonl": b"".join(lines[:-1]),
        "reordered.jsonl": b"".join([lines[0], lines[2], lines[1], *lines[3:]]),
        "not-an-export.jsonl": b"hello\n",
        "empty.jsonl": b"",
    }
    expected = {
        "altered.jsonl": "the chain does not verify at seq 3",
        "truncated.jsonl": "truncated or altered",
        "reordered.jsonl": "seq 1 is missing",
        "not-an-export.jsonl": "not a Bubu export header",
        "empty.jsonl": "the file is empty",
    }
    for name, data in cases.items():
        bad = tmp_path / name
        bad.write_bytes(data)
        err = _one_line_error(bubu(target, "import", str(bad)))
        assert f"refused to import {bad}" in err
        assert expected[name] in err, err
    assert json.loads(bubu(target, "sessions", "--json").stdout) == []


@pytest.mark.heavy
def test_expected_failures_are_one_line_without_traceback(home: Path, tmp_path: Path) -> None:
    assert "no session matches 'ses_nope'" in _one_line_error(bubu(home, "log", "ses_nope"))
    assert "several sessions" in _one_line_error(bubu(home, "verify", "ses_"))
    assert "cannot read" in _one_line_error(bubu(home, "import", str(tmp_path / "missing.jsonl")))
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n" * 300)
    for args in (["sessions"], ["verify"], ["log", "x"]):
        err = _one_line_error(bubu(home, "--db", str(notes), *args))
        assert "is not a readable Bubu database" in err
    err = _one_line_error(bubu(home, "sessions", db=tmp_path / "no" / "such" / "dir.db"))
    assert "does not exist" in err
