"""`bubu ui` as a real process: the printed URL carries the token, Ctrl-C stops it cleanly."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from bubu.log.sqlite import SQLiteStore
from bubu.projections.status import fold_status

from .scenarios import clean_env, run_scripted, wait_for, write_script

# `uicmd` registers itself on import; bubu.cli.app imports it, so `bubu ui` always has it.
UI = "import bubu.cli.uicmd; from bubu.cli import main; main()"


def ui(db: Path, *args: str) -> list[str]:
    """The command line of `bubu --db DB ui ARGS`."""
    return [sys.executable, "-c", UI, "--db", str(db), "ui", *args]


def status_of(url: str) -> int:
    """The HTTP status of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        e.close()
        return int(e.code)


def raw_get(port: int, host: str, token: str) -> bytes:
    """The head of the answer to a GET of /api/sessions naming `host`, as a DNS-rebound page
    would."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            f"GET /api/sessions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        return s.recv(64)


def api(url: str, token: str, body: object | None = None) -> Any:
    """GET (or POST `body` to) the API with the bearer token; the decoded JSON."""
    req = urllib.request.Request(
        url,
        data=None if body is None else json.dumps(body).encode(),
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


@pytest.mark.heavy
def test_bubu_ui_prints_a_tokened_url_refuses_without_it_and_suspends_on_ctrl_c(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    sid = run_scripted(sqlite_store, tmp_path, "ws", "Say hi", [{"text": "Hi."}])
    slow = write_script(
        tmp_path / "slow.jsonl", [{"text": " ".join(["slowly"] * 100), "delay_s": 30}]
    )
    proc = subprocess.Popen(
        ui(Path(sqlite_store.path), "--port", "0", "--no-open"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        m = re.fullmatch(r"Bubu UI: (http://127\.0\.0\.1:\d+)/#token=([\w-]{20,})\n", first)
        assert m, first
        base, token = m.groups()
        assert status_of(f"{base}/api/sessions") == 401
        assert status_of(f"{base}/api/sessions?token={token}") == 401  # only the header counts
        assert [s["id"] for s in api(f"{base}/api/sessions", token)["sessions"]] == [sid]
        port = base.rsplit(":", 1)[1]
        assert raw_get(int(port), f"evil.example:{port}", token).startswith(b"HTTP/1.1 421 ")
        assert raw_get(int(port), f"localhost:{port}", token).startswith(b"HTTP/1.1 200 ")
        with urllib.request.urlopen(f"{base}/", timeout=10) as r:
            assert b"/static/app.js" in r.read()
        task = {"task": "go slowly", "workspace": str(tmp_path / "ws"), "model": slow}
        running = api(f"{base}/api/sessions", token, task)["session"]
        wait_for(
            lambda: api(f"{base}/api/sessions/{running}", token)["live"]["draft"] != "",
            what="the turn to stream",
        )
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert out.endswith("Bubu UI stopped\n")
    st = fold_status(sqlite_store.read(running))
    assert (st.state, st.reason) == ("suspended", "suspended by an orderly shutdown")


def test_bubu_ui_says_what_to_do_when_the_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            ui(tmp_path / "bubu.db", "--port", str(port), "--no-open"),
            check=False,
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=30,
        )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"bubu: error: 127.0.0.1:{port} is in use; pass another --port (0 picks a free one)"
    )


def test_the_url_names_the_bound_address() -> None:
    from bubu.cli.uicmd import bind, url_for

    sock = bind("127.0.0.1", 0)
    try:
        assert url_for(sock, "tok") == f"http://127.0.0.1:{sock.getsockname()[1]}/#token=tok"
    finally:
        sock.close()
