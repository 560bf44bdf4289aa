"""`bubu submit` takes the run's model options: a task queued for a local server with
`--base-url` (and `--context-window`) is run by a worker against that server."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu.log.postgres import PostgresStore
from bubu.projections.status import fold_status
from providers.servers import serve, stream_file

from .proc import WorkerProc, bubu_ok

pytestmark = pytest.mark.postgres


@pytest.mark.heavy
def test_a_submitted_task_runs_against_the_server_it_was_submitted_for(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with serve({("POST", "/v1/chat/completions"): stream_file("compatible_text.sse")}) as s:
        sid = bubu_ok(
            tmp_path,
            "submit",
            "say done",
            "--db",
            url,
            "-w",
            str(ws),
            "-m",
            "openai:local",
            "--base-url",
            f"{s.url}/v1",
            "--context-window",
            "4096",
        ).strip()
        # The worker names the server it lets tasks send its key to.
        worker = WorkerProc(tmp_path, url, "--once", "--allow-base-url", f"{s.url}/v1")
        assert worker.wait() == 0
        asked = s.bodies("/v1/chat/completions")
    assert len(asked) == 1, "the worker called the submitted server"
    assert asked[0]["model"] == "local"
    assert fold_status(pg.read(sid)).state == "completed"
