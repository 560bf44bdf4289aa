"""A day on real servers: `--max-cost` binds on a local server once its model has a configured
price, and says once that it cannot bind while it has none (llama-cpp-python serving SmolLM2)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bubu.events import SystemNote, TurnEnded
from bubu.log.sqlite import SQLiteStore
from engine.cli import bubu_cmd, bubu_env

from .conftest import MODEL, Server

pytestmark = [pytest.mark.real_server, pytest.mark.slow]

TASK = "Reply with one short sentence that says hello."


def _run(db: Path, ws: Path, server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = bubu_cmd(
        db,
        "run",
        TASK,
        "-w",
        str(ws),
        "-m",
        f"openai:{MODEL}",
        "--base-url",
        server.base_url,
        "--max-steps",
        "3",
        *args,
    )
    return subprocess.run(
        cmd,
        env=bubu_env(db.parent, None),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _end(db: Path) -> TurnEnded:
    with SQLiteStore(db) as store:
        (info,) = store.sessions()
        ends = [
            c.note
            for r in store.read(info.id)
            if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnEnded)
        ]
    return ends[-1]


def test_max_cost_binds_on_a_local_server_with_a_configured_price(
    llama_server: Server, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    # A price no call can stay under: the first call takes the turn past $0.01.
    (tmp_path / "config.toml").write_text(
        f'[prices."openai:{MODEL}"]\ninput = 100000.0\noutput = 100000.0\n'
    )
    done = _run(tmp_path / "bubu.db", ws, llama_server, "--max-cost", "0.01")
    assert "cannot limit it" not in done.stderr
    assert done.returncode == 3, done.stdout + done.stderr
    end = _end(tmp_path / "bubu.db")
    assert end.reason == "stopped"
    assert (end.message or "").startswith("the cost limit of $0.01 was reached")


def test_max_cost_with_an_unpriced_local_model_says_once_it_cannot_bind(
    llama_server: Server, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    done = _run(tmp_path / "bubu.db", ws, llama_server, "--max-cost", "0.01")
    assert done.stderr.count("cannot limit it") == 1, done.stderr
    assert f'[prices."openai:{MODEL}"]' in done.stderr
