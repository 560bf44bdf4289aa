"""Inputs that used to end in a Python traceback end in one `bubu: error:` line (exit 2), and a
misbehaving MCP server is one warning line while the run goes on."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bubu.log.sqlite import SQLiteStore

from .helpers import assert_no_traceback, bubu, bubu_cmd, bubu_env, error_line, write_script

BAD_URL = "postgresql://u:secret@[::1:5432/x"


def _ui(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        bubu_cmd(db, "ui", "--no-open", *args),
        env=bubu_env(db.parent),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert_no_traceback(done.stdout + done.stderr)
    return done


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_ui_port_out_of_range(tmp_path: Path, port: str) -> None:
    done = _ui(tmp_path / "bubu.db", f"--port={port}")
    assert done.returncode == 2
    assert error_line(done.stderr) == (
        f"bubu: error: --port takes a port number from 0 to 65535 (0: any free one), got {port}"
    )
    assert not (tmp_path / "bubu.db").exists()


def test_ui_default_port_named_and_taken_fails(tmp_path: Path) -> None:
    with socket.socket() as busy:
        try:
            busy.bind(("127.0.0.1", 8642))
            busy.listen()
        except OSError:
            pass  # taken by someone else already: just as good
        done = _ui(tmp_path / "bubu.db", "--port", "8642")
    assert done.returncode == 2
    assert "127.0.0.1:8642 is in use" in error_line(done.stderr)
    assert not (tmp_path / "bubu.db").exists(), "a refused ui opened the log"


@pytest.mark.parametrize(
    "args",
    [
        ("--db", BAD_URL, "sessions"),
        ("copy-store", BAD_URL, "x.db"),
        ("copy-store", "SRC", BAD_URL),
    ],
    ids=["sessions", "copy-src", "copy-dst"],
)
def test_malformed_postgres_url(tmp_path: Path, args: tuple[str, ...]) -> None:
    src = tmp_path / "src.db"
    SQLiteStore(src).close()  # an empty but real source store (a read-only command makes none)
    argv = [a.replace("SRC", str(src)) for a in args]
    done = subprocess.run(
        [sys.executable, "-m", "bubu", *argv],
        env=bubu_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=tmp_path,
    )
    assert_no_traceback(done.stderr)
    assert done.returncode == 2, done.stderr
    line = error_line(done.stderr)
    assert "the PostgreSQL URL is not valid" in line
    assert "secret" not in done.stderr


def test_bubu_home_is_a_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("not a directory\n")
    for env_home in (home, home / "sub"):
        done = subprocess.run(
            [sys.executable, "-m", "bubu", "sessions"],
            env=bubu_env(env_home),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert_no_traceback(done.stderr)
        assert done.returncode == 2
        assert "BUBU_HOME" in error_line(done.stderr)
    assert home.read_text() == "not a directory\n"


@pytest.mark.parametrize("delay", ["1e308", "1e400", "-1", "86401"])
def test_scripted_delay_out_of_range(tmp_path: Path, delay: str) -> None:
    script = tmp_path / "s.jsonl"
    script.write_text('{"text": "x", "delay_s": ' + delay + "}\n")
    db = tmp_path / "bubu.db"
    done = bubu(db, "run", "task", "-m", f"scripted:{script}")
    assert done.returncode == 2
    line = error_line(done.stderr)
    assert "line 1 of the script" in line
    assert "delay_s" in line
    assert bubu(db, "sessions", "--json").stdout.strip() == "[]"


@pytest.mark.heavy
def test_mcp_server_writing_non_json_is_one_line_and_the_run_goes_on(tmp_path: Path) -> None:
    mcp = tmp_path / "mcp.json"
    noisy = "for i in 1 2 3 4 5; do echo not json $i; done; exec sleep 30"
    mcp.write_text(json.dumps({"servers": {"noisy": {"command": ["sh", "-c", noisy]}}}))
    script = write_script(tmp_path / "s.jsonl", [{"text": "done without it"}])
    db = tmp_path / "bubu.db"
    done = bubu(db, "run", "task", "-m", f"scripted:{script}", "--mcp", str(mcp), "--jsonl")
    assert done.returncode == 0, done.stderr
    warnings = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert warnings == [
        "bubu: warning: the MCP server 'noisy' wrote text that is not JSON-RPC to its stdout "
        f"(first: 'not json 1'); its tools are unavailable in this run; fix it in {mcp}"
    ]
    assert "done without it" in done.stdout
