"""A fleet turn that gave up waiting for its provider is retried later by a worker on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.events import SystemNote, TurnEnded
from bubu.log.postgres import PostgresStore, WorkQueue
from bubu.log.postgres._schema import RETRY_LATER_MS
from longrun.outage import serve_outages

from .checks import check_log
from .proc import WorkerProc, bubu_ok

pytestmark = pytest.mark.postgres


def _ends(pg: PostgresStore, session: str) -> list[TurnEnded]:
    return [
        c.note
        for r in pg.read(session)
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnEnded)
    ]


@pytest.mark.heavy
def test_a_turn_that_gave_up_on_its_provider_is_claimed_again_later(
    tmp_path: Path, url: str, pg: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    queue = WorkQueue(pg)
    with serve_outages() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai())
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fleet-outage-0123456789")
        server.outage(600.0, retry_after="1")
        session = bubu_ok(
            tmp_path,
            "submit",
            "say done",
            "--db",
            url,
            "-w",
            str(ws),
            "-m",
            "openai:gpt-outage",
            "--retry-for",
            "2s",
        ).strip()
        first = WorkerProc(tmp_path, url, "--once", name="first")
        assert first.wait(timeout=120) == 0
        (end,) = _ends(pg, session)
        assert (end.reason, end.cause) == ("failed", "provider_unavailable")
        assert queue.state(session) == "retry"
        with pg._using() as db:
            row = db.execute(
                "SELECT w.not_before - (extract(epoch FROM clock_timestamp()) * 1000)::bigint "
                "FROM work w JOIN sessions s ON s.sid = w.sid WHERE s.id = %s",
                [session],
            ).fetchone()
        assert row is not None
        assert 0 < int(row[0]) <= RETRY_LATER_MS, "put off for a while, not for good"
        assert queue.claim("nobody", 30.0) is None, "not claimable before its time"

        # The provider is back and the wait is over (the test moves the queue's clock on).
        server.recover()
        with pg._using() as db:
            db.execute("UPDATE work SET not_before = 0")
        second = WorkerProc(tmp_path, url, "--once", name="second")
        assert second.wait(timeout=120) == 0
    ends = _ends(pg, session)
    assert [e.reason for e in ends] == ["failed", "completed"]
    assert queue.state(session) == "idle"
    check_log(pg, session)
    lines = second.lines()
    assert any(f"claim {session} retry" in ln for ln in lines), lines
    assert any(f"finish {session} completed" in ln for ln in lines), lines
