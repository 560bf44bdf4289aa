"""The JSON API through Starlette's TestClient: token refusal, sessions, detail, dismiss,
actions."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest
from starlette.testclient import TestClient

from bubu.events import (
    Compaction,
    Info,
    NoticeDismissed,
    PermissionDecision,
    SystemNote,
    TurnStarted,
    make,
)
from bubu.log.codec import sha256_hex
from bubu.log.sqlite import SQLiteStore
from bubu.projections.status import fold_status
from bubu.web import create_app
from bubu.web.auth import BAD_TOKEN, FOREIGN_ORIGIN, NO_TOKEN, NOT_A_HEADER, split_host
from bubu.web.runs import RunManager

from .scenarios import (
    CRASH_TASK,
    HAND_EDIT,
    NOTES,
    SLOW,
    TOKEN,
    Crashed,
    backup,
    bubu,
    clean_env,
    run_scripted,
    wait_for,
    write_script,
)

AUTH = {"authorization": f"Bearer {TOKEN}"}
PORT = 8642
BASE = f"http://127.0.0.1:{PORT}"
"""Where the test client says the UI is bound (the ASGI scope's server)."""

ClientFactory = Callable[..., TestClient]


@pytest.fixture
def make_client(tmp_path: Path) -> Iterator[ClientFactory]:
    """Clients over an app on a store, lifespan running; closed at the end of the test."""
    opened: list[TestClient] = []

    def make(
        store: SQLiteStore, *, auth: bool = True, recover: bool = False, hosts: Sequence[str] = ()
    ) -> TestClient:
        app = create_app(store, token=TOKEN, recover=recover, workspace=str(tmp_path), hosts=hosts)
        client = TestClient(app, base_url=BASE, headers=AUTH if auth else {})
        client.__enter__()
        opened.append(client)
        return client

    yield make
    for c in reversed(opened):
        c.__exit__(None, None, None)


@pytest.fixture
def client(make_client: ClientFactory, recovered_store: SQLiteStore) -> TestClient:
    """An authorized client over a copy of the recovered session's database."""
    return make_client(recovered_store)


def detail(client: TestClient, sid: str) -> Any:
    """The session page's JSON."""
    r = client.get(f"/api/sessions/{sid}")
    assert r.status_code == 200, r.text
    return r.json()


def tool(d: Any, name: str) -> Any:
    """The first tool card named `name`."""
    return next(i for i in d["items"] if i["type"] == "tool" and i["name"] == name)


# -- the token --------------------------------------------------------------------------------


def test_the_page_shell_loads_without_the_token_and_holds_no_secret(
    make_client: ClientFactory, recovered_store: SQLiteStore
) -> None:
    anon = make_client(recovered_store, auth=False)
    page = anon.get(f"/?token={TOKEN}")
    assert page.status_code == 200
    assert "set-cookie" not in page.headers  # no cookie: browsers send cookies to every port
    assert TOKEN not in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["referrer-policy"] == "no-referrer"
    assert anon.get("/static/app.js").status_code == 200
    old = anon.get("/", headers={"cookie": f"bubu_token_{PORT}=an-old-token"})
    assert old.headers["set-cookie"].startswith(f'bubu_token_{PORT}=""; expires=')  # removed


@pytest.mark.parametrize(
    "path",
    [
        "/api/config",
        "/api/sessions",
        "/api/sessions/{sid}",
        "/api/sessions/{sid}/stream",
        "/api/sessions/{sid}/context",
    ],
)
def test_every_api_read_needs_the_bearer_header(
    make_client: ClientFactory, recovered_store: SQLiteStore, crashed: Crashed, path: str
) -> None:
    anon = make_client(recovered_store, auth=False)
    url = path.format(sid=crashed.session)
    none = anon.get(url)
    assert (none.status_code, none.json()) == (401, {"error": NO_TOKEN})
    wrong = anon.get(url, headers={"authorization": "Bearer not-the-token"})
    assert (wrong.status_code, wrong.json()) == (403, {"error": BAD_TOKEN})
    for tried in (
        anon.get(url + f"?token={TOKEN}"),
        anon.get(url, headers={"cookie": f"bubu_token_{PORT}={TOKEN}"}),
    ):
        assert (tried.status_code, tried.json()) == (401, {"error": NOT_A_HEADER})


def test_the_token_as_a_cookie_does_not_change_anything(
    make_client: ClientFactory, recovered_store: SQLiteStore, crashed: Crashed
) -> None:
    """What another local server could replay if a cookie carried the token: it is refused."""
    anon = make_client(recovered_store, auth=False)
    cookie = {"cookie": f"bubu_token_{PORT}={TOKEN}", "origin": BASE}
    assert anon.post(f"/api/sessions/{crashed.session}/dismiss", headers=cookie).status_code == 401
    body = {"task": "rm -rf ~", "workspace": "/tmp", "model": "scripted:-"}
    assert anon.post("/api/sessions", json=body, headers=cookie).status_code == 401
    assert not fold_status(recovered_store.read(crashed.session)).notice_dismissed
    assert [s.id for s in recovered_store.sessions()] == [crashed.session]


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:8642",
        "evil.example",
        f"127.0.0.1:{PORT + 1}",
        "127.0.0.2:8642",
        "localhost.evil.example:8642",
        "[::1",
        "127.0.0.1:x",
        "",
    ],
)
def test_a_request_naming_another_host_is_refused(client: TestClient, host: str) -> None:
    """DNS rebinding: a name the attacker points at 127.0.0.1 reaches nothing, not even the page."""
    for path in ("/api/sessions", "/", "/static/app.js"):
        r = client.get(path, headers={"host": host})
        assert r.status_code == 421, (host, path)
        assert r.json()["error"].startswith("This request named the host")


@pytest.mark.parametrize(
    "host", [f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}", f"LOCALHOST:{PORT}"]
)
def test_the_loopback_names_of_the_bound_port_are_accepted(client: TestClient, host: str) -> None:
    assert client.get("/api/sessions", headers={"host": host}).status_code == 200


def test_another_host_given_to_bubu_ui_is_accepted(
    make_client: ClientFactory, recovered_store: SQLiteStore
) -> None:
    c = make_client(recovered_store, hosts=["devbox.lan"])
    assert c.get("/api/sessions", headers={"host": f"devbox.lan:{PORT}"}).status_code == 200
    assert c.get("/api/sessions", headers={"host": f"other.lan:{PORT}"}).status_code == 421


def test_a_request_from_another_site_or_port_is_refused(
    client: TestClient, crashed: Crashed
) -> None:
    sid = crashed.session
    for origin in ("http://evil.example", f"http://127.0.0.1:{PORT + 1}", "null"):
        r = client.post(f"/api/sessions/{sid}/dismiss", headers={"origin": origin})
        assert (r.status_code, r.json()) == (403, {"error": FOREIGN_ORIGIN}), origin
    for site in ("same-site", "cross-site"):
        r = client.get(f"/api/sessions/{sid}", headers={"sec-fetch-site": site})
        assert r.status_code == 403, site
    own = client.get(f"/api/sessions/{sid}", headers={"sec-fetch-site": "same-origin"})
    assert own.is_success
    assert own.headers["cache-control"] == "no-store"
    assert client.get(f"/api/sessions/{sid}").json()["notice"]["dismissed"] is False
    ok = client.post(f"/api/sessions/{sid}/dismiss", headers={"origin": BASE})
    assert ok.status_code == 200


def test_host_headers_are_split_like_a_server_would() -> None:
    assert split_host("127.0.0.1:8642") == ("127.0.0.1", 8642)
    assert split_host("[::1]:8642") == ("::1", 8642)
    assert split_host("Localhost") == ("localhost", 80)
    assert split_host("[::1]") == ("::1", 80)
    for bad in ("", ":80", "[::1]x", "[::1", "host:port", "host:123456"):
        assert split_host(bad) is None, bad


# -- reading ----------------------------------------------------------------------------------


def test_the_sessions_list_filters_by_status_and_searches_text(
    client: TestClient, recovered_store: SQLiteStore, tmp_path: Path, crashed: Crashed
) -> None:
    done = run_scripted(
        recovered_store,
        tmp_path,
        "parser",
        "Add a verbose flag to the parser",
        [{"text": "Added the flag."}],
    )
    failed = run_scripted(
        recovered_store,
        tmp_path,
        "broken",
        "Refactor the storage layer",
        [{"error": {"status": 400, "message": "the request was malformed"}}],
    )
    rows = client.get("/api/sessions").json()["sessions"]
    by_id = {r["id"]: r for r in rows}
    assert set(by_id) == {done, failed, crashed.session}
    assert by_id[done]["status"] == "completed"
    assert by_id[failed]["status"] == "failed"
    rec = by_id[crashed.session]
    assert rec["status"] == "completed"
    assert rec["notice"] is True
    assert rec["usage"]["model_calls"] == 3
    assert rec["workspace"] == str(crashed.workspace)

    def ids(query: str) -> set[str]:
        return {r["id"] for r in client.get(f"/api/sessions?{query}").json()["sessions"]}

    assert ids("status=failed") == {failed}
    assert ids("status=completed") == {done, crashed.session}
    assert ids("q=parser") == {done}
    assert ids("q=GREETING release") == {crashed.session}
    assert ids("q=nothing-like-this") == set()


def test_the_session_detail_has_transcript_usage_and_the_recovery_review(
    client: TestClient, crashed: Crashed
) -> None:
    d = detail(client, crashed.session)
    assert d["session"]["status"] == "completed"
    first = d["items"][0]
    assert (first["type"], first["kind"], first["text"]) == ("message", "user", CRASH_TASK)
    assert any(i.get("kind") == "thinking" for i in d["items"])
    read = tool(d, "read_file")
    assert read["status"] == "completed"
    assert read["duration_ms"] is not None
    assert "Helo" in read["result_head"]
    assert (tool(d, "edit_file")["status"], tool(d, "edit_file")["recovery"]) == (
        "recovered",
        "applied",
    )
    assert tool(d, "write_file")["status"] == "interrupted"
    assert tool(d, "run_command")["status"] == "interrupted"
    assert len(d["usage"]) == d["session"]["usage"]["model_calls"] == 3
    assert all(u["input_tokens"] > 0 for u in d["usage"])

    n = d["notice"]
    assert n["status"] == "ready"
    assert n["dismissed"] is False
    assert n["verified_applied"] == ["edit_file app.py"]
    assert set(n["pending_review"]) == {"write_file NOTES.md", f"run_command {SLOW}"}
    calls = {c["tool"]: c for c in n["calls"]}
    edit = calls["edit_file"]
    assert (edit["matches"], edit["diff"], edit["diff_note"]) == ("after", None, None)
    assert edit["current_sha256"] == edit["after_sha256"] != edit["before_sha256"]
    write = calls["write_file"]
    assert write["decision"] == "interrupted"
    assert write["matches"] == "neither"
    assert write["before_sha256"] is None
    assert write["arguments"] == {"path": "NOTES.md", "content": NOTES}
    assert "+- Fix the greeting typo." in write["diff"]
    assert "-" + HAND_EDIT.splitlines()[-1] in write["diff"]
    assert calls["run_command"]["arguments"] == {"command": SLOW}
    assert calls["run_command"]["effect"] == "side_effecting"
    assert d["permissions"] == []
    assert d["live"]["running_here"] is False


def test_the_raw_log_an_event_and_the_context(
    client: TestClient, recovered_store: SQLiteStore, crashed: Crashed
) -> None:
    sid = crashed.session
    records = recovered_store.read(sid)
    page = client.get(f"/api/sessions/{sid}/log?after=0&limit=5").json()
    assert [r["seq"] for r in page["rows"]] == [1, 2, 3, 4, 5]
    assert [r["hash"] for r in page["rows"]] == [r.hash for r in records[:5]]
    assert page["rows"][0]["kind"] == "text"
    rest = client.get(f"/api/sessions/{sid}/log?after=5&limit=1000").json()["rows"]
    assert rest[-1]["seq"] == records[-1].seq == page["high_water"]
    one = client.get(f"/api/sessions/{sid}/events/1").json()
    assert (one["seq"], one["hash"]) == (1, records[0].hash)
    assert one["event"]["content"]["text"] == CRASH_TASK
    assert client.get(f"/api/sessions/{sid}/events/99999").status_code == 404
    assert client.get(f"/api/sessions/{sid}/log?after=x").status_code == 400

    ctx = client.get(f"/api/sessions/{sid}/context").json()
    cli = subprocess.run(
        bubu(Path(recovered_store.path), "context", sid, "--json"),
        check=True,
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    same = json.loads(cli.stdout)
    assert ctx["request_digest"] == same["request_digest"]  # what `bubu context` shows, exactly
    assert ctx["calibrated_tokens"] == same["calibrated_tokens"]  # the count both show
    assert (
        f"~{same['calibrated_tokens']:,} of"
        in subprocess.run(
            bubu(Path(recovered_store.path), "context", sid),
            check=True,
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=60,
        ).stdout
    )
    assert ctx["messages"] == same["messages"]
    assert ctx["checkpoint"] is None
    assert ctx["inclusion"]["hidden"] > 0
    assert sum(ctx["inclusion"].values()) == len(records)
    assert str(crashed.workspace) in ctx["system"]
    assert {"run_command", "write_file", "read_result"} <= {t["name"] for t in ctx["tools"]}
    assert ctx["messages"][0] == {"role": "user", "text": CRASH_TASK, "images": []}
    assert ctx["high_water"] == records[-1].seq
    # Every call the model sees is paired with exactly one result, in the message right after it.
    msgs = ctx["messages"]
    for i, m in enumerate(msgs):
        if m["role"] == "assistant":
            calls = [p["call_id"] for p in m["parts"] if p["kind"] == "tool_call"]
            if calls:
                assert [r["call_id"] for r in msgs[i + 1]["results"]] == calls
    interrupted = [r for m in msgs if m["role"] == "tool" for r in m["results"] if r["is_error"]]
    assert {r["name"] for r in interrupted} == {"write_file", "run_command"}


def test_large_results_and_blobs_are_paged(
    make_client: ClientFactory, recovered_store: SQLiteStore, tmp_path: Path
) -> None:
    sid = run_scripted(
        recovered_store,
        tmp_path,
        "counting",
        "Count to 500",
        [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": "seq 1 500"}}]},
            {"text": "Counted."},
        ],
    )
    client = make_client(recovered_store)
    card = tool(detail(client, sid), "run_command")
    assert card["truncated"] is True
    assert card["result_lines"] == 501  # the numbers and the exit status
    assert card["result_head"].splitlines()[-1] == "30"
    page = client.get(
        f"/api/sessions/{sid}/calls/{card['call_id']}/result?offset=101&limit=50"
    ).json()
    assert page["lines"][0] == "101"
    assert len(page["lines"]) == 50
    assert (page["offset"], page["total_lines"], page["sha256"]) == (101, 501, None)
    assert client.get(f"/api/sessions/{sid}/calls/nope/result").status_code == 404

    data = b"first\nsecond\nthird\n"
    note = make(
        session=sid,
        role="system",
        author="system",
        ts=1,
        content=SystemNote(note=Info(text="a blob")),
        visibility="hidden",
    )
    recovered_store.append(sid, [note], expect=recovered_store.head(sid).high_water, blobs=[data])
    blob = client.get(f"/api/blobs/{sha256_hex(data)}?offset=2&limit=1").json()
    assert (blob["lines"], blob["total_lines"], blob["size"]) == (["second"], 3, len(data))
    assert client.get(f"/api/blobs/{'0' * 64}").status_code == 404


# -- actions ----------------------------------------------------------------------------------


def test_dismiss_records_the_dismissal_once(
    client: TestClient, recovered_store: SQLiteStore, crashed: Crashed
) -> None:
    sid = crashed.session
    notice_seq = detail(client, sid)["notice"]["seq"]
    r = client.post(f"/api/sessions/{sid}/dismiss")
    assert r.json() == {"action": "dismiss", "ok": True, "session": sid}
    last = recovered_store.read(sid)[-1]
    assert last.event.author == "user"
    assert isinstance(last.event.content, SystemNote)
    assert last.event.content.note == NoticeDismissed(notice_seq=notice_seq)
    assert detail(client, sid)["notice"]["dismissed"] is True
    row = next(r for r in client.get("/api/sessions").json()["sessions"] if r["id"] == sid)
    assert row["notice"] is False
    assert client.post(f"/api/sessions/{sid}/dismiss").json()["action"] is None
    assert recovered_store.read(sid)[-1].seq == last.seq


def test_a_crashed_session_is_recovered_when_the_ui_starts(
    make_client: ClientFactory, tmp_path: Path, crashed: Crashed
) -> None:
    path = tmp_path / "crashed.db"
    backup(crashed.crashed_db, path)
    with SQLiteStore(path) as store:
        assert fold_status(store.read(crashed.session)).state == "open"
        client = make_client(store, recover=True)
        wait_for(
            lambda: detail(client, crashed.session)["session"]["status"] == "completed",
            what="the start-up recovery",
        )
        d = detail(client, crashed.session)
        assert set(d["notice"]["pending_review"]) == {"write_file NOTES.md", f"run_command {SLOW}"}
        assert d["items"][-2]["text"].endswith("Done.")


PERMISSION_SCRIPT: list[dict[str, Any]] = [
    {
        "text": "Running the greeting.",
        "tool_calls": [{"name": "run_command", "arguments": {"command": "echo hello-from-bubu"}}],
    },
    {"text": "It printed the greeting."},
]


def start(
    client: TestClient, tmp_path: Path, name: str, lines: list[dict[str, Any]], **more: Any
) -> str:
    """Start a task through the API in a fresh workspace (`more`: other fields of the body);
    the session id."""
    ws = tmp_path / name
    ws.mkdir()
    spec = write_script(tmp_path / f"{name}.jsonl", lines)
    r = client.post(
        "/api/sessions", json={"task": f"task {name}", "workspace": str(ws), "model": spec, **more}
    )
    assert r.status_code == 201, r.text
    return str(r.json()["session"])


def pending(client: TestClient, sid: str) -> list[Any]:
    """The permission requests the page can answer."""
    return [p for p in detail(client, sid)["permissions"] if p["answerable"]]


def status(client: TestClient, sid: str) -> str:
    """The session's state as the page shows it."""
    return str(detail(client, sid)["session"]["status"])


@pytest.mark.parametrize(("decision", "card"), [("allow", "completed"), ("deny", "denied")])
def test_a_permission_request_waits_for_the_page(
    client: TestClient,
    recovered_store: SQLiteStore,
    tmp_path: Path,
    decision: Literal["allow", "deny"],
    card: str,
) -> None:
    sid = start(client, tmp_path, "perm", PERMISSION_SCRIPT, sandbox="off")
    wait_for(lambda: bool(pending(client, sid)), what="the permission request")
    req = pending(client, sid)[0]
    assert (req["tool"], req["summary"]) == ("run_command", "run `echo hello-from-bubu`")
    assert status(client, sid) == "running"
    r = client.post(
        f"/api/sessions/{sid}/permissions/{req['request_id']}", json={"decision": decision}
    )
    assert r.status_code == 200, r.text
    wait_for(lambda: status(client, sid) == "completed", what="the turn to end")
    d = detail(client, sid)
    assert tool(d, "run_command")["status"] == card
    head = tool(d, "run_command")["result_head"]
    assert head.startswith("hello-from-bubu" if decision == "allow" else "permission denied")
    decisions = [
        r.event.actions.permission_decision
        for r in recovered_store.read(sid)
        if r.event.actions is not None and r.event.actions.permission_decision is not None
    ]
    assert decisions == [
        PermissionDecision(
            request_id=req["request_id"], call_id=req["call_id"], decision=decision, by="user"
        )
    ]


@pytest.mark.heavy
def test_follow_up_stop_and_resume(client: TestClient, tmp_path: Path) -> None:
    slow = {"text": " ".join(f"word{i}" for i in range(40)), "delay_s": 2.0}
    sid = start(client, tmp_path, "steps", [{"text": "First answer."}, slow, {"text": "Third."}])
    wait_for(lambda: status(client, sid) == "completed", what="the first turn")
    assert client.post(f"/api/sessions/{sid}/stop").status_code == 400
    assert client.post(f"/api/sessions/{sid}/resume").status_code == 400

    assert (
        client.post(f"/api/sessions/{sid}/turns", json={"task": "now the slow part"}).status_code
        == 200
    )
    wait_for(lambda: bool(detail(client, sid)["live"]["draft"]), what="the streamed draft")
    assert client.post(f"/api/sessions/{sid}/turns", json={"task": "again"}).status_code == 400
    assert client.post(f"/api/sessions/{sid}/stop").json()["action"] == "stop"
    wait_for(lambda: status(client, sid) == "stopped", what="the stop")
    d = detail(client, sid)
    assert d["session"]["turns"] == 2
    assert d["items"][-1]["text"] == "turn stopped: stopped by the user"

    assert client.post(f"/api/sessions/{sid}/resume").json()["action"] == "resume"
    wait_for(lambda: status(client, sid) == "completed", what="the resumed turn")
    texts = [i["text"] for i in detail(client, sid)["items"] if i.get("kind") == "assistant"]
    assert texts == ["First answer.", slow["text"]]


def test_stop_answers_a_waiting_permission_with_nobody(client: TestClient, tmp_path: Path) -> None:
    sid = start(client, tmp_path, "waiting", PERMISSION_SCRIPT, sandbox="off")
    wait_for(lambda: bool(pending(client, sid)), what="the permission request")
    client.post(f"/api/sessions/{sid}/stop")
    wait_for(lambda: status(client, sid) == "stopped", what="the stop")
    d = detail(client, sid)
    assert d["permissions"] == []
    assert tool(d, "run_command")["status"] == "failed"
    assert tool(d, "run_command")["result_head"] == "not run: the turn was stopped"


def test_a_new_task_runs_allow_listed_commands_without_asking(
    client: TestClient, recovered_store: SQLiteStore, tmp_path: Path
) -> None:
    ws = tmp_path / "allowed"
    ws.mkdir()
    spec = write_script(tmp_path / "allowed.jsonl", PERMISSION_SCRIPT)
    r = client.post(
        "/api/sessions",
        json={
            "task": "greet",
            "workspace": str(ws),
            "model": spec,
            "sandbox": "off",
            "allow_commands": ["echo hello-*", " ", "git status"],
        },
    )
    assert r.status_code == 201, r.text
    sid = str(r.json()["session"])
    wait_for(lambda: status(client, sid) == "completed", what="the turn to end")
    d = detail(client, sid)
    assert tool(d, "run_command")["result_head"].startswith("hello-from-bubu")
    records = recovered_store.read(sid)
    assert not any(r.event.actions and r.event.actions.permission_request for r in records)
    (opened,) = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
    ]
    assert opened.allow_commands == ["echo hello-*", "git status"]  # recorded with the turn


@pytest.mark.heavy
def test_stop_reaches_a_turn_that_another_process_runs(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    ws = tmp_path / "elsewhere"
    ws.mkdir()
    db = tmp_path / "cli.db"
    spec = write_script(
        tmp_path / "long.jsonl",
        [
            {"tool_calls": [{"name": "run_command", "arguments": {"command": "sleep 60"}}]},
            {"text": "done"},
        ],
    )
    proc = subprocess.Popen(
        bubu(db, "run", "wait a minute", "-w", str(ws), "-m", spec, "--yes"),
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: db.exists() and _running(db), what="the CLI's turn to start its command")
        with SQLiteStore(db) as store:
            client = make_client(store)
            (row,) = client.get("/api/sessions").json()["sessions"]
            sid = row["id"]
            assert (row["status"], row["running_here"]) == ("running", False)
            r = client.post(f"/api/sessions/{sid}/stop")
            assert r.status_code == 200, r.text
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 3, out + err
            assert status(client, sid) == "stopped"
            r = client.post(f"/api/sessions/{sid}/stop")
            assert r.status_code == 400
            assert "nothing to stop" in r.json()["error"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _running(db: Path) -> bool:
    with SQLiteStore(db) as store:
        return any(
            fold_status(store.read(s.id)).state == "open"
            and any(r.event.actions and r.event.actions.tool_dispatch for r in store.read(s.id))
            for s in store.sessions()
        )


def test_bad_requests_get_one_sentence(client: TestClient, tmp_path: Path) -> None:
    def error(r: Any, code: int) -> str:
        assert r.status_code == code, r.text
        return str(r.json()["error"])

    ws = str(tmp_path)
    assert "task is empty" in error(
        client.post("/api/sessions", json={"task": " ", "workspace": ws, "model": "scripted:x"}),
        400,
    )
    assert "unknown model provider" in error(
        client.post("/api/sessions", json={"task": "t", "workspace": ws, "model": "foo:bar"}), 400
    )
    spec = write_script(tmp_path / "s.jsonl", [{"text": "hi"}])
    assert "not a directory" in error(
        client.post("/api/sessions", json={"task": "t", "workspace": ws + "/nope", "model": spec}),
        400,
    )
    assert "not valid" in error(client.post("/api/sessions", content=b"{"), 400)
    assert "not valid" in error(client.post("/api/sessions", json={"task": "t", "extra": 1}), 400)
    assert "not valid" in error(
        client.post(
            "/api/sessions",
            json={"task": "t", "workspace": ws, "model": spec, "allow_commands": "echo *"},
        ),
        400,
    )
    assert "no session" in error(client.get("/api/sessions/ses_nope"), 404)
    assert client.get("/api/sessions").json()["sessions"][0]["title"] == CRASH_TASK


def test_a_new_task_runs_its_commands_in_the_sandbox_it_names(
    client: TestClient, recovered_store: SQLiteStore, tmp_path: Path
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "run_command", "arguments": {"command": "touch x"}}]},
        {"text": "done"},
    ]
    sid = start(client, tmp_path, "boxed", script, sandbox="read-only", network=True)
    wait_for(lambda: status(client, sid) == "completed", what="the turn to end")
    d = detail(client, sid)
    assert "Read-only file system" in tool(d, "run_command")["result_head"]
    records = recovered_store.read(sid)
    assert not any(r.event.actions and r.event.actions.permission_request for r in records)
    (opened,) = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnStarted)
    ]
    assert (opened.sandbox, opened.network) == ("read-only", True)
    bad = client.post(
        "/api/sessions",
        json={"task": "t", "workspace": str(tmp_path), "model": "scripted:x", "sandbox": "lax"},
    )
    assert bad.status_code == 400
    assert "not valid" in bad.json()["error"]


def test_compact_builds_a_checkpoint_of_a_finished_session(
    client: TestClient, recovered_store: SQLiteStore, tmp_path: Path
) -> None:
    steps = [{"tool_calls": [{"name": "list_files", "arguments": {}}]} for _ in range(6)]
    sid = start(client, tmp_path, "compact", [*steps, {"text": "Listed."}])
    wait_for(lambda: status(client, sid) == "completed", what="the turn")

    r = client.post(f"/api/sessions/{sid}/compact")
    assert r.status_code == 200, r.text
    assert r.json()["action"] == "compact"

    def compacted() -> list[Compaction]:
        return [
            n
            for r in recovered_store.read(sid, kinds=("compaction",))
            if isinstance(n := getattr(r.event.content, "note", None), Compaction)
        ]

    wait_for(lambda: bool(compacted()), what="the checkpoint")
    (note,) = compacted()
    assert note.ok
    assert note.checkpoint is not None
    context = client.get(f"/api/sessions/{sid}/context").json()
    assert context["checkpoint"]["key"] == note.checkpoint
    assert detail(client, sid)["session"]["status"] == "completed"


@pytest.mark.heavy
def test_an_action_taken_the_moment_a_turn_completes_waits_for_its_thread_to_close(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log says `completed` before the UI's thread has let go of its host; compacting or
    following up right then is not refused as 'running'."""
    original = RunManager._drop

    def slow_drop(self: RunManager, host: Any) -> None:
        time.sleep(1.0)  # the thread is still closing after the turn ended
        original(self, host)

    monkeypatch.setattr(RunManager, "_drop", slow_drop)
    sid = start(client, tmp_path, "settle", [{"text": "Done."}, {"text": "Again."}])
    wait_for(lambda: status(client, sid) == "completed", what="the turn")
    r = client.post(f"/api/sessions/{sid}/compact")
    assert r.status_code == 200, r.text
    wait_for(lambda: status(client, sid) == "completed", what="the compaction")
    r = client.post(f"/api/sessions/{sid}/turns", json={"task": "again"})
    assert r.status_code == 200, r.text
    wait_for(lambda: status(client, sid) == "completed", what="the second turn")


def test_the_detail_holds_the_plan_and_the_memory_of_the_workspace_only(
    client: TestClient, recovered_store: SQLiteStore, tmp_path: Path
) -> None:
    remember = {"name": "remember", "arguments": {"key": "lint", "text": "ruff check"}}
    steps = [{"text": "lint", "status": "pending"}]
    run_scripted(
        recovered_store, tmp_path, "mem", "remember", [{"tool_calls": [remember]}, {"text": "ok"}]
    )
    sid = run_scripted(
        recovered_store,
        tmp_path,
        "mem",
        "plan",
        [{"tool_calls": [{"name": "update_plan", "arguments": {"items": steps}}]}, {"text": "ok"}],
    )
    other = run_scripted(recovered_store, tmp_path, "elsewhere", "nothing", [{"text": "ok"}])
    d = detail(client, sid)
    assert d["plan"] == steps
    assert [(n["key"], n["text"]) for n in d["memory"]] == [("lint", "ruff check")]
    o = detail(client, other)
    assert o["plan"] is None
    assert o["memory"] == []


def test_numbers_beyond_the_database_are_refused_not_a_500(
    client: TestClient, crashed: Crashed
) -> None:
    sid = crashed.session
    huge = "99999999999999999999"
    missing = client.get(f"/api/sessions/{sid}/events/{huge}")
    assert missing.status_code == 404
    assert missing.json()["error"] == f"session {sid} has no event {huge}"
    assert client.get(f"/api/sessions/{sid}/events/0").status_code == 404
    bad = client.get(f"/api/sessions/{sid}/log?after={huge}")
    assert bad.status_code == 400
    assert "after must be a non-negative whole number" in bad.json()["error"]
    assert client.get(f"/api/sessions/{sid}/log?after=²").status_code == 400


def test_form_errors_speak_of_the_form_not_of_flags(
    make_client: ClientFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BUBU_MODEL", raising=False)
    monkeypatch.setenv("BUBU_HOME", str(tmp_path / "home"))
    client = make_client(SQLiteStore(tmp_path / "fresh.db"))
    no_model = client.post("/api/sessions", json={"task": "fix it", "workspace": str(tmp_path)})
    missing = client.post(
        "/api/sessions",
        json={"task": "fix it", "workspace": str(tmp_path / "nope"), "model": "scripted:/dev/null"},
    )
    empty = client.post(
        "/api/sessions",
        json={"task": "  ", "workspace": str(tmp_path), "model": "scripted:/dev/null"},
    )
    said = [r.json()["error"] for r in (no_model, missing, empty)]
    assert [r.status_code for r in (no_model, missing, empty)] == [400, 400, 400], said
    assert said[0].startswith("no model given: fill in the Model field with provider:model (e.g.")
    assert said[1].endswith("create it or choose another folder in the Workspace field")
    assert said[2] == 'the task is empty; say what Bubu should do, e.g. "fix the failing test"'
    for text in said:
        assert not re.search(r"pass -|--base-url|-w DIR|bubu run", text), text


def test_the_detail_and_the_list_show_a_sessions_sub_agents(
    client: TestClient, recovered_store: SQLiteStore, tmp_path: Path
) -> None:
    kid = tmp_path / "kid.jsonl"
    kid.write_text('{"text": "found it"}\n')
    call = {"name": "delegate", "arguments": {"task": "look", "model": f"scripted:{kid}"}}
    sid = run_scripted(
        recovered_store, tmp_path, "kids", "delegate", [{"tool_calls": [call]}, {"text": "ok"}]
    )
    d = detail(client, sid)
    (child,) = d["children"]
    assert child["state"] == "completed"
    assert child["tokens"] > 0
    assert detail(client, child["session"])["session"]["parent"] == sid
    rows = {r["id"]: r for r in client.get("/api/sessions").json()["sessions"]}
    assert rows[child["session"]]["parent"] == sid
    assert rows[sid]["parent"] is None
