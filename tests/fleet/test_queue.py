"""The work queue: derived from the log by the database, claimed under leases, never shared."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from psycopg import sql

from bubu.events import (
    Actions,
    Event,
    Note,
    RecoveryNotice,
    RunStarted,
    SystemNote,
    Text,
    TurnEnded,
    TurnStarted,
    make,
)
from bubu.log.postgres import PostgresStore, WorkQueue
from bubu.log.postgres._schema import PG_MIGRATIONS
from bubu.log.store import SessionInfo
from pgserver import PG_URL

pytestmark = pytest.mark.postgres


def user(session: str, text: str = "do it", *, hidden: bool = False) -> Event:
    return make(
        session=session,
        role="user",
        author="user",
        ts=1,
        content=Text(text=text),
        visibility="hidden" if hidden else "visible",
    )


def note(session: str, n: Note) -> Event:
    return make(
        session=session,
        role="system",
        author="system",
        ts=1,
        content=SystemNote(note=n),
        visibility="hidden",
    )


def add(pg: PostgresStore, session: str, *events: Event) -> None:
    pg.append(session, events, expect=pg.head(session).high_water)


def new(pg: PostgresStore, title: str = "t") -> SessionInfo:
    return pg.create_session(title=title, workspace="/tmp", model="scripted:x")


def test_the_queue_follows_the_log(pg: PostgresStore, queue: WorkQueue) -> None:
    s = new(pg).id
    assert queue.state(s) is None
    add(pg, s, user(s))
    assert queue.state(s) == "queued"
    add(pg, s, note(s, TurnStarted(model="m")), note(s, RunStarted(cause="new")))
    assert queue.state(s) == "open"
    add(pg, s, make(session=s, role="model", author="agent", ts=1, content=Text(text="hi")))
    assert queue.state(s) == "open"
    add(pg, s, note(s, RecoveryNotice(status="blocked", reason="crash loop")))
    assert queue.state(s) == "blocked"
    add(pg, s, note(s, RunStarted(cause="recovery")))
    assert queue.state(s) == "open"
    add(pg, s, note(s, RecoveryNotice(status="ready")))
    assert queue.state(s) == "open"
    add(pg, s, note(s, TurnEnded(reason="completed")))
    assert queue.state(s) == "idle"
    add(pg, s, user(s, "and now the docs"))
    assert queue.state(s) == "queued"
    assert queue.counts() == {"queued": 1}


def test_a_request_appended_with_its_turn_start_is_open_not_queued(
    pg: PostgresStore, queue: WorkQueue
) -> None:
    s = new(pg).id
    add(pg, s, user(s), note(s, TurnStarted(model="m")))
    assert queue.state(s) == "open"


def test_only_visible_user_text_queues_and_odd_text_never_blocks_an_append(
    pg: PostgresStore, queue: WorkQueue
) -> None:
    s = new(pg).id
    add(pg, s, user(s, "a hidden aside", hidden=True))
    add(
        pg,
        s,
        make(
            session=s,
            role="model",
            author="agent",
            ts=1,
            content=Text(text="x"),
            actions=Actions(state_delta={"role": "user"}),
        ),
    )
    assert queue.state(s) is None
    # NUL and a literal backslash-u sequence: PostgreSQL's JSON refuses \u0000 in text.
    add(pg, s, user(s, "nul \x00 and \\u0000 and \U0001f600"))
    assert queue.state(s) == "queued"
    assert pg.verify(s).ok


def test_a_claim_takes_the_oldest_claimable_session_under_a_new_lease(
    pg: PostgresStore, queue: WorkQueue
) -> None:
    first, second = new(pg, "first").id, new(pg, "second").id
    add(pg, first, user(first))
    add(pg, second, user(second))
    a = queue.claim("worker-a", 30)
    b = queue.claim("worker-b", 30)
    assert a is not None
    assert b is not None
    assert (a.session.id, a.state, a.released) == (first, "queued", False)
    assert b.session.id == second
    assert pg.current_lease(first) == a.lease
    assert a.lease.owner == "worker-a"
    assert a.lease.epoch == 1
    assert queue.claim("worker-c", 30) is None


def test_a_live_lease_is_skipped_an_expired_or_released_one_is_claimed(
    pg: PostgresStore, queue: WorkQueue
) -> None:
    s = new(pg).id
    add(pg, s, user(s), note(s, TurnStarted(model="m")))
    live = pg.acquire_lease(s, "runner", 0.3)
    assert queue.claim("worker", 30) is None
    while pg.now_ms() <= live.expires_ms:  # the database's clock decides expiry
        time.sleep(0.05)
    expired = queue.claim("worker", 30)
    assert expired is not None
    assert (expired.state, expired.released, expired.lease.epoch) == ("open", False, 2)
    pg.release_lease(expired.lease)
    handed = queue.claim("other", 30)
    assert handed is not None
    assert (handed.released, handed.lease.epoch) == (True, 3)


def test_blocked_idle_and_deferred_sessions_are_not_claimed(
    pg: PostgresStore, queue: WorkQueue
) -> None:
    blocked, idle, deferred = new(pg).id, new(pg).id, new(pg).id
    add(
        pg,
        blocked,
        user(blocked),
        note(blocked, TurnStarted(model="m")),
        note(blocked, RecoveryNotice(status="blocked", reason="broken chain")),
    )
    add(
        pg,
        idle,
        user(idle),
        note(idle, TurnStarted(model="m")),
        note(idle, TurnEnded(reason="failed")),
    )
    add(pg, deferred, user(deferred))
    assert queue.defer(deferred, error="no such workspace") == pytest.approx(5000, abs=200)
    assert queue.defer(deferred) == pytest.approx(10_000, abs=200)
    assert queue.claim("worker", 30) is None
    assert queue.waiting() == [deferred]
    # A new turn start resets the back-off.
    add(pg, deferred, note(deferred, TurnStarted(model="m")))
    assert queue.claim("worker", 30) is not None


def test_concurrent_claimers_never_share_a_session(pg: PostgresStore, url: str) -> None:
    ids = [new(pg).id for _ in range(24)]
    for s in ids:
        add(pg, s, user(s))
    got: dict[str, list[str]] = {}
    lock = threading.Lock()

    def claimer(name: str) -> None:
        with PostgresStore(url) as store:
            assert isinstance(store, PostgresStore)
            q = WorkQueue(store)
            while (c := q.claim(name, 30)) is not None:
                with lock:
                    got.setdefault(c.session.id, []).append(name)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(got) == sorted(ids)
    assert all(len(owners) == 1 for owners in got.values()), got


def test_the_migration_derives_the_queue_from_logs_written_before_it(
    pg: PostgresStore, schema: str, url: str
) -> None:
    queued, open_, done = new(pg).id, new(pg).id, new(pg).id
    add(pg, queued, user(queued))
    add(pg, open_, user(open_), note(open_, TurnStarted(model="m")))
    add(
        pg,
        done,
        user(done),
        note(done, TurnStarted(model="m")),
        note(done, TurnEnded(reason="stopped")),
    )
    pg.close()
    # Take the schema back to before the queue existed (as an older Bubu left it).
    with psycopg.connect(PG_URL, autocommit=True) as db:
        db.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        db.execute("DROP TRIGGER events_work ON events")
        db.execute("DROP TABLE work")
        db.execute("DROP FUNCTION events_work(), work_step(bigint, bigint, text, bytea)")
        db.execute("DELETE FROM bubu_migrations WHERE version = 2")
    with PostgresStore(url) as again:
        assert isinstance(again, PostgresStore)
        q = WorkQueue(again)
        assert (q.state(queued), q.state(open_), q.state(done)) == ("queued", "open", "idle")
        assert [v for v, _ in again.migrations()] == [m.version for m in PG_MIGRATIONS]


def test_a_machine_whose_clock_runs_ahead_never_judges_a_live_lease_dead(
    pg: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bubu import clock
    from bubu.engine.recovery import needs_recovery, recover_session
    from bubu.engine.session import Host
    from bubu.providers.scripted import ScriptedProvider

    info = new(pg)
    s = info.id
    add(pg, s, user(s), note(s, TurnStarted(model="m")), note(s, RunStarted(cause="new")))
    # A worker on another machine holds the lease for 30 s more, by the database's clock.
    held = pg.acquire_lease(s, "worker-host-b:4242:abc", 30)
    assert not needs_recovery(pg, info)
    real = clock.now_ms
    monkeypatch.setattr(clock, "now_ms", lambda: real() + 120_000)  # this machine: 2 min ahead
    assert abs(pg.now_ms() - real()) < 5_000, "the database's clock is not this machine's"
    assert not needs_recovery(pg, info), "the live lease was judged by the local clock"
    host = Host(store=pg, provider=ScriptedProvider("/dev/null"), tools={})
    assert recover_session(host, info).outcome == "busy", "a live lease is never stolen"
    assert pg.current_lease(s) == held
