"""`bubu fork SESSION --at SEQ`: a new session that begins with a verified copy of a prefix."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from bubu.api import Agent
from bubu.cli.app import cli
from bubu.cli.forkcmd import FORK_KEY, fork_session  # importing it registers `bubu fork`
from bubu.errors import ConfigError, CorruptLog
from bubu.events import Info, Record, SessionStarted, SystemNote
from bubu.log.sqlite import SQLiteStore, canonical_payload

from .conftest import Script
from .helpers import call, kinds


def _two_turns(script: Script, db: Path, ws: Path) -> str:
    """A session of two turns; the first reads a file and writes one."""
    model = script(
        [
            {"text": "let me look", "tool_calls": [call("read_file", path="a.txt")]},
            {"tool_calls": [call("write_file", path="b.txt", content="beta")]},
            {"text": "wrote b.txt"},
            {"text": "second turn"},
        ]
    )
    with Agent(model=model, store=db, workspace=ws) as agent:
        first = agent.run("write b")
        agent.continue_("and then?")
    return first.session


def _seq_of(records: list[Record], kind: str, nth: int = 0) -> int:
    return [r.seq for r in records if kinds([r])[0] == kind][nth]


def test_a_fork_copies_the_prefix_into_a_new_session(script: Script, db: Path, ws: Path) -> None:
    source = _two_turns(script, db, ws)
    with SQLiteStore(db) as store:
        src = store.read(source)
        at = _seq_of(src, "turn_ended")
        fork = fork_session(store, source[:12], at)
        copy = store.read(fork.session)
        info = store.session(fork.session)
        assert store.verify(fork.session).ok
        assert store.head(source).high_water == len(src)  # the source is untouched
    assert (fork.source, fork.seq, fork.digest) == (source, at, src[at - 1].hash)
    assert (fork.events, fork.open_turn, fork.dangling_calls) == (at + 2, False, 0)
    assert info.workspace == str(ws)
    assert info.title == f"fork@{at}: write b"
    assert len(copy) == at + 2
    facts = copy[-2].event.content
    assert isinstance(facts, SystemNote)
    assert isinstance(facts.note, SessionStarted)
    assert (facts.note.origin, facts.note.source, facts.note.source_seq) == ("fork", source, at)
    assert (facts.note.workspace, facts.note.title) == (str(ws), info.title)
    for old, new in zip(src[:at], copy, strict=False):
        assert new.seq == old.seq
        assert new.event.session == fork.session
        assert new.event.id != old.event.id
        strip = {"id": "", "session": "", "actions": None}
        assert msgspec.structs.replace(new.event, **strip) == msgspec.structs.replace(
            old.event, **strip
        )
        if new.seq > 1:
            assert new.event.actions == old.event.actions
    first = copy[0].event.actions
    assert first is not None
    assert first.state_delta == {
        FORK_KEY: {"session": source, "seq": at, "digest": src[at - 1].hash}
    }
    note = copy[-1].event
    assert note.visibility == "hidden"
    assert isinstance(note.content, SystemNote)
    assert isinstance(note.content.note, Info)
    assert note.content.note.text.startswith(f"forked from {source} at seq {at}")


def test_a_fork_goes_on_by_itself(script: Script, db: Path, ws: Path) -> None:
    source = _two_turns(script, db, ws)
    with SQLiteStore(db) as store:
        at = _seq_of(store.read(source), "turn_ended")
        fork = fork_session(store, source, at)
    model = script([{"text": "-"}, {"text": "-"}, {"text": "-"}, {"text": "a different path"}])
    with Agent(model=model, store=db, workspace=ws) as agent:
        result = agent.run("try something else", session=fork.session)
        texts = [i.text for i in agent.session(fork.session).transcript().items if i.kind == "user"]
        source_texts = [
            i.text for i in agent.session(source).transcript().items if i.kind == "user"
        ]
    assert result.text == "a different path"
    assert texts == ["write b", "try something else"]
    assert source_texts == ["write b", "and then?"]


def test_a_fork_inside_an_open_turn_is_recovered_like_a_crash(
    script: Script, db: Path, ws: Path
) -> None:
    source = _two_turns(script, db, ws)
    (ws / "b.txt").unlink()
    with SQLiteStore(db) as store:
        at = _seq_of(store.read(source), "tool_dispatch", 1)  # the write, dispatched
        fork = fork_session(store, source, at)
    assert (fork.open_turn, fork.dangling_calls) == (True, 1)
    model = script([{"text": "-"}, {"text": "-"}, {"text": "done on the fork"}])
    with Agent(model=model, store=db, workspace=ws) as agent:
        result = agent.recover(fork.session)
    assert result.reason == "completed"
    assert result.recovery is not None
    assert [(c.tool, c.decision) for c in result.recovery.calls] == [
        ("write_file", "rerun_not_applied")
    ]
    assert (ws / "b.txt").read_text() == "beta"
    assert result.text == "done on the fork"


def test_a_fork_is_refused_where_it_cannot_be_made(script: Script, db: Path, ws: Path) -> None:
    source = _two_turns(script, db, ws)
    with SQLiteStore(db) as store:
        records = store.read(source)
        high = len(records)
        for at in (0, high + 1):
            with pytest.raises(
                ConfigError, match=rf"--at {at} is outside .* events are 1\.\.{high}"
            ):
                fork_session(store, source, at)
        # "let me look" and its read_file call are one model response: seqs n and n + 1.
        text = _seq_of(records, "text", 1)
        with pytest.raises(
            ConfigError, match=rf"inside one model response \(seqs {text}\.\.{text + 1}\)"
        ):
            fork_session(store, source, text)
        assert fork_session(store, source, text + 1).seq == text + 1
        count = len(store.sessions())
    tampered = db.with_name("tampered.db")
    with sqlite3.connect(db) as raw, sqlite3.connect(tampered) as dst:
        raw.backup(dst)
    raw = sqlite3.connect(tampered, isolation_level=None)
    raw.execute("DROP TRIGGER events_no_update")
    for pos, stored in raw.execute("SELECT pos, payload FROM events").fetchall():
        payload = canonical_payload(stored)  # a large row is stored compressed
        if b"second turn" in payload:
            altered = payload.replace(b"second turn", b"altered turn")
            raw.execute("UPDATE events SET payload = ? WHERE pos = ?", (altered, pos))
    raw.close()
    with SQLiteStore(tampered) as store:
        bad = _seq_of(store.read(source), "text", 4)  # "second turn", the model's last text
        with pytest.raises(CorruptLog, match=f"does not verify up to seq {bad}"):
            fork_session(store, source, bad)
        assert fork_session(store, source, bad - 1).seq == bad - 1  # the prefix before is fine
        assert len(store.sessions()) == count + 1


def test_the_command_prints_the_new_session(script: Script, db: Path, ws: Path) -> None:
    source = _two_turns(script, db, ws)
    with SQLiteStore(db) as store:
        records = store.read(source)
    runner = CliRunner()
    ended = str(_seq_of(records, "turn_ended"))
    plain = runner.invoke(
        cli, ["--db", str(db), "fork", source, "--at", ended], catch_exceptions=False
    )
    assert plain.exit_code == 0
    assert plain.stdout.strip().startswith("ses_")
    assert plain.stderr == ""
    inside = _seq_of(records, "tool_dispatch")
    done = runner.invoke(
        cli,
        ["--db", str(db), "fork", source, "--at", str(inside), "--json"],
        catch_exceptions=False,
    )
    out = json.loads(done.stdout)
    assert out == {
        "session": out["session"],
        "source": {"session": source, "seq": inside, "digest": records[inside - 1].hash},
        "events": inside + 2,
        "open_turn": True,
        "dangling_calls": 1,
    }
    text = runner.invoke(cli, ["--db", str(db), "fork", source, "--at", str(inside)])
    assert "starts inside an open turn with 1 dispatched call(s) without an outcome" in text.stderr
    assert f"bubu recover {text.stdout.strip()}" in text.stderr


def test_a_refused_fork_is_one_line_for_the_user(script: Script, db: Path, ws: Path) -> None:
    source = _two_turns(script, db, ws)
    with SQLiteStore(db) as store:
        high = store.head(source).high_water
    main = "import bubu.cli.forkcmd; from bubu.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", main, "--db", str(db), "fork", source, "--at", "999"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"bubu: error: --at 999 is outside session {source}, whose events are 1..{high}; "
        "pick a seq in that range (`bubu log` lists them)"
    ]
