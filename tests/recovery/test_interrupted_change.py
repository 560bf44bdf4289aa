"""A command SIGKILLed with its runner says what it did: recovery compares the workspace with the
snapshot taken at the command's dispatch, and the interrupted result, the recovery notice and the
model's next request name exactly the paths it changed. Real process, real SIGKILL."""

from __future__ import annotations

import re
from pathlib import Path

from bubu import Agent
from bubu.events import FunctionResponse, RecoveryNotice, SystemNote
from bubu.log.sqlite import SQLiteStore
from bubu.projections.recovery import INTERRUPTED
from bubu.providers.base import ToolResultsMessage
from bubu.providers.scripted import ScriptedProvider
from engine.helpers import Recording, call, wait_for, write_script
from faults.helpers import finish, only_session, read, start_bubu

COMMAND = (
    "sed -i 's/one/ONE/' a.txt; echo more >> b.txt; printf 'x\\ny\\n' > c.txt; rm d.txt; "
    "touch {marker}; sleep 300"
)
"""Edits three files and deletes one, says so outside the workspace, then hangs."""


def _paths(text: str) -> set[tuple[str, str]]:
    return set(re.findall(r"\b(added|modified|deleted) (\S+) \(", text))


def test_a_killed_command_is_reported_by_the_paths_it_changed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in "abcde":
        (ws / f"{name}.txt").write_text(f"{name} one\n{name} two\n")
    marker = tmp_path / "marker"
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [call("run_command", command=COMMAND.format(marker=marker))]},
            {"text": "checked"},
        ],
    )
    db = tmp_path / "bubu.db"
    proc = start_bubu(
        db, "run", "go", "-w", str(ws), "-m", f"scripted:{script}", "--yes", "--sandbox", "off"
    )
    wait_for(marker.exists, "the command's changes")
    proc.kill()
    assert finish(proc)[0] == -9

    provider = Recording(ScriptedProvider(str(script)))
    with Agent(model=provider, store=db, workspace=ws) as agent:
        result = agent.recover(only_session(db))
    assert result.reason == "completed"
    want = {
        ("modified", "a.txt"),
        ("modified", "b.txt"),
        ("modified", "c.txt"),
        ("deleted", "d.txt"),
    }

    (out,) = [c for r in read(db) if isinstance(c := r.event.content, FunctionResponse)]
    assert out.result.startswith(INTERRUPTED)
    assert _paths(out.result) == want
    assert "modified a.txt (+1 −1)" in out.result
    assert "deleted d.txt (−2)" in out.result
    assert out.blob is not None  # the full diff, behind a handle read_result pages
    assert f"handle {out.blob.sha256}" in out.result
    with SQLiteStore(db) as store:
        diff = store.blob(out.blob.sha256)
    assert diff is not None
    assert b"-a one\n+a ONE\n" in diff
    assert b"+++ /dev/null" in diff

    (notice,) = [
        n
        for r in read(db)
        if isinstance(c := r.event.content, SystemNote) and isinstance(n := c.note, RecoveryNotice)
    ]
    assert _paths(" ".join(notice.workspace_changes)) == want

    seen = [m for m in provider.requests[-1].messages if isinstance(m, ToolResultsMessage)]
    (shown,) = seen[-1].results
    assert _paths(shown.content) == want, shown.content
    # No snapshot's name ever reaches the model.
    assert out.snapshot is not None
    assert out.snapshot.tree is not None
    assert out.snapshot.tree not in str(provider.requests)


def test_a_write_is_proven_against_the_whole_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    (ws / "other.txt").write_text("other\n")
    script = write_script(
        tmp_path / "s.jsonl",
        [{"tool_calls": [call("write_file", path="a.txt", content="A\n")]}, {"text": "ok"}],
    )
    db = tmp_path / "bubu.db"
    proc = start_bubu(
        db,
        "run",
        "go",
        "-w",
        str(ws),
        "-m",
        f"scripted:{script}",
        "--yes",
        env={"BUBU_FAILPOINT": "after_dispatch"},
    )
    assert finish(proc)[0] == -9
    (ws / "other.txt").write_text("changed by someone\n")  # between the crash and the recovery
    provider = Recording(ScriptedProvider(str(script)))
    with Agent(model=provider, store=db, workspace=ws) as agent:
        agent.recover(only_session(db))
    (fact,) = [a.tool_recovery for r in read(db) if (a := r.event.actions) and a.tool_recovery]
    assert fact.decision == "rerun_not_applied"
    assert "1 other path changed" in fact.reason
    assert "modified other.txt (+1 −1)" in fact.reason
    assert (ws / "a.txt").read_text() == "A\n"
