"""`bubu recover SESSION --force`: a blocked session says what forcing does, and forcing it gives
every call left running an interrupted result, re-runs nothing, records that the user forced it,
and continues the turn to its end."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.events import RecoveryNotice, SystemNote
from bubu.projections.recovery import FORCED

from .harness import last_json_document, outcomes, read_log
from .proc import bubu, bubu_json
from .test_restart import READ, _crashed


@pytest.mark.heavy
def test_a_blocked_session_is_continued_by_force_without_re_running_anything(
    tmp_path: Path,
) -> None:
    db, _, _, session = _crashed(tmp_path, READ)
    assert bubu(db, "recover", "--json", failpoint="mid_tool").returncode == -9
    blocked = bubu(db, "recover", session)
    assert blocked.returncode == 5, blocked.stdout + blocked.stderr
    hint = f"`bubu recover {session} --force` continues it"
    assert hint in blocked.stdout
    status = bubu(db, "status", session)
    assert "blocked" in status.stdout
    assert hint in status.stdout
    before = read_log(db)
    dispatched = [
        r.event.actions.tool_dispatch.call_id
        for r in before
        if r.event.actions is not None and r.event.actions.tool_dispatch is not None
    ]
    (call_id,) = set(dispatched)

    unnamed = bubu(db, "recover", "--force")
    assert unnamed.returncode == 1
    assert "--force continues one blocked session: name it" in unnamed.stderr
    assert len(read_log(db)) == len(before), "a refused --force writes nothing"

    forced = bubu(db, "recover", session, "--force", "--json")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    ((result),) = last_json_document(forced.stdout)
    assert result["outcome"] == "completed"
    assert [c["decision"] for c in result["calls"]] == ["interrupted"]
    after = read_log(db)
    assert after[: len(before)] == before, "forcing appends only"
    (out,) = outcomes(after)[call_id]
    assert out.is_error
    assert out.result.startswith("interrupted:")
    again = [r for r in after[len(before) :] if r.event.actions and r.event.actions.tool_dispatch]
    assert again == [], "nothing was dispatched again"
    notices = [
        r.event.content.note
        for r in after[len(before) :]
        if isinstance(r.event.content, SystemNote)
        and isinstance(r.event.content.note, RecoveryNotice)
    ]
    (notice,) = notices
    assert notice.forced is not None
    assert "crash loop" in notice.forced
    facts = [
        r.event.actions.tool_recovery
        for r in after[len(before) :]
        if r.event.actions is not None and r.event.actions.tool_recovery is not None
    ]
    assert [f.reason for f in facts] == [FORCED]
    shown = bubu_json(db, "status", session, "--json")
    assert shown["status"] == "completed"
    assert shown["recovery"]["forced"] == notice.forced
    assert bubu(db, "verify").returncode == 0


@pytest.mark.slow
def test_force_on_a_session_that_is_not_blocked_changes_nothing(tmp_path: Path) -> None:
    db, _, _, session = _crashed(tmp_path, READ)
    assert bubu(db, "recover", session).returncode == 0
    log = read_log(db)
    again = bubu(db, "recover", session, "--force")
    assert again.returncode == 0
    assert "nothing to recover" in again.stdout
    assert len(read_log(db)) == len(log)
