"""Project instructions (AGENTS.md, else CLAUDE.md): read from real files into a real SQLite log,
given to the model from the log alone. The root's file is part of the stable prefix; a deeper
directory's enters the history when the model first works there; a changed file is noticed at
the next turn as a new note, never by rewriting the prefix; a recovered turn sees the text that
was recorded, whatever the file says by then."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from bubu.engine.session import new_session, start_turn
from bubu.events import ModelRequestNote, ProjectInstructions, Record, SystemNote, TurnStarted
from bubu.log.sqlite import SQLiteStore
from bubu.projections.instructions import MAX_FILE_BYTES
from bubu.providers.base import ToolResultsMessage, UserMessage
from engine.cli import bubu, bubu_json, only_session
from engine.helpers import FAST, call, make_host, scripted, write_script


def _notes(records: list[Record]) -> list[tuple[Record, ProjectInstructions]]:
    return [
        (r, c.note)
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, ProjectInstructions)
    ]


def _request_digests(records: list[Record]) -> list[str]:
    return [
        c.note.request_digest
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, ModelRequestNote)
    ]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _run_in_process(tmp_path: Path, ws: Path, lines: list[dict[str, object]], **config: object):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    model = scripted(write_script(tmp_path / "m.jsonl", lines))
    store = SQLiteStore(tmp_path / "bubu.db")
    host = make_host(store, model, config=replace(FAST, **config))  # type: ignore[arg-type]
    info = new_session(store, task="t", workspace=ws, model=model.spec)
    reason = start_turn(host, info, "do the task")
    records = store.read(info.id)
    store.close()
    return reason, model.requests, records


def test_the_root_agents_md_is_in_the_system_prompt_and_its_hash_in_the_log(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    body = b"Run the tests with `make check`.\nNever edit generated/.\n"
    (ws / "AGENTS.md").write_bytes(body)
    (ws / "CLAUDE.md").write_text("IGNORED: the directory has an AGENTS.md\n")
    reason, requests, records = _run_in_process(tmp_path, ws, [{"text": "done"}])
    assert reason == "completed"
    (system,) = {r.system for r in requests}
    assert "Run the tests with `make check`." in system
    assert "IGNORED" not in system
    assert system.index("You are Bubu") < system.index("## AGENTS.md")
    ((rec, note),) = _notes(records)
    assert note.cause == "start"
    assert rec.event.visibility == "hidden"
    (f,) = note.files
    assert (f.path, f.sha256, f.size, f.truncated) == ("AGENTS.md", _sha(body), len(body), False)
    # The model's history holds no copy of it: it is in the prefix only.
    assert not any("make check" in getattr(m, "text", "") for m in requests[0].messages)


def test_claude_md_counts_where_a_directory_has_no_agents_md(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "CLAUDE.md").write_text("Use tabs.\n")
    _, requests, records = _run_in_process(tmp_path, ws, [{"text": "done"}])
    assert "## CLAUDE.md\n\nUse tabs." in requests[0].system
    ((_, note),) = _notes(records)
    assert [f.path for f in note.files] == ["CLAUDE.md"]


def test_a_subdirectory_s_files_enter_the_history_when_the_model_first_works_there(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    (ws / "pkg" / "sub").mkdir(parents=True)
    (ws / "AGENTS.md").write_text("root rules\n")
    (ws / "pkg" / "AGENTS.md").write_text("pkg rules\n")
    (ws / "pkg" / "sub" / "CLAUDE.md").write_text("sub rules\n")
    (ws / "pkg" / "sub" / "mod.py").write_text("x = 1\n")
    (ws / "other").mkdir()
    (ws / "other" / "AGENTS.md").write_text("other rules: never given\n")
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("read_file", path="pkg/sub/mod.py")]},
        {"tool_calls": [call("write_file", path="pkg/sub/new.py", content="y = 2\n")]},
        {"text": "done"},
    ]
    reason, requests, records = _run_in_process(tmp_path, ws, lines)
    assert reason == "completed"
    # The prefix never changed: every request has the same system prompt, with the root only.
    (system,) = {r.system for r in requests}
    assert "root rules" in system
    assert "pkg rules" not in system
    notes = _notes(records)
    assert [n.cause for _, n in notes] == ["start", "directory"]  # the second call adds none
    rec, directory = notes[1]
    assert rec.event.visibility == "visible"
    assert [f.path for f in directory.files] == ["pkg/AGENTS.md", "pkg/sub/CLAUDE.md"]
    # The model reads them right after the result of the call that worked there.
    second = requests[1].messages
    i = next(i for i, m in enumerate(second) if isinstance(m, ToolResultsMessage))
    nxt = second[i + 1]
    assert isinstance(nxt, UserMessage)
    assert nxt.text.index("pkg rules") < nxt.text.index("sub rules")
    assert "other rules" not in json.dumps([getattr(m, "text", "") for m in second])


def test_no_project_instructions_reads_nothing(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "AGENTS.md").write_text("root rules\n")
    (ws / "pkg" / "AGENTS.md").write_text("pkg rules\n")
    (ws / "pkg" / "a.py").write_text("")
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("read_file", path="pkg/a.py")]},
        {"text": "done"},
    ]
    _, requests, records = _run_in_process(tmp_path, ws, lines, project_instructions=False)
    assert not _notes(records)
    assert all("rules" not in r.system for r in requests)
    (started,) = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
    ]
    assert started.project_instructions is False


def test_a_file_over_the_cap_is_cut_and_the_cut_is_said(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    body = ("é" * 20 + "\n") * 2000  # multi-byte text, cut on a character boundary
    (ws / "AGENTS.md").write_text(body)
    _, requests, records = _run_in_process(tmp_path, ws, [{"text": "done"}])
    ((_, note),) = _notes(records)
    (f,) = note.files
    assert f.truncated
    assert f.size == len(body.encode())
    assert len(f.text.encode()) <= MAX_FILE_BYTES
    assert body.startswith(f.text)
    assert f"only its first {MAX_FILE_BYTES:,} bytes are given here" in requests[0].system


def test_a_symlink_out_of_the_workspace_or_to_a_protected_path_is_not_followed(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text("SECRET from outside the workspace\n")
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n\tfsmonitor = evil\n")
    os.symlink(outside, ws / "AGENTS.md")
    (ws / "pkg").mkdir()
    os.symlink("../.git/config", ws / "pkg" / "AGENTS.md")
    (ws / "pkg" / "a.py").write_text("")
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("read_file", path="pkg/a.py")]},
        {"text": "done"},
    ]
    _, requests, records = _run_in_process(tmp_path, ws, lines)
    sent = json.dumps([r.system for r in requests] + [str(r.messages) for r in requests])
    assert "SECRET" not in sent
    assert "fsmonitor" not in sent
    files = [f for _, n in _notes(records) for f in n.files]
    assert [(f.path, f.text) for f in files] == [("AGENTS.md", ""), ("pkg/AGENTS.md", "")]
    assert "outside the workspace" in (files[0].skipped or "")
    assert "protected path .git/config" in (files[1].skipped or "")


def _cli_run(
    tmp_path: Path,
    db: Path,
    ws: Path,
    name: str,
    lines: list[dict[str, object]],
    *extra: str,
    failpoint: str | None = None,
) -> subprocess.CompletedProcess[str]:
    script = write_script(tmp_path / f"{name}.jsonl", lines)
    return bubu(
        db,
        "run",
        name,
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--jsonl",
        *extra,
        failpoint=failpoint,
    )


def _read(db: Path, session: str) -> list[Record]:
    with SQLiteStore(db) as store:
        return store.read(session)


@pytest.mark.slow
def test_a_changed_file_enters_the_next_turn_as_a_note_and_the_prefix_stays(
    tmp_path: Path,
) -> None:
    ws, db = tmp_path / "ws", tmp_path / "bubu.db"
    ws.mkdir()
    (ws / "AGENTS.md").write_text("version one\n")
    first = _cli_run(tmp_path, db, ws, "one", [{"text": "done"}])
    assert first.returncode == 0, first.stderr
    sid = only_session(db)
    before = bubu_json(db, "context", sid, "--json")
    (ws / "AGENTS.md").write_text("version two\n")
    second = _cli_run(tmp_path, db, ws, "two", [{"text": "done"}, {"text": "again"}], "-c")
    assert second.returncode == 0, second.stderr
    after = bubu_json(db, "context", sid, "--json")
    assert after["system"] == before["system"]  # the prefix is byte-identical
    assert "version one" in after["system"]
    assert "version two" not in after["system"]
    notes = _notes(_read(db, sid))
    assert [n.cause for _, n in notes] == ["start", "changed"]
    assert notes[1][1].files[0].sha256 == _sha(b"version two\n")
    texts = [m.get("text", "") for m in after["messages"]]
    assert any("AGENTS.md changed" in t and "version two" in t for t in texts)
    rows = after["project_instructions"]
    assert [(r["path"], r["where"], r["sha256"]) for r in rows] == [
        ("AGENTS.md", "prefix", _sha(b"version one\n")),
        ("AGENTS.md", "history", _sha(b"version two\n")),
    ]
    plain = bubu(db, "context", sid)
    assert "[project instructions: AGENTS.md sha256 " in plain.stdout
    assert "(history, seq " in plain.stdout
    # A third turn with the file unchanged adds nothing.
    third = _cli_run(tmp_path, db, ws, "three", [{"text": "ok"}] * 3, "-c")
    assert third.returncode == 0, third.stderr
    assert len(_notes(_read(db, sid))) == 2


@pytest.mark.slow
def test_a_recovered_turn_sees_the_recorded_instructions_not_the_edited_file(
    tmp_path: Path,
) -> None:
    ws, db = tmp_path / "ws", tmp_path / "bubu.db"
    (ws / "pkg").mkdir(parents=True)
    (ws / "AGENTS.md").write_text("root version one\n")
    (ws / "pkg" / "AGENTS.md").write_text("pkg version one\n")
    (ws / "pkg" / "a.py").write_text("a = 1\n")
    lines: list[dict[str, object]] = [
        {"tool_calls": [call("read_file", path="pkg/a.py")]},
        {"text": "done"},
    ]
    # Killed during the second model call: after the directory's note was committed.
    died = _cli_run(tmp_path, db, ws, "task", lines, failpoint="mid_model_call@2")
    assert died.returncode == -9, died.stderr
    sid = only_session(db)
    lost = _request_digests(_read(db, sid))
    (ws / "AGENTS.md").write_text("root version TWO\n")
    (ws / "pkg" / "AGENTS.md").write_text("pkg version TWO\n")
    done = bubu(db, "recover", sid, "--jsonl")
    assert done.returncode == 0, done.stderr
    records = _read(db, sid)
    reissued = _request_digests(records)
    # The request issued again after the crash is byte-identical to the lost one.
    assert reissued[len(lost)] == lost[-1]
    assert [n.cause for _, n in _notes(records)] == ["start", "directory"]
    ctx = bubu_json(db, "context", sid, "--json")
    assert "root version one" in ctx["system"]
    assert "TWO" not in json.dumps(ctx)
    verify = bubu(db, "verify", sid)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # The next turn notices both edits, in one note, root first.
    nxt = _cli_run(tmp_path, db, ws, "next", [{"text": "x"}] * 3, "-c")
    assert nxt.returncode == 0, nxt.stderr
    changed = _notes(_read(db, sid))[-1][1]
    assert changed.cause == "changed"
    assert [f.path for f in changed.files] == ["AGENTS.md", "pkg/AGENTS.md"]
    assert "TWO" in changed.files[1].text


def test_a_summary_never_loses_the_instructions_the_history_held() -> None:
    from bubu.events import InstructionFile, Text, make
    from bubu.projections.context import Checkpoint, ContextFold

    def rec(seq: int, content: object, role: str = "user") -> Record:
        ev = make(session="s", role=role, author="system", ts=0, content=content)  # type: ignore[arg-type]
        return Record(seq=seq, hash="", event=ev)

    old = InstructionFile(path="pkg/AGENTS.md", sha256="a" * 64, size=4, text="old\n")
    new = InstructionFile(path="pkg/AGENTS.md", sha256="b" * 64, size=4, text="new\n")
    fold = ContextFold()
    fold.apply(rec(1, Text(text="the task")))
    fold.apply(
        rec(2, SystemNote(note=ProjectInstructions(cause="directory", files=[old])), "system")
    )
    fold.apply(rec(3, SystemNote(note=ProjectInstructions(cause="changed", files=[new])), "system"))
    fold.apply(rec(4, Text(text="more")))
    texts = [getattr(m, "text", "") for m in fold.messages()]
    assert any("old" in t for t in texts)
    assert any("changed" in t and "new" in t for t in texts)
    fold.set_checkpoint(Checkpoint(key="k", watermark=3, source_digest="", text="SUMMARY"))
    texts = [getattr(m, "text", "") for m in fold.messages()]
    assert texts[0] == "SUMMARY"
    assert "new" in texts[1]
    assert "old" not in texts[1]  # only each file's latest version is re-stated
    assert texts[2:] == ["more"]
