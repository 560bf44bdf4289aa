"""A model server whose error echoes the key it was sent: the stored error holds no key."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine.cli import only_session

from .test_cli import KEY, assert_no_secret, run


class _Echo(BaseHTTPRequestHandler):
    """Answers every request with an error whose body quotes the request's Authorization header,
    raw and JSON-escaped inside a nested JSON text (as a proxy in front of a server might)."""

    status = 401

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        auth = self.headers.get("authorization", "")
        inner = json.dumps({"upstream": {"headers": {"Authorization": auth}}})
        body = json.dumps(
            {"error": {"message": f"rejected {auth}; upstream said {inner}", "type": "bad"}}
        ).encode()
        self.send_response(self.server.status)  # type: ignore[attr-defined]
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def echo_server() -> Iterator[ThreadingHTTPServer]:
    """A local HTTP server that echoes the key in its error bodies."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.heavy
@pytest.mark.parametrize("status", [401, 400])
def test_an_error_that_echoes_the_authorization_header_is_stored_redacted(
    tmp_path: Path, echo_server: ThreadingHTTPServer, status: int
) -> None:
    """openai provider, a local server: a 401 (the key rejected) and a 400 (whose message is kept
    in the error) both end the turn failed, with an error event and no key anywhere."""
    echo_server.status = status  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{echo_server.server_address[1]}/v1"
    ws = tmp_path / "ws"
    ws.mkdir()
    db = tmp_path / "b.db"
    done = run(db, "run", "hello", "-w", str(ws), "-m", "openai:gpt-test", "--base-url", url)
    assert done.returncode == 1, done.stderr
    assert KEY not in done.stderr
    log = assert_no_secret(db, only_session(db), cli=False)
    errors = [
        e["content"]
        for e in (json.loads(line)["event"] for line in log.splitlines())
        if e.get("content", {}).get("kind") == "error"
    ]
    assert errors
    assert errors[0]["status"] == status
    if status == 400:
        assert "rejected" in errors[0]["message"]
