"""`bubu submit --env NAME` and a worker: the worker's secret reaches the command, never the
PostgreSQL log."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from bubu.events import SystemNote, TurnStarted
from bubu.log import codec
from bubu.log.postgres import PostgresStore
from bubu.projections.status import fold_status
from fleet.proc import BUBU, clean_env, write_script
from pgserver import PG_URL

from .test_cli import KEY, TOKEN

pytestmark = pytest.mark.postgres


@pytest.fixture
def url() -> Iterator[str]:
    """A fresh schema's URL, dropped afterwards."""
    name = f"bubu_secret_{uuid.uuid4().hex[:12]}"
    yield f"{PG_URL}?schema={name}"
    with psycopg.connect(PG_URL, autocommit=True) as db:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _bubu(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**clean_env(home), "OPENAI_API_KEY": KEY, "MY_SERVICE_TOKEN": TOKEN}
    return subprocess.run(
        [*BUBU, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.heavy
def test_a_worker_passes_on_what_the_submission_names(tmp_path: Path, url: str) -> None:
    """The command sees MY_SERVICE_TOKEN (named at submit) but not OPENAI_API_KEY; the events in
    PostgreSQL hold neither value and verify."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "expected").write_text(TOKEN)
    check = (
        'test "$MY_SERVICE_TOKEN" = "$(cat expected)" && echo SEEN "$MY_SERVICE_TOKEN"; '
        'echo "[$OPENAI_API_KEY]"'
    )
    model = write_script(
        tmp_path / "m.jsonl",
        [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": check}}]},
            {"text": "done"},
        ],
    )
    sub = _bubu(
        tmp_path,
        "submit",
        "use it",
        "--db",
        url,
        "-w",
        str(ws),
        "-m",
        model,
        "--yes",
        "--env",
        "MY_SERVICE_TOKEN",
    )
    assert sub.returncode == 0, sub.stderr
    sid = sub.stdout.strip()
    worker = _bubu(
        tmp_path, "worker", "--db", url, "--once", "--allow-yes", "--allow-env", "MY_SERVICE_TOKEN"
    )
    assert worker.returncode == 0, worker.stderr
    with PostgresStore(url) as pg:
        records = pg.read(sid)
        assert pg.verify(sid).ok
        assert fold_status(records).state == "completed"
        stored = b"".join(codec.encode(r.event) for r in records)
    assert KEY.encode() not in stored
    assert TOKEN.encode() not in stored
    assert b"SEEN [redacted:MY_SERVICE_TOKEN]" in stored
    assert b"[]" in stored  # the key was not passed on
    (started,) = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
    ]
    assert started.pass_env == ["MY_SERVICE_TOKEN"]


def test_submit_refuses_a_bad_name(tmp_path: Path, url: str) -> None:
    """A value where a name belongs is a one-line error."""
    done = _bubu(
        tmp_path,
        "submit",
        "x",
        "--db",
        url,
        "-m",
        "scripted:/dev/null",
        "--env",
        "MY_SERVICE_TOKEN=abc",
    )
    assert done.returncode == 2
    assert "only the name" in done.stderr
